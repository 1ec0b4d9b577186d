package tta

import (
	"slices"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/nlpodyssey/spago/mat/float"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// *clip.Model is what the Methods and the presets run on.
var (
	_ Model       = (*clip.Model)(nil)
	_ HeadEncoder = (*clip.Model)(nil)
)

// paramMap reads prefix<p> for every parameter name.
func paramMap(x *fxt.File, prefix string, names []string) map[string][]float64 {
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

func setAdamState(tb testing.TB, tr trainer, x *fxt.File, prefix string, step int) {
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
func compareParams(tb testing.TB, label string, got [][]float64, names []string, x *fxt.File, prefix string, tol float64, kind fxt.TolKind, absNames map[string]float64) {
	tb.Helper()
	for i, p := range names {
		if got[i] == nil {
			tb.Errorf("%s%s: no value", label, p)
			continue
		}
		if a, ok := absNames[p]; ok {
			fxt.Compare(tb, label+prefix+p, got[i], x.Vec(prefix+p), a, fxt.Abs)
			continue
		}
		fxt.Compare(tb, label+prefix+p, got[i], x.Vec(prefix+p), tol, kind)
	}
}

// TestMethodsShareModel: methods built one after another on one model (as
// an evaluation does) each adapt from their first batch, whatever the one
// before left marked trainable or frozen (TDA and Source encode without a
// tape).
func TestMethodsShareModel(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	x := fxt.Open(t, "fixtures/baselines.safetensors")
	head := x.Dense("T")
	px := fxtmodel.Pixels(t, 4)[0]
	tda, err := NewTDA(m, head, feature.DefaultTDAConfig())
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
