package feature

import (
	"fmt"
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

func TestMINTFixture(t *testing.T) {
	var js fxt.BaselinesJSON
	fixturefile.ReadJSON(t, "fixtures/baselines.json", &js)
	if js.Config.Mint.PriorN <= 0 {
		t.Fatalf("baselines.json: mint prior_n %v", js.Config.Mint.PriorN)
	}
	var scale float64
	if _, err := fmt.Sscanf(js.Config.Mint.Scale, "%g", &scale); err != nil {
		t.Fatalf("baselines.json: mint scale %q: %v", js.Config.Mint.Scale, err)
	}
	x := fxt.Open(t, "fixtures/baselines.safetensors")
	text := x.Dense("T")
	c, d := text.Dims()
	m, err := NewMINTState(c, d, scale, js.Config.Mint.PriorN)
	if err != nil {
		t.Fatal(err)
	}
	for k := range x.Batches("mint.b", "pre_F") {
		b := fmt.Sprintf("mint.b%d.", k)
		loss, err := m.Loss(x.Dense(b+"pre_F"), text)
		if err != nil {
			t.Fatal(err)
		}
		fxt.CompareInts(t, b+"pre_preds", loss.Preds, x.Ints(b+"pre_preds"))
		sums, n := m.ClassSums()
		fxt.CompareDense(t, b+"pre_class_sums", sums, x.Dense(b+"pre_class_sums"), fxt.BaselineTol, fxt.Rel)
		fxt.Compare(t, b+"pre_class_n", n, x.Vec(b+"pre_class_n"), 0, fxt.Abs)
		fxt.Compare(t, b+"loss", []float64{loss.Loss}, []float64{x.Scalar(b + "loss")}, fxt.BaselineTol, fxt.Rel)
		fxt.CompareDense(t, b+"dL_dFn", loss.DLdFn, x.Dense(b+"dL_dFn"), fxt.BaselineTol, fxt.Rel)

		pred, err := m.Predict(x.Dense(b+"post_F"), text)
		if err != nil {
			t.Fatal(err)
		}
		fxt.CompareInts(t, b+"post_preds", pred.PostPreds, x.Ints(b+"post_preds"))
		fxt.Compare(t, b+"ratio", []float64{pred.Ratio}, []float64{x.Scalar(b + "ratio")}, 1e-15, fxt.Rel)
		fxt.CompareDense(t, b+"mixed_weights", pred.Weights, x.Dense(b+"mixed_weights"), fxt.BaselineTol, fxt.Rel)
		fxt.CompareDense(t, b+"logits", pred.Logits, x.Dense(b+"logits"), fxt.BaselineTol, fxt.Rel)
		fxt.CompareInts(t, b+"preds", pred.Preds, x.Ints(b+"preds"))
	}
	m.Reset()
	if sums, n := m.ClassSums(); mat.Sum(sums) != 0 || n[0] != 0 {
		t.Error("Reset left class sums")
	}
}
