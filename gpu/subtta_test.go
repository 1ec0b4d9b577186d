//go:build cuda && cgo

package gpu

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
)

// stepCounter is the device counting the uploads of one size (a batch's
// images) and its Adam steps.
type stepCounter struct {
	*device
	size                int
	mu                  sync.Mutex
	imageUps, adamSteps int
}

func (c *stepCounter) Upload(dst kernel.Buf, src []float32) error {
	if len(src) == c.size {
		c.mu.Lock()
		c.imageUps++
		c.mu.Unlock()
	}
	return c.device.Upload(dst, src)
}

func (c *stepCounter) AdamStep(p, g, m, v kernel.Buf, n int, s kernel.AdamScalars, skip kernel.Buf) error {
	c.mu.Lock()
	c.adamSteps++
	c.mu.Unlock()
	return c.device.AdamStep(p, g, m, v, n, s, skip)
}

// noAdam is the device without its Adam (kernel.AdamDevice): a method's
// optimizer stays on the host.
type noAdam struct{ kernel.Float64Device }

// TestSubTTAStepOnDevice runs three SubTTA-M steps (AdamW) of clip-tiny on
// random images with the device set, the optimizer on the device
// (adam_step, non_finite, the gradients left there) and on the host
// (optim.Adam, everything else on the device alike): the logits and losses
// agree bit for bit, a step uploads its images once and runs one adam_step
// per optimizer step; the first alignment loss is the CPU's within 1e-5.
func TestSubTTAStepOnDevice(t *testing.T) {
	d := openOrSkip(t, Options{})
	const rel = "fixtures/clip-tiny.openai.safetensors"
	rng := rand.New(rand.NewPCG(13, 14))
	const batch, classes = 4, 6
	var head *mat.Dense
	var pixels [][]float32
	run := func(dev kernel.Device) (logits [][]float64, losses []float64) {
		m, err := clip.Load(fixture.Path(t, rel), clip.Options{Config: fixturefile.Config(t, rel)})
		if err != nil {
			t.Fatal(err)
		}
		if head == nil {
			e := m.EmbedDim()
			head = mat.NewDense(classes, e, nil)
			for i := range classes {
				row := head.RawRowView(i)
				for j := range row {
					row[j] = rng.NormFloat64()
				}
				n := mat.Norm(mat.NewVecDense(e, row), 2)
				for j := range row {
					row[j] /= n
				}
			}
			size := 3 * m.Config.Vision.ImageSize * m.Config.Vision.ImageSize
			for range 3 {
				pixels = append(pixels, randSlice(rng, batch*size))
			}
		}
		s, err := tta.NewSubTTA(m, head, tta.SubTTAConfig{Subspace: feature.SubspaceOptions{Rank: 4}, Alpha: 0.5,
			Loss: tta.LossMint, Optimizer: optim.AdamW(1e-2, 0.01)})
		if err != nil {
			t.Fatal(err)
		}
		onDevice(dev, func() {
			for _, px := range pixels {
				res, err := s.Step(px, batch)
				if err != nil {
					t.Fatal(err)
				}
				logits = append(logits, res.Logits.RawMatrix().Data)
				losses = append(losses, res.Diag.Losses["align"], res.Diag.Losses["mint"])
			}
		})
		return logits, losses
	}
	c := &stepCounter{device: d}
	_, cpuLosses := run(nil) // sets head and pixels
	c.size = len(pixels[0])
	devLogits, devLosses := run(c)
	hostLogits, hostLosses := run(noAdam{d})
	if c.imageUps != len(pixels) || c.adamSteps != 2*len(pixels) {
		t.Errorf("%d steps: images uploaded %d times, %d Adam steps on the device; want once and twice a step", len(pixels), c.imageUps, c.adamSteps)
	}
	for i := range hostLogits {
		for j, w := range hostLogits[i] {
			if math.Float64bits(devLogits[i][j]) != math.Float64bits(w) {
				t.Fatalf("step %d logit %d: %v with the optimizer on the device, %v on the host", i, j, devLogits[i][j], w)
			}
		}
	}
	for i, w := range hostLosses {
		if math.Float64bits(devLosses[i]) != math.Float64bits(w) {
			t.Fatalf("loss %d: %v with the optimizer on the device, %v on the host", i, devLosses[i], w)
		}
	}
	// Against the CPU: the first alignment loss, before any update, within
	// 1e-5 (TestSubTTAOnDevice's bound). Later values are not compared
	// here: on random images Adam's first steps (of size lr whatever a
	// gradient's size) carry the device's rounding into the logits by
	// percents, the host optimizer on the device as much.
	if rel := math.Abs(devLosses[0]-cpuLosses[0]) / math.Abs(cpuLosses[0]); !(rel <= 1e-5) {
		t.Errorf("L_align of the first step: %v on the device, %v on the CPU", devLosses[0], cpuLosses[0])
	}
}
