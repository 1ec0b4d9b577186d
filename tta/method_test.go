package tta

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/nlpodyssey/spago/mat/float"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
)

// *clip.Model is what the Methods and the presets run on.
var (
	_ Model       = (*clip.Model)(nil)
	_ HeadEncoder = (*clip.Model)(nil)
)

// tinyModel loads the fixture model (a fresh copy: Methods write its
// LayerNorm parameters in place).
func tinyModel(tb testing.TB, f64 bool) *clip.Model {
	tb.Helper()
	const rel = "fixtures/clip-tiny.openai.safetensors"
	m, err := clip.Load(fixture.Path(tb, rel), clip.Options{Float64: f64, Config: fixturefile.Config(tb, rel)})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// ttaPixels returns the preprocessed images of tta_inputs.safetensors
// (pixel_u8 [N,H,W,3], already resized and cropped) in batches of b (a last
// partial batch is left out): float32(u8)/255, then (x−mean)/std in float32
// with tta_inputs.json's mean and std, HWC→CHW, which is what data's CLIP
// preprocessor does to an image of its output size.
func ttaPixels(tb testing.TB, b int) [][]float32 {
	tb.Helper()
	x := openFixture(tb, "fixtures/tta_inputs.safetensors")
	u8, shape, err := x.Uint8("pixel_u8")
	if err != nil {
		tb.Fatal(err)
	}
	if len(shape) != 4 || shape[3] != 3 || shape[1] != shape[2] {
		tb.Fatalf("pixel_u8: shape %v, want [N, S, S, 3]", shape)
	}
	if shape[0] < b {
		tb.Skipf("tta_inputs holds %d images, fewer than a batch of %d", shape[0], b)
	}
	var meta struct{ Mean, Std []float32 }
	if raw, err := os.ReadFile(fixture.Path(tb, "fixtures/tta_inputs.json")); err != nil {
		tb.Fatal(err)
	} else if err := json.Unmarshal(raw, &meta); err != nil {
		tb.Fatalf("tta_inputs.json: %v", err)
	}
	s := shape[1]
	cfg := data.PreprocessConfig{Size: s}
	if len(meta.Mean) == 3 && len(meta.Std) == 3 {
		copy(cfg.Mean[:], meta.Mean)
		copy(cfg.Std[:], meta.Std)
	}
	pre, err := data.NewPreprocessor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]float32
	for k := 0; k < shape[0]/b; k++ {
		imgs := make([]*data.RGB, b)
		for i := range imgs {
			row := k*b + i
			imgs[i] = &data.RGB{W: s, H: s, Pix: u8[row*s*s*3 : (row+1)*s*s*3]}
		}
		px, err := pre.Batch(nil, imgs)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, px)
	}
	return out
}

// paramMap reads prefix<p> for every parameter name.
func (x *fx) paramMap(prefix string, names []string) map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range names {
		out[p] = x.Vec(prefix + p)
	}
	return out
}

// injectGrads replaces the LayerNorm gradients with stored ones.
func injectGrads(tb testing.TB, tr trainer, g map[string][]float64) {
	tb.Helper()
	switch tr := tr.(type) {
	case *lnTrainer[float32]:
		injectGradsT(tr, g)
	case *lnTrainer[float64]:
		injectGradsT(tr, g)
	default:
		tb.Fatalf("trainer %T", tr)
	}
}

func injectGradsT[T float.DType](tr *lnTrainer[T], g map[string][]float64) {
	for i, m := range tr.mats {
		m.ZeroGrad()
		v := float.SliceValueOf[T](float.Make(g[tr.params[i].Name]...))
		m.AccGrad(smat.NewDense[T](smat.WithShape(m.Shape()...), smat.WithBacking(append([]T(nil), v...))))
	}
}

func setAdamState(tb testing.TB, tr trainer, x *fx, prefix string, step int) {
	tb.Helper()
	var err error
	switch o := tr.optimizer().(type) {
	case *optim.Adam[float32]:
		err = o.SetState(fixturefile.AdamState[float32](x.File, prefix, tr.names(), step))
	case *optim.Adam[float64]:
		err = o.SetState(fixturefile.AdamState[float64](x.File, prefix, tr.names(), step))
	default:
		tb.Fatalf("optimizer %T is not Adam", o)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

// compareParams compares the trainer's values (or gradients) with
// prefix<p>. absNames are compared in absolute terms at absTolerance.
func compareParams(tb testing.TB, label string, got [][]float64, names []string, x *fx, prefix string, tol float64, kind tolKind, absNames map[string]float64) {
	tb.Helper()
	for i, p := range names {
		if got[i] == nil {
			tb.Errorf("%s%s: no value", label, p)
			continue
		}
		if a, ok := absNames[p]; ok {
			compare(tb, label+prefix+p, got[i], x.Vec(prefix+p), a, absTol)
			continue
		}
		compare(tb, label+prefix+p, got[i], x.Vec(prefix+p), tol, kind)
	}
}

// TestMethodsShareModel: methods built one after another on one model (as
// an evaluation does) each adapt from their first batch, whatever the one
// before left marked trainable or frozen (TDA and Source encode without a
// tape).
func TestMethodsShareModel(t *testing.T) {
	m := tinyModel(t, false)
	x := openFixture(t, "fixtures/baselines.safetensors")
	head := x.dense("T")
	px := ttaPixels(t, 4)[0]
	tda, err := NewTDA(m, head, DefaultTDAConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tda.Step(px, 4); err != nil {
		t.Fatal(err)
	}
	tent, err := NewTENT(m, head, optim.Config{Adam: optim.DefaultAdamConfig(1e-3)})
	if err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(m.Vision.LayerNorms()[0].Gamma.Data().F64())
	if _, err := tent.Step(px, 4); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(before, m.Vision.LayerNorms()[0].Gamma.Data().F64()) {
		t.Fatal("TENT after TDA did not update the first LayerNorm on its first batch")
	}
}
