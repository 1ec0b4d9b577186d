//go:build cuda && cgo

package gpu

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/online"
)

// aheadCounter is the device counting its uploads ahead and their awaits.
type aheadCounter struct {
	*device
	ahead, awaits atomic.Int32
}

func (c *aheadCounter) UploadAhead(src []float32) (kernel.Buf, error) {
	c.ahead.Add(1)
	return c.device.UploadAhead(src)
}

func (c *aheadCounter) Await(b kernel.Buf) error {
	c.awaits.Add(1)
	return c.device.Await(b)
}

// noPrefetch is the device without UploadAhead (kernel.Prefetcher): the
// runner's reader uploads each batch on the device's stream, as a pass
// would.
type noPrefetch struct{ adamFloat64 }

type adamFloat64 interface {
	kernel.AdamDevice
	kernel.Float64Device
}

// imageSet is a online.BatchDomain of random images.
type imageSet struct{ img [][]float32 }

func (s *imageSet) Name() string { return "random" }
func (s *imageSet) Len() int     { return len(s.img) }
func (s *imageSet) Sample(i int) ([]float32, int, error) {
	return s.img[i], i % 2, nil
}
func (s *imageSet) Samples(idx []int, dst []float32) ([]float32, []int, error) {
	labels := make([]int, len(idx))
	for j, i := range idx {
		dst = append(dst, s.img[i]...)
		labels[j] = i % 2
	}
	return dst, labels, nil
}

// logitsOf records a method's logits, step by step.
type logitsOf struct {
	tta.Method
	logits [][]float64
}

func (m *logitsOf) Step(px []float32, n int) (*tta.Result, error) {
	res, err := m.Method.Step(px, n)
	if err == nil {
		m.logits = append(m.logits, append([]float64(nil), res.Logits.RawMatrix().Data...))
	}
	return res, err
}

// TestRunnerUploadsAheadOnDevice runs SubTTA-M on clip-tiny over a stream
// of random images with the online runner, its reader uploading each batch
// ahead (UploadAhead on the second stream, from the reader's goroutine,
// while the method steps on the batch before) and, again, without
// kernel.Prefetcher (the reader's uploads on the device's stream): the
// logits are the same bits, every batch went up ahead and was awaited
// once. On the stand-in CUDA a pass that did not wait would read the
// buffer before its copy; on a GPU the two goroutines and streams run
// truly side by side.
func TestRunnerUploadsAheadOnDevice(t *testing.T) {
	d := openOrSkip(t, Options{})
	const rel = "fixtures/clip-tiny.openai.safetensors"
	const n, bs, classes = 20, 4, 5
	rng := rand.New(rand.NewPCG(17, 18))
	var set *imageSet
	var head *mat.Dense
	run := func(dev kernel.Device) [][]float64 {
		m, err := clip.Load(fixture.Path(t, rel), clip.Options{Config: fixturefile.Config(t, rel)})
		if err != nil {
			t.Fatal(err)
		}
		if set == nil {
			size := 3 * m.Config.Vision.ImageSize * m.Config.Vision.ImageSize
			set = &imageSet{}
			for range n {
				set.img = append(set.img, randSlice(rng, size))
			}
			head = mat.NewDense(classes, m.EmbedDim(), nil)
			raw := head.RawMatrix().Data
			for i := range raw {
				raw[i] = rng.NormFloat64()
			}
		}
		s, err := tta.NewSubTTA(m, head, tta.SubTTAConfig{Subspace: feature.SubspaceOptions{Rank: 4}, Alpha: 0.5,
			Loss: tta.LossMint, Optimizer: optim.AdamW(1e-2, 0.01)})
		if err != nil {
			t.Fatal(err)
		}
		rec := &logitsOf{Method: s}
		onDevice(dev, func() {
			r := online.Runner{Method: rec, Config: online.RunnerConfig{BatchSize: bs, Shuffle: true, Seed: 1}}
			if _, err := r.Run([]online.Domain{set}); err != nil {
				t.Fatal(err)
			}
		})
		return rec.logits
	}
	c := &aheadCounter{device: d}
	got := run(c)
	want := run(noPrefetch{d})
	if len(got) != n/bs || len(want) != n/bs {
		t.Fatalf("%d and %d steps, want %d", len(got), len(want), n/bs)
	}
	for b := range want {
		for i, w := range want[b] {
			if math.Float64bits(got[b][i]) != math.Float64bits(w) {
				t.Fatalf("batch %d, logit %d: %v over batches uploaded ahead, %v without", b, i, got[b][i], w)
			}
		}
	}
	if a, w := c.ahead.Load(), c.awaits.Load(); a != n/bs || w != n/bs {
		t.Errorf("%d batches uploaded ahead and %d awaited, want %d and %d", a, w, n/bs, n/bs)
	}
}
