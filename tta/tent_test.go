package tta

import (
	"fmt"
	"testing"
)

func TestTentFixture(t *testing.T) {
	x := openFixture(t, "fixtures/baselines.safetensors")
	text := x.dense("T")
	scale := logitScale(t)
	for k := range x.Batches("tent.b", "F") {
		b := fmt.Sprintf("tent.b%d.", k)
		res, err := TentLoss(x.dense(b+"F"), text, scale)
		if err != nil {
			t.Fatal(err)
		}
		compareDense(t, b+"logits", res.Logits, x.dense(b+"logits"), baseTol, relTol)
		compareInts(t, b+"preds", res.Preds, x.ints(b+"preds"))
		compare(t, b+"loss", []float64{res.Loss}, []float64{x.scalar(b + "loss")}, baseTol, relTol)
		compareDense(t, b+"dL_dF", res.DLdF, x.dense(b+"dL_dF"), baseTol, relTol)
	}
}
