package tta

import (
	"fmt"
	"testing"
)

func TestBATCLIPFixture(t *testing.T) {
	x := openFixture(t, "fixtures/baselines.safetensors")
	text := x.dense("T")
	scale := logitScale(t)
	for k := range x.Batches("batclip.b", "F") {
		b := fmt.Sprintf("batclip.b%d.", k)
		res, err := BATCLIPLoss(x.dense(b+"F"), text, scale)
		if err != nil {
			t.Fatal(err)
		}
		compareDense(t, b+"logits", res.Logits, x.dense(b+"logits"), baseTol, relTol)
		compareInts(t, b+"preds", res.Preds, x.ints(b+"preds"))
		for _, s := range []struct {
			name string
			got  float64
		}{{"loss", res.Loss}, {"loss_entropy", res.Entropy}, {"loss_i2t", res.I2T}, {"loss_intermean", res.InterMean}} {
			// InterMean is a sum of 1−cos terms near 0 that torch forms in
			// fp32: compare it in absolute terms (1e-5).
			kind := relTol
			if s.name == "loss_intermean" {
				kind = absTol
			}
			compare(t, b+s.name, []float64{s.got}, []float64{x.scalar(b + s.name)}, baseTol, kind)
		}
		compareDense(t, b+"dL_dF", res.DLdF, x.dense(b+"dL_dF"), baseTol, relTol)
	}
}
