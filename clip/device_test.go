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

// TestTextTowerOnDevice runs the built-in model's text tower as one op on
// the device seam (autograd.TextTowerOnDevice) on kernel.Host: without and
// with a (frozen) TPT context, the features equal the CPU path's bit for
// bit; a pass downloads the features only, in one call; the tower's weights
// go up on the first pass only, so that a second pass uploads the token ids
// and the pooled rows' numbers alone; and the context goes up again only
// once its values change. A context that requires a gradient (TPT's
// step) records the tower as one op too: its backward pass downloads only
// the context's gradient, in one call, and the features and that gradient
// equal the CPU's within 1e-6 of the largest value (the features bit for
// bit in fact; the gradient sums over the sequences, and the blocks' sums,
// in another order).
func TestTextTowerOnDevice(t *testing.T) {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tok := builtin.Tokenizer()
	var tokens [][]int
	L := 0
	for _, c := range data.CIFAR10Classes[:5] {
		ids, err := tok.Tokenize("a photo of a "+c+".", m.Config.Text.ContextLength, true)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, ids)
		eot := 0
		for j, id := range ids {
			if id > ids[eot] {
				eot = j
			}
		}
		L = max(L, eot+1)
	}
	ctx, err := m.TokenEmbeddings(tokens[0][1:3]) // "a photo" as two context vectors
	if err != nil {
		t.Fatal(err)
	}
	encode := func(withCtx bool) []float32 {
		t.Helper()
		var f smat.Tensor
		var err error
		if withCtx {
			f, err = m.PromptFeatures(tokens, ctx)
		} else {
			f, err = m.EncodeText(tokens)
		}
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(f.Value().Data().F32())
	}
	want, wantCtx := encode(false), encode(true)

	dev := &devicetest.TransferCounter{Device: kernel.Host}
	autograd.SetDevice(dev)
	defer autograd.SetDevice(nil)
	same := func(name string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) || len(want) == 0 {
			t.Fatalf("%s: %d values through the seam, %d on the CPU", name, len(got), len(want))
		}
		// Within 1e-5 of the largest value, as TestDeviceSeam: on a device
		// each linear layer's bias is added after its product's whole sum,
		// on the CPU with the product's first block of K.
		worst, scale := 0.0, 0.0
		for i := range want {
			worst = max(worst, math.Abs(float64(got[i]-want[i])))
			scale = max(scale, math.Abs(float64(want[i])))
		}
		if worst > 1e-5*scale {
			t.Fatalf("%s: %.2e from the CPU's through the seam, more than 1e-5 of its largest value %.2e", name, worst, scale)
		}
	}
	n, embed := len(tokens), m.Config.EmbedDim
	perPass := n*L + n // the ids and the pooled rows' numbers
	for pass := range 2 {
		dev.Reset()
		same("text features", encode(false), want)
		if dev.Downloads != 1 || dev.Down != n*embed {
			t.Errorf("pass %d: %d downloads of %d values, want one of the %d features", pass, dev.Downloads, dev.Down, n*embed)
		}
		if pass == 0 && dev.Up <= perPass {
			t.Errorf("first pass: %d values uploaded, no more than the ids' %d: the weights did not go up", dev.Up, perPass)
		}
		if pass == 1 && dev.Up != perPass {
			t.Errorf("second pass: %d values uploaded, want %d (the ids and the pooled rows only)", dev.Up, perPass)
		}
	}
	dev.Reset()
	same("text features with a context", encode(true), wantCtx)
	if dev.Up != perPass+ctx.Size() {
		t.Errorf("first pass with a context: %d values uploaded, want %d (the ids, the pooled rows and the context)", dev.Up, perPass+ctx.Size())
	}
	dev.Reset()
	encode(true)
	if dev.Up != perPass {
		t.Errorf("second pass with the same context: %d values uploaded, want %d (the ids and the pooled rows only)", dev.Up, perPass)
	}
	// An optimizer step writes the context in place: it goes up again.
	c := ctx.Data().F32()
	c[0] += 0.25
	autograd.SetDevice(nil)
	wantStepped := encode(true)
	autograd.SetDevice(dev)
	dev.Reset()
	same("text features after a step", encode(true), wantStepped)
	if dev.Up != perPass+ctx.Size() {
		t.Errorf("pass after a step: %d values uploaded, want %d (the context again)", dev.Up, perPass+ctx.Size())
	}

	// Recording through a trainable context: the ops one by one.
	grad := func() (feat, g []float32) {
		t.Helper()
		ctx.SetRequiresGrad(true)
		defer ctx.SetRequiresGrad(false)
		f, err := m.PromptFeatures(tokens, ctx)
		if err != nil {
			t.Fatal(err)
		}
		seed := make([]float32, n*embed)
		for k := range seed {
			seed[k] = float32(k%5) - 2
		}
		f.AccGrad(smat.NewDense[float32](smat.WithShape(n, embed), smat.WithBacking(seed)))
		if err := ag.Backward(f); err != nil {
			t.Fatal(err)
		}
		g = slices.Clone(ctx.Grad().Data().F32())
		ctx.ZeroGrad()
		return slices.Clone(f.Value().Data().F32()), g
	}
	dev.Reset()
	feat, g := grad()
	if dev.Downloads != 2 || dev.Down != n*embed+ctx.Size() {
		t.Errorf("recording pass and backward: %d values downloaded in %d calls, want the %d features and the %d values of the context's gradient, one call each",
			dev.Down, dev.Downloads, n*embed, ctx.Size())
	}
	autograd.SetDevice(nil)
	wantFeat, wantG := grad()
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"recorded features", feat, wantFeat}, {"context gradient", g, wantG}} {
		scale, worst := 0.0, 0.0
		for k, w := range c.want {
			scale = max(scale, math.Abs(float64(w)))
			worst = max(worst, math.Abs(float64(c.got[k]-w)))
		}
		// 1e-5 as TestDeviceSeam's gradients: the fused bias rounds
		// differently (3.1e-6 measured for the context's gradient).
		if len(c.got) != len(c.want) || worst > 1e-5*scale || scale == 0 {
			t.Errorf("%s: %.2e from the CPU's, more than 1e-5 of its largest value %.2e", c.name, worst, scale)
		}
		t.Logf("%s: within %.1e of the CPU's (relative to the largest)", c.name, worst/scale)
	}
}
