package feature

import (
	"fmt"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
)

func TestBATCLIPFixture(t *testing.T) {
	x := fxt.Open(t, "fixtures/baselines.safetensors")
	text := x.Dense("T")
	scale := fxt.LogitScale(t)
	for k := range x.Batches("batclip.b", "F") {
		b := fmt.Sprintf("batclip.b%d.", k)
		res, err := BATCLIPLoss(x.Dense(b+"F"), text, scale)
		if err != nil {
			t.Fatal(err)
		}
		fxt.CompareDense(t, b+"logits", res.Logits, x.Dense(b+"logits"), fxt.BaselineTol, fxt.Rel)
		fxt.CompareInts(t, b+"preds", res.Preds, x.Ints(b+"preds"))
		for _, s := range []struct {
			name string
			got  float64
		}{{"loss", res.Loss}, {"loss_entropy", res.Entropy}, {"loss_i2t", res.I2T}, {"loss_intermean", res.InterMean}} {
			// InterMean is a sum of 1−cos terms near 0 that torch forms in
			// fp32: compare it in absolute terms (1e-5).
			kind := fxt.Rel
			if s.name == "loss_intermean" {
				kind = fxt.Abs
			}
			fxt.Compare(t, b+s.name, []float64{s.got}, []float64{x.Scalar(b + s.name)}, fxt.BaselineTol, kind)
		}
		fxt.CompareDense(t, b+"dL_dF", res.DLdF, x.Dense(b+"dL_dF"), fxt.BaselineTol, fxt.Rel)
	}
}
