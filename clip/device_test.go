package clip_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/devicetest"
)

// TestDeviceSeam runs the built-in model's towers through the
// device seam (autograd.SetDevice) on kernel.Host and compares them with
// the CPU path: image and text features without gradients (the blocks as
// one op on the device), and the LayerNorm gradients of a backward pass
// through the vision tower, as adaptation takes it (every block forward
// and backward on the device), within 1e-5 of the largest value (2.7e-7
// and 8.7e-7 measured): on a device a linear layer's bias is added after
// the product's sum rather than with its first block (a rounding of each
// value), and the last block runs for every token rather than for the
// class tokens only, so its LayerNorms' gradients sum (zeros) over more
// rows in another order. On a GPU the same code runs with gpu's device
// (gpu's tests compare it within 1e-4).
func TestDeviceSeam(t *testing.T) {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	size := m.Config.Vision.ImageSize
	n := 5
	rng := rand.New(rand.NewPCG(1, 2))
	px := make([]float32, n*3*size*size)
	for i := range px {
		px[i] = float32(rng.NormFloat64())
	}
	tok := builtin.Tokenizer()
	var tokens [][]int
	for _, c := range data.CIFAR10Classes[:4] {
		ids, err := tok.Tokenize("a photo of a "+c+".", m.Config.Text.ContextLength, true)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, ids)
	}
	run := func() (img, txt []float32, grads [][]float32) {
		i, err := m.EncodeImage(px, n)
		if err != nil {
			t.Fatal(err)
		}
		x, err := m.EncodeText(tokens)
		if err != nil {
			t.Fatal(err)
		}
		m.SetVisionTrainable(true)
		defer m.SetVisionTrainable(false)
		images, err := m.Images(px, n)
		if err != nil {
			t.Fatal(err)
		}
		f := m.ImageFeatures(images)
		r, c := f.Value().Shape()[0], f.Value().Shape()[1]
		seed := make([]float32, r*c)
		for k := range seed {
			seed[k] = float32(k%5) - 2
		}
		f.AccGrad(smat.NewDense[float32](smat.WithShape(r, c), smat.WithBacking(seed)))
		if err := ag.Backward(f); err != nil {
			t.Fatal(err)
		}
		lns, _ := m.VisionLayerNorms()
		for _, ln := range lns {
			for _, p := range ln.Parameters() {
				grads = append(grads, slices.Clone(p.Grad().Data().F32()))
				p.ZeroGrad()
			}
		}
		return slices.Clone(i.Value().Data().F32()), slices.Clone(x.Value().Data().F32()), grads
	}
	wantImg, wantTxt, wantGrads := run()
	dev := &devicetest.BackwardCounter{Device: kernel.Host}
	autograd.SetDevice(dev)
	img, txt, grads := run()
	autograd.SetDevice(nil)
	// Each block's two, ln_post's and ln_pre's.
	if n, want := int(dev.LayerNormBackwards.Load()), 2*len(m.Vision.Blocks)+2; n != want {
		t.Errorf("%d LayerNorm backward passes on the device, want %d", n, want)
	}
	close := func(name string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) || len(want) == 0 {
			t.Fatalf("%s: %d values through the seam, %d on the CPU", name, len(got), len(want))
		}
		scale, worst := 0.0, 0.0
		for i, w := range want {
			scale = max(scale, math.Abs(float64(w)))
			worst = max(worst, math.Abs(float64(got[i]-w)))
		}
		t.Logf("%s: %.2e of the largest value from the CPU's", name, worst/scale)
		if worst > 1e-5*scale {
			t.Errorf("%s: %.2e from the CPU's, more than 1e-5 of its largest value %.2e", name, worst, scale)
		}
	}
	close("image features", img, wantImg)
	close("text features", txt, wantTxt)
	if len(grads) != len(wantGrads) {
		t.Fatalf("%d gradients through the seam, %d on the CPU", len(grads), len(wantGrads))
	}
	worstRel := 0.0
	for i := range wantGrads {
		scale, worst := 0.0, 0.0
		for k, w := range wantGrads[i] {
			scale = max(scale, math.Abs(float64(w)))
			worst = max(worst, math.Abs(float64(grads[i][k]-w)))
		}
		if worst > 1e-5*scale {
			t.Errorf("LayerNorm gradient %d: %.2e from the CPU's, more than 1e-5 of its largest value %.2e", i, worst, scale)
		}
		worstRel = max(worstRel, worst/scale)
	}
	t.Logf("LayerNorm gradients: %.2e of the largest value from the CPU's, at worst", worstRel)
}
