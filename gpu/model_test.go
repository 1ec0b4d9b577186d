//go:build cuda && cgo

package gpu

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/weights"
)

// onDevice runs f with d set as autograd's device, and the CPU after.
func onDevice(d kernel.Device, f func()) {
	autograd.SetDevice(d)
	defer autograd.SetDevice(nil)
	f()
}

func randMatrix(rng *rand.Rand, rows, cols int, scale float32) *smat.Dense[float32] {
	v := randSlice(rng, rows*cols)
	for i := range v {
		v[i] *= scale
	}
	return smat.NewDense[float32](smat.WithShape(rows, cols), smat.WithBacking(v))
}

func randBlock(rng *rand.Rand, width, heads, mlp int, causal, gelu bool) *autograd.BlockParams {
	ln := func() *autograd.LayerNormParams {
		g := randMatrix(rng, 1, width, 0.1)
		for i := range g.Data().F32() {
			g.Data().F32()[i] += 1
		}
		return autograd.NewLayerNormParams(g, randMatrix(rng, 1, width, 0.1), 1e-5)
	}
	lin := func(out, in int) *autograd.LinearParams {
		p := autograd.NewLinearParams(randMatrix(rng, out, in, 0.05), randMatrix(rng, 1, out, 0.1))
		p.KeepPacked(true)
		return p
	}
	return &autograd.BlockParams{LN1: ln(), QKV: lin(3*width, width), Out: lin(width, width), LN2: ln(),
		FC: lin(mlp, width), Proj: lin(width, mlp), Heads: heads, Causal: causal, GELU: gelu}
}

// backwardThrough seeds y's gradient with seed and runs backward; it
// returns y's values and the gradients of ts, which it zeroes.
func backwardThrough(t *testing.T, y smat.Tensor, seed []float32, ts []smat.Matrix) (out []float32, grads [][]float32) {
	t.Helper()
	r, c := y.Value().Shape()[0], y.Value().Shape()[1]
	y.AccGrad(smat.NewDense[float32](smat.WithShape(r, c), smat.WithBacking(seed)))
	if err := ag.Backward(y); err != nil {
		t.Fatal(err)
	}
	for _, g := range ts {
		grads = append(grads, slices.Clone(g.Grad().Data().F32()))
		g.ZeroGrad()
	}
	return slices.Clone(y.Value().Data().F32()), grads
}

// onDeviceCounted runs step on the CPU and then on d, and checks that the
// device ran lnBack LayerNorm and softmaxBack softmax backward kernels:
// the blocks' backward passes took the device path.
func onDeviceCounted(t *testing.T, d kernel.Device, lnBack, softmaxBack int, step func() ([]float32, [][]float32)) (gotY, wantY []float32, gotG, wantG [][]float32) {
	t.Helper()
	wantY, wantG = step()
	bc := &devicetest.BackwardCounter{Device: d}
	onDevice(bc, func() { gotY, gotG = step() })
	if n, m := int(bc.LayerNormBackwards.Load()), int(bc.SoftmaxBackwards.Load()); n != lnBack || m != softmaxBack {
		t.Errorf("backward ran %d LayerNorm and %d softmax kernels on the device, want %d and %d", n, m, lnBack, softmaxBack)
	}
	return gotY, wantY, gotG, wantG
}

// blockKinds are the blocks the device tests run: the vision tower's, the
// text tower's (causal) and one with the exact GELU.
var blockKinds = []struct {
	name         string
	causal, gelu bool
}{{"vision", false, false}, {"text", true, false}, {"gelu", false, true}}

// TestBlockMatchesCPU runs transformer blocks through autograd on the
// device, without a tape and recording for backward with trainable
// LayerNorms (forward and backward whole on the device), and compares
// outputs and gradients with the CPU.
func TestBlockMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	for _, c := range blockKinds {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 12))
			batch, tokens, width, heads := 4, 50, 128, 4
			p := randBlock(rng, width, heads, 4*width, c.causal, c.gelu)
			x := randMatrix(rng, batch*tokens, width, 1)
			seed := randSlice(rng, batch*tokens*width)

			want := slices.Clone(autograd.TransformerBlock(x, p, batch, nil).Value().Data().F32())
			var got []float32
			onDevice(d, func() { got = slices.Clone(autograd.TransformerBlock(x, p, batch, nil).Value().Data().F32()) })
			check(t, "forward without gradients", got, want)

			step := func() (out []float32, grads [][]float32) {
				p.LN1.SetTrainable(true)
				p.LN2.SetTrainable(true)
				defer p.LN1.SetTrainable(false)
				defer p.LN2.SetTrainable(false)
				xg := randMatrix(rand.New(rand.NewPCG(13, 14)), batch*tokens, width, 1)
				xg.SetRequiresGrad(true)
				y := autograd.TransformerBlock(xg, p, batch, nil)
				return backwardThrough(t, y, seed, []smat.Matrix{xg, p.LN1.Gamma, p.LN1.Beta, p.LN2.Gamma, p.LN2.Beta})
			}
			gotY, wantY, gotG, wantG := onDeviceCounted(t, d, 2, 1, step)
			check(t, "forward recording", gotY, wantY)
			for i, name := range []string{"dx", "dγ1", "dβ1", "dγ2", "dβ2"} {
				check(t, name, gotG[i], wantG[i])
			}
		})
	}
}

// TestTrainingBlocksMatchCPU runs two blocks through
// autograd.TransformerBlocks recording for backward with every parameter
// trainable (a training step: the weight gradients are products on the
// device, the bias gradients products with ones) and compares the output
// and every gradient with the CPU.
func TestTrainingBlocksMatchCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	for _, c := range blockKinds {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(15, 16))
			batch, tokens, width, heads := 4, 17, 64, 4
			blocks := []*autograd.BlockParams{
				randBlock(rng, width, heads, 4*width, c.causal, c.gelu),
				randBlock(rng, width, heads, 4*width, c.causal, c.gelu),
			}
			var params []smat.Matrix
			for _, p := range blocks {
				for _, l := range []*autograd.LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
					params = append(params, l.Weight, l.Bias)
				}
				params = append(params, p.LN1.Gamma, p.LN1.Beta, p.LN2.Gamma, p.LN2.Beta)
			}
			for _, p := range params {
				p.SetRequiresGrad(true)
			}
			x := randMatrix(rng, batch*tokens, width, 1)
			x.SetRequiresGrad(true)
			seed := randSlice(rng, batch*tokens*width)
			step := func() ([]float32, [][]float32) {
				return backwardThrough(t, autograd.TransformerBlocks(x, blocks, batch), seed, append([]smat.Matrix{x}, params...))
			}
			gotY, wantY, gotG, wantG := onDeviceCounted(t, d, 4, 2, step)
			check(t, "output", gotY, wantY)
			check(t, "dx", gotG[0], wantG[0])
			for i := 1; i < len(wantG); i++ {
				check(t, fmt.Sprintf("gradient of parameter %d", i-1), gotG[i], wantG[i])
			}
		})
	}
}

// TestCLIPTinyMatchesCPU runs the clip-tiny fixture end to end on the
// device: image and text features and the logits of the PyTorch fixture,
// and the LayerNorm gradients of a backward pass through the vision tower
// (what adaptation computes), against the CPU.
func TestCLIPTinyMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	m, px, shape := tinyImages(t)
	ref, err := weights.Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ids, tshape, err := ref.Int64("text_tokens")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Rows []int `json:"cifar10_prompt_rows"`
	}
	raw, err := os.ReadFile(fixture.Path(t, "fixtures/forward.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	var tokens [][]int
	for _, r := range meta.Rows {
		seq := make([]int, tshape[1])
		for j := range seq {
			seq[j] = int(ids[r*tshape[1]+j])
		}
		tokens = append(tokens, seq)
	}
	encode := func() (img, txt []float32, logits []float32) {
		i, err := m.EncodeImage(px, shape[0])
		if err != nil {
			t.Fatal(err)
		}
		x, err := m.EncodeText(tokens)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(i.Value().Data().F32()), slices.Clone(x.Value().Data().F32()),
			slices.Clone(m.Logits(i, x).Value().Data().F32())
	}
	wantImg, wantTxt, wantLogits := encode()
	var img, txt, logits []float32
	onDevice(d, func() { img, txt, logits = encode() })
	check(t, "image features", img, wantImg)
	check(t, "text features", txt, wantTxt)
	check(t, "logits", logits, wantLogits)
	torch, _, err := ref.Float32("logits_per_image")
	if err != nil {
		t.Fatal(err)
	}
	check(t, "logits against PyTorch", logits, torch)

	adapt := func() [][]float32 {
		m.SetVisionTrainable(true)
		defer m.SetVisionTrainable(false)
		x, err := m.Images(px, shape[0])
		if err != nil {
			t.Fatal(err)
		}
		f := m.ImageFeatures(x)
		seed := make([]float32, f.Size())
		for i := range seed {
			seed[i] = float32(i%7) - 3
		}
		r, c := f.Value().Shape()[0], f.Value().Shape()[1]
		f.AccGrad(smat.NewDense[float32](smat.WithShape(r, c), smat.WithBacking(seed)))
		if err := ag.Backward(f); err != nil {
			t.Fatal(err)
		}
		var grads [][]float32
		lns, _ := m.VisionLayerNorms()
		for _, ln := range lns {
			for _, p := range ln.Parameters() {
				grads = append(grads, slices.Clone(p.Grad().Data().F32()))
				p.ZeroGrad()
			}
		}
		return grads
	}
	want := adapt()
	var got [][]float32
	onDevice(d, func() { got = adapt() })
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d LayerNorm gradients on the device, %d on the CPU", len(got), len(want))
	}
	for i := range want {
		check(t, "LayerNorm gradient", got[i], want[i])
	}
}

// tinyImages returns clip-tiny and the fixture's preprocessed images
// [shape[0], 3·H·W].
func tinyImages(t *testing.T) (m *clip.Model, px []float32, shape []int) {
	t.Helper()
	const rel = "fixtures/clip-tiny.openai.safetensors"
	m, err := clip.Load(fixture.Path(t, rel), clip.Options{Config: fixturefile.Config(t, rel)})
	if err != nil {
		t.Fatal(err)
	}
	pre, err := weights.Open(fixture.Path(t, "fixtures/preprocess.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	px, shape, err = pre.Float32("pixel_values")
	if err != nil {
		t.Fatal(err)
	}
	return m, px, shape
}

// tinyImageFeatures returns clip-tiny's image features of the fixture's
// images on d and on the CPU.
func tinyImageFeatures(t *testing.T, d kernel.Device) (got, want []float32) {
	t.Helper()
	m, px, shape := tinyImages(t)
	encode := func() []float32 {
		i, err := m.EncodeImage(px, shape[0])
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(i.Value().Data().F32())
	}
	want = encode()
	onDevice(d, func() { got = encode() })
	return got, want
}
