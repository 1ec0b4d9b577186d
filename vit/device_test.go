package vit

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/weights"
)

// featureTol bounds the difference between the tower's features through
// the device seam on kernel.Host and on the CPU, relative to the largest
// value: out_proj's and c_proj's products are added onto the residual
// stream with their bias, (x + b) + Σ, where the CPU rounds (Σ + b) + x,
// so each of their outputs is rounded once otherwise (6e-8 relative), and
// the blocks above, ln_post and the projection carry that on (measured
// 2.5e-7 over three blocks), as autograd's seam tests bound it (biasTol).
// A wrong term gives 1e-2 and more.
const featureTol = 1e-5

// closeFeatures fails unless got is within featureTol of want, relative
// to want's largest value.
func closeFeatures(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values through the seam, %d on the CPU", name, len(got), len(want))
	}
	scale, worst := 0.0, 0.0
	for i, w := range want {
		scale = max(scale, math.Abs(float64(w)))
		worst = max(worst, math.Abs(float64(got[i]-w)))
	}
	if worst > featureTol*scale || scale == 0 {
		t.Fatalf("%s: %.2e from the CPU's, largest value %.2e", name, worst, scale)
	}
	t.Logf("%s: %.2e of the largest value from the CPU's", name, worst/scale)
}

// randomImages returns batch images of size×size pixels, each value drawn
// from rng's normal distribution, and the tensor [batch, 3·size·size] over
// them.
func randomImages(rng *rand.Rand, batch, size int) ([]float32, *smat.Dense[float32]) {
	px := make([]float32, batch*3*size*size)
	for i := range px {
		px[i] = float32(rng.NormFloat64())
	}
	return px, smat.NewDense[float32](smat.WithShape(batch, 3*size*size), smat.WithBacking(px))
}

// TestTowerOnDevice runs a forward pass without gradients through the
// device seam on kernel.Host (autograd.VisionTowerOnDevice: patches, their
// embedding, the tokens, ln_pre, the blocks, the class tokens, ln_post and
// the projection on the device) and compares it with the CPU path within
// featureTol; it counts that the images go up once and only the features come
// back; likewise a pass recording for backward with the LayerNorms
// trainable, and its backward pass, which downloads the LayerNorms'
// gradients in one call (one wait for the device).
func TestTowerOnDevice(t *testing.T) {
	cfg := &weights.CLIPConfig{
		EmbedDim:     24,
		Vision:       weights.VisionConfig{Width: 40, Layers: 3, Heads: 4, MLPWidth: 96, PatchSize: 8, ImageSize: 36},
		LayerNormEps: weights.DefaultLayerNormEps,
		Activation:   "quick_gelu",
	}
	m, err := Random(cfg, 7, Options{})
	if err != nil {
		t.Fatal(err)
	}
	batch, size := 3, cfg.Vision.ImageSize
	rng := rand.New(rand.NewPCG(3, 4))
	px, images := randomImages(rng, batch, size)
	want := m.Forward(images, nil).Value().Data().F32()

	dev := &devicetest.TransferCounter{Device: kernel.Host}
	autograd.SetDevice(dev)
	defer autograd.SetDevice(nil)
	got := m.Forward(images, nil).Value().Data().F32()
	if len(got) != len(want) || len(want) != batch*cfg.EmbedDim {
		t.Fatalf("%d features through the seam, %d on the CPU", len(got), len(want))
	}
	closeFeatures(t, "features", got, want)
	if dev.Downloads != 1 || dev.Down != len(want) {
		t.Errorf("%d downloads of %d values, want one of the %d features", dev.Downloads, dev.Down, len(want))
	}
	// Up: the images at each pass; the weights of the patch embedding and
	// the blocks' linear layers, the LayerNorm parameters, the embeddings
	// and the projection once, on the first pass (they are kept, and
	// uploaded again only when they change).
	perPass := len(px)
	up := dev.Up
	dev.Up = 0
	m.Forward(images, nil)
	if dev.Up != perPass {
		t.Errorf("second pass: %d values uploaded, want %d (the images only)", dev.Up, perPass)
	}
	if up <= perPass {
		t.Errorf("first pass: %d values uploaded, no more than a later pass's %d: the weights were not uploaded once", up, perPass)
	}

	// Recording for backward (the LayerNorms trainable): one op too, whose
	// backward pass downloads only the LayerNorms' gradients; they agree
	// with the CPU's within 1e-6 of the largest (on the device the last
	// block runs for every token, so its sums take more rows in another
	// order).
	grads := func() (feat []float32, gs [][]float32) {
		m.SetTrainable(true)
		defer m.SetTrainable(false)
		f := m.Forward(images, nil)
		feat = slices.Clone(f.Value().Data().F32())
		seed := make([]float32, len(feat))
		for i := range seed {
			seed[i] = float32(i%7) - 3
		}
		f.AccGrad(smat.NewDense[float32](smat.WithShape(batch, cfg.EmbedDim), smat.WithBacking(seed)))
		if err := ag.Backward(f); err != nil {
			t.Fatal(err)
		}
		for _, ln := range m.LayerNorms() {
			for _, p := range ln.Parameters() {
				gs = append(gs, slices.Clone(p.Grad().Data().F32()))
				p.ZeroGrad()
			}
		}
		return feat, gs
	}
	autograd.SetDevice(nil)
	wantF, wantG := grads()
	autograd.SetDevice(dev)
	dev.Down, dev.Downloads = 0, 0
	gotF, gotG := grads()
	closeFeatures(t, "recording pass, features", gotF, wantF)
	lnValues := 0
	for i := range wantG {
		lnValues += len(wantG[i])
		scale, worst := 0.0, 0.0
		for k, w := range wantG[i] {
			scale = max(scale, math.Abs(float64(w)))
			worst = max(worst, math.Abs(float64(gotG[i][k]-w)))
		}
		if worst > 1e-6*scale || scale == 0 {
			t.Errorf("LayerNorm gradient %d: %.2e from the CPU's, largest value %.2e", i, worst, scale)
		}
	}
	if dev.Down != len(wantF)+lnValues || dev.Downloads != 2 {
		t.Errorf("recording pass and backward: %d values downloaded in %d calls, want the %d features and the %d LayerNorm gradients in one call each",
			dev.Down, dev.Downloads, len(wantF), lnValues)
	}
	// Two recording passes without an optimizer step between them: the
	// trainable LayerNorms go up once. The second pass and its backward
	// pass upload the images, the features' gradient and the row of zeros
	// that the class tokens' gradient is spread over, nothing else.
	perStep := len(px) + len(wantF) + cfg.Vision.Width
	dev.Up = 0
	grads()
	if dev.Up != perStep {
		t.Errorf("second recording pass and backward: %d values uploaded, want %d (the images, the features' gradient and a row of zeros)", dev.Up, perStep)
	}
	// A step (here by hand, as optim writes in place) changes ln_pre's γ:
	// that alone goes up again.
	gamma := m.LNPre.Gamma.Data().F32()
	gamma[0] += 0.125
	defer func() { gamma[0] -= 0.125 }()
	autograd.SetDevice(nil)
	wantStepped, _ := grads()
	autograd.SetDevice(dev)
	dev.Up = 0
	gotStepped, _ := grads()
	if dev.Up != perStep+len(gamma) {
		t.Errorf("recording pass after a step: %d values uploaded, want %d (ln_pre's γ again)", dev.Up, perStep+len(gamma))
	}
	closeFeatures(t, "after a step, features", gotStepped, wantStepped)

	// A trainable class token: the ops run one by one.
	m.Class.SetRequiresGrad(true)
	defer m.Class.SetRequiresGrad(false)
	if _, ok := autograd.VisionTowerOnDevice(images, &autograd.VisionTower{Geometry: autograd.PatchGeometry{Channels: 3, Height: size, Width: size, Patch: cfg.Vision.PatchSize},
		Patch: m.Patch, Class: m.Class, Pos: m.Pos, LNPre: m.LNPre, Blocks: m.Blocks, LNPost: m.LNPost, Proj: m.Proj}); ok {
		t.Error("with a trainable class token the tower ran as one op")
	}
}
