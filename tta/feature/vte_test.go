package feature

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestVTEPredictTTA2 runs VTE from the stored encode_image features of
// every view (views.image_features, unnormalised) with the 18-template
// head vte.T and compares the view logits, the entropies, the mean
// feature and the output logits with vte.*: 1e-5 relative to each
// tensor's max (README tolerance for fp32 features and logits against our
// float64 on the same fp32 inputs); the selection and the prediction
// exactly. The same run from the stored normalised features (views.f)
// must agree.
func TestVTEPredictTTA2(t *testing.T) {
	x, cfg := readTTA2(t)
	head := x.Dense("vte.T")
	scale := x.Scalar("logit_scale_exp")
	preds := x.Ints("vte.pred")
	if len(preds) != len(cfg.Config.VTE.Images) {
		t.Fatalf("vte.pred holds %d images, config %v", len(preds), cfg.Config.VTE.Images)
	}
	for k, img := range cfg.Config.VTE.Images {
		what := fmt.Sprintf("vte image %d", img)
		r, err := VTEPredict(poolFeatures(x, cfg, "views.image_features", img), head, scale, cfg.Config.VTE.Rho)
		if err != nil {
			t.Fatal(err)
		}
		fxt.CompareDense(t, what+" view logits", r.ViewLogits, sliceDense(x, "vte.logits", k), 1e-5, fxt.Rel)
		want, _ := slice(x, "vte.entropy", k)
		fxt.Compare(t, what+" entropy", r.Selection.Entropy, want, 1e-5, fxt.Rel)
		fxt.CompareInts(t, what+" selected", r.Selection.Kept, sliceInts(x, "vte.selected", k))
		want, _ = slice(x, "vte.mean_feature", k)
		fxt.Compare(t, what+" mean feature", r.Mean, want, 1e-5, fxt.Rel)
		want, _ = slice(x, "vte.output", k)
		fxt.Compare(t, what+" output", r.Logits, want, 1e-5, fxt.Rel)
		fxt.CompareInts(t, what+" pred", []int{r.Pred}, []int{preds[k]})

		fromUnit, err := VTEPredict(poolFeatures(x, cfg, "views.f", img), head, scale, cfg.Config.VTE.Rho)
		if err != nil {
			t.Fatal(err)
		}
		fxt.Compare(t, what+" output from views.f", fromUnit.Logits, want, 1e-5, fxt.Rel)
	}
}

// TestVTEPredict checks the not-renormalised mean on a hand-made case: two
// orthogonal confident views average to a vector of norm 1/√2, and a
// confused view is left out.
func TestVTEPredict(t *testing.T) {
	head := mat.NewDense(3, 3, []float64{1, 0, 0, 0, 1, 0, 0, 0, 1})
	f := mat.NewDense(3, 3, []float64{
		2, 0, 0, // confident in class 0
		1, 1, 1, // confused: all classes equal
		0, 0, 5, // confident in class 2
	})
	r, err := VTEPredict(f, head, 100, 0.67)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.Selection.Kept) != "[0 2]" {
		t.Fatalf("kept %v, want [0 2]", r.Selection.Kept)
	}
	want := []float64{50, 0, 50}
	for i, v := range r.Logits {
		if math.Abs(v-want[i]) > 1e-12 {
			t.Fatalf("logits %v, want %v (mean not renormalised)", r.Logits, want)
		}
	}
	if r.Pred != 0 {
		t.Errorf("pred %d on a 50-50 tie, want the first class", r.Pred)
	}
	bad := []struct {
		name  string
		f, t  mat.Matrix
		scale float64
		rho   float64
		err   error
	}{
		{"width mismatch", mat.NewDense(2, 4, nil), head, 100, 0.5, errAny},
		{"scale 0", f, head, 0, 0.5, errAny},
		{"keeps nothing", f, head, 100, 0.1, ErrEmptySelection},
	}
	for _, b := range bad {
		if _, err := VTEPredict(b.f, b.t, b.scale, b.rho); err == nil || b.err != errAny && !errors.Is(err, b.err) {
			t.Errorf("%s: err %v, want %v", b.name, err, b.err)
		}
	}
}
