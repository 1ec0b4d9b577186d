package feature

import (
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestBaselineGradCheck: TENT and BATCLIP feature gradients against float64
// central differences (h = 1e-6, tolerance 1e-6 relative to the max). The
// pseudo-labels come from argmax inside the loss; h is far too small to flip
// them on these random features.
func TestBaselineGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const b, d, c = 8, 10, 5
	text, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	f := fxt.RandDense(rng, b, d, 1)
	tent, _ := TentLoss(f, text, 10)
	fxt.GradCheck(t, "tent", f, func(f *mat.Dense) float64 { r, _ := TentLoss(f, text, 10); return r.Loss }, tent.DLdF, 1e-6, 1e-6)
	bc, _ := BATCLIPLoss(f, text, 10)
	t.Logf("batclip random problem: %d classes predicted", len(fxt.Distinct(bc.Preds)))
	if len(fxt.Distinct(bc.Preds)) < 2 {
		t.Fatal("random problem predicts one class: InterMean untested")
	}
	fxt.GradCheck(t, "batclip", f, func(f *mat.Dense) float64 { r, _ := BATCLIPLoss(f, text, 10); return r.Loss }, bc.DLdF, 1e-6, 1e-6)

	// MINT: with the cumulative means held fixed (they are detached), the loss
	// is a function of Fn, then F.
	m, _ := NewMINTState(c, d, 100, 10000)
	m.Loss(fxt.RandDense(rng, b, d, 1), text) // some history
	mint, _ := m.Loss(f, text)
	sums, n := m.ClassSums()
	frozen := func(f *mat.Dense) float64 {
		fn, _ := NormalizeRows(f)
		mu := make([]float64, d)
		var tot float64
		for k := range c {
			tot += n[k]
			for j := range d {
				mu[j] += sums.At(k, j)
			}
		}
		scale(mu, 1/tot)
		classes, rows := classGroups(mint.Preds)
		var l float64
		for i, y := range mint.Preds {
			w := 1 / (float64(len(classes)) * float64(len(rows[y])))
			for j := range d {
				x, my := fn.At(i, j), sums.At(y, j)/n[y]
				l -= w * ((x-mu[j])*(x-mu[j]) - (x-my)*(x-my))
			}
		}
		return l
	}
	fxt.GradCheck(t, "mint (means frozen)", f, frozen, mint.DLdF, 1e-6, 1e-6)
}
