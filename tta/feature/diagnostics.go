package feature

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/internal/rowdot"
)

// PrincipalAngleCosines returns the cosines of the principal angles between
// the row spaces of two orthonormal bases bv (r×d) and bt (s×d): the
// singular values of bv·btᵀ, descending. 1 means a shared direction, 0 an
// orthogonal one; ‖bv·btᵀ‖²_F (what L_align maximises) is their sum of squares.
func PrincipalAngleCosines(bv, bt mat.Matrix) ([]float64, error) {
	_, d1 := bv.Dims()
	_, d2 := bt.Dims()
	if d1 != d2 {
		return nil, fmt.Errorf("feature: principal angles: bases have %d and %d columns", d1, d2)
	}
	c := rowdot.MulMatrix(bv, bt)
	var svd mat.SVD
	if !svd.Factorize(c, mat.SVDNone) {
		return nil, errors.New("feature: principal angles: SVD did not converge")
	}
	return svd.Values(nil), nil
}

// SemanticConcentration returns, per row v of f, ‖v·P‖²/‖v‖²: the share of
// the feature's energy inside the subspace of the projector p (d×d).
// A zero row gives 0.
func SemanticConcentration(f, p mat.Matrix) ([]float64, error) {
	b, d := f.Dims()
	if pr, pc := p.Dims(); pr != d || pc != d {
		return nil, fmt.Errorf("feature: semantic concentration: projector is %d×%d, features have %d dims", pr, pc, d)
	}
	var y mat.Dense
	y.Mul(f, p)
	out := make([]float64, b)
	for i := range b {
		v := mat.Row(nil, i, f)
		yv := y.RawRowView(i)
		if n := dot(v, v); n > 0 {
			out[i] = dot(yv, yv) / n
		}
	}
	return out, nil
}

// PredictedClassCosine returns cos(f_i, t_{preds_i}) per row of f.
func PredictedClassCosine(f, t mat.Matrix, preds []int) ([]float64, error) {
	b, d := f.Dims()
	c, td := t.Dims()
	if d != td {
		return nil, fmt.Errorf("feature: predicted-class cosine: features have %d dims, text features %d", d, td)
	}
	if len(preds) != b {
		return nil, fmt.Errorf("feature: predicted-class cosine: %d predictions for %d rows", len(preds), b)
	}
	out := make([]float64, b)
	for i, y := range preds {
		if y < 0 || y >= c {
			return nil, fmt.Errorf("feature: predicted-class cosine: class %d outside [0, %d)", y, c)
		}
		v := mat.Row(nil, i, f)
		w := mat.Row(nil, y, t)
		den := math.Sqrt(dot(v, v) * dot(w, w))
		if den > 0 {
			out[i] = dot(v, w) / den
		}
	}
	return out, nil
}
