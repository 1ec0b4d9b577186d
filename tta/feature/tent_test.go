package feature

import (
	"fmt"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
)

func TestTentFixture(t *testing.T) {
	x := fxt.Open(t, "fixtures/baselines.safetensors")
	text := x.Dense("T")
	scale := fxt.LogitScale(t)
	for k := range x.Batches("tent.b", "F") {
		b := fmt.Sprintf("tent.b%d.", k)
		res, err := TentLoss(x.Dense(b+"F"), text, scale)
		if err != nil {
			t.Fatal(err)
		}
		fxt.CompareDense(t, b+"logits", res.Logits, x.Dense(b+"logits"), fxt.BaselineTol, fxt.Rel)
		fxt.CompareInts(t, b+"preds", res.Preds, x.Ints(b+"preds"))
		fxt.Compare(t, b+"loss", []float64{res.Loss}, []float64{x.Scalar(b + "loss")}, fxt.BaselineTol, fxt.Rel)
		fxt.CompareDense(t, b+"dL_dF", res.DLdF, x.Dense(b+"dL_dF"), fxt.BaselineTol, fxt.Rel)
	}
}
