package zeroshot

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// TestClassify checks the scorer against values worked by hand: a row of
// norm 5 scaled to a unit row, a zero row left at zero (the 1e-12 floor),
// logits scale·cos and the first column on a tie.
func TestClassify(t *testing.T) {
	f := mat.NewDense(2, 2, []float64{3, 4, 0, 0})
	head := mat.NewDense(3, 2, []float64{1, 0, 0, 1, 0, 1})
	logits, preds := Classify(f, head, 10)
	want := []float64{6, 8, 8, 0, 0, 0}
	for i, w := range want {
		if g := logits.RawMatrix().Data[i]; math.Abs(g-w) > 1e-12 {
			t.Errorf("logit %d = %v, want %v", i, g, w)
		}
	}
	if preds[0] != 1 || preds[1] != 0 {
		t.Errorf("preds %v, want [1 0] (the first of tied columns)", preds)
	}
	_, norms := NormalizeRows(f)
	if norms[0] != 5 || norms[1] != 0 {
		t.Errorf("norms %v, want [5 0]", norms)
	}
}
