package tta

import (
	"fmt"
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"gonum.org/v1/gonum/mat"
)

func TestMINTFixture(t *testing.T) {
	var js baselinesJSON
	fixturefile.ReadJSON(t, "fixtures/baselines.json", &js)
	if js.Config.Mint.PriorN <= 0 {
		t.Fatalf("baselines.json: mint prior_n %v", js.Config.Mint.PriorN)
	}
	var scale float64
	if _, err := fmt.Sscanf(js.Config.Mint.Scale, "%g", &scale); err != nil {
		t.Fatalf("baselines.json: mint scale %q: %v", js.Config.Mint.Scale, err)
	}
	x := openFixture(t, "fixtures/baselines.safetensors")
	text := x.dense("T")
	c, d := text.Dims()
	m, err := NewMINTState(c, d, scale, js.Config.Mint.PriorN)
	if err != nil {
		t.Fatal(err)
	}
	for k := range x.Batches("mint.b", "pre_F") {
		b := fmt.Sprintf("mint.b%d.", k)
		loss, err := m.Loss(x.dense(b+"pre_F"), text)
		if err != nil {
			t.Fatal(err)
		}
		compareInts(t, b+"pre_preds", loss.Preds, x.ints(b+"pre_preds"))
		sums, n := m.ClassSums()
		compareDense(t, b+"pre_class_sums", sums, x.dense(b+"pre_class_sums"), baseTol, relTol)
		compare(t, b+"pre_class_n", n, x.Vec(b+"pre_class_n"), 0, absTol)
		compare(t, b+"loss", []float64{loss.Loss}, []float64{x.scalar(b + "loss")}, baseTol, relTol)
		compareDense(t, b+"dL_dFn", loss.DLdFn, x.dense(b+"dL_dFn"), baseTol, relTol)

		pred, err := m.Predict(x.dense(b+"post_F"), text)
		if err != nil {
			t.Fatal(err)
		}
		compareInts(t, b+"post_preds", pred.PostPreds, x.ints(b+"post_preds"))
		compare(t, b+"ratio", []float64{pred.Ratio}, []float64{x.scalar(b + "ratio")}, 1e-15, relTol)
		compareDense(t, b+"mixed_weights", pred.Weights, x.dense(b+"mixed_weights"), baseTol, relTol)
		compareDense(t, b+"logits", pred.Logits, x.dense(b+"logits"), baseTol, relTol)
		compareInts(t, b+"preds", pred.Preds, x.ints(b+"preds"))
	}
	m.Reset()
	if sums, n := m.ClassSums(); mat.Sum(sums) != 0 || n[0] != 0 {
		t.Error("Reset left class sums")
	}
}
