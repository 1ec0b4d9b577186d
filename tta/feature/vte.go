package feature

import (
	"fmt"

	"gonum.org/v1/gonum/mat"
)

// VTEResult is VTEPredict's result for one image.
type VTEResult struct {
	// ViewLogits are scale·normalize(f_v)·Tᵀ (V×C), the logits the
	// selection ranks.
	ViewLogits *mat.Dense
	Selection  *Selection
	// Mean is the mean of the kept views' normalised features (d), not
	// renormalised.
	Mean []float64
	// Logits are scale·Mean·Tᵀ (C); Pred is their argmax.
	Logits []float64
	Pred   int
}

// VTEPredict is the Vision Test-time Ensemble on one image's views (spec
// §1 and its correction 4; [H] classification/methods/vte.py): with the
// view features f (V×d, row 0 the base view; normalised here, so raw
// encode_image output will do) and the head t (C×d, unit rows), the view
// logits z_v = scale·normalize(f_v)·tᵀ select the int(V·ρ) lowest-entropy
// views ([SelectConfident]); the prediction is the argmax of
// scale·f̄·tᵀ, f̄ the mean of the kept normalised features. As in the
// code, f̄ is not renormalised: the argmax is the same, the logits are
// smaller by ‖f̄‖ ≤ 1. VTE keeps no state and trains nothing.
func VTEPredict(f, t mat.Matrix, scale, rho float64) (*VTEResult, error) {
	if err := checkFeatures(f, t, "vte"); err != nil {
		return nil, err
	}
	if !(scale > 0) {
		return nil, fmt.Errorf("feature: vte: logit scale %v must be positive", scale)
	}
	fn, _ := NormalizeRows(f)
	viewLogits := Logits(fn, t, scale)
	sel, err := SelectConfident(viewLogits, rho)
	if err != nil {
		return nil, fmt.Errorf("feature: vte: %w", err)
	}
	_, d := fn.Dims()
	mean := make([]float64, d)
	for _, v := range sel.Kept {
		for j, x := range fn.RawRowView(v) {
			mean[j] += x
		}
	}
	scale1 := 1 / float64(len(sel.Kept))
	for j := range mean {
		mean[j] *= scale1
	}
	logits := Logits(mat.NewDense(1, d, mean), t, scale)
	return &VTEResult{
		ViewLogits: viewLogits,
		Selection:  sel,
		Mean:       mean,
		Logits:     logits.RawRowView(0),
		Pred:       Argmax(logits)[0],
	}, nil
}
