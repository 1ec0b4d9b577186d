package feature

import (
	"errors"
	"math"

	"gonum.org/v1/gonum/mat"
)

// WATTTemperature is the temperature of WATT's soft targets: a literal 0.01
// in [W] adapt/watt.py.
const WATTTemperature = 0.01

// WATTResult is WATTLoss's result on one batch for one template.
type WATTResult struct {
	// Preds are the pseudo-labels argmax normalize(F)·Tᵀ (no gradient).
	Preds []int
	// Targets is Q (B×B), the row-softmax of (Ẑ·Ẑᵀ + T̂·T̂ᵀ)/2/temperature,
	// Ẑ = normalize(F) and T̂ the text rows of the pseudo-labels. Image i's
	// target is column i.
	Targets *mat.Dense
	Loss    float64
	DLdF    *mat.Dense // ∂Loss/∂F (B×d)
}

// WATTLoss computes WATT's loss for one template ([W] adapt/watt.py,
// WATT.perform_adaptation) on the unnormalised image features f (B×d) with
// the template's class embeddings t (C×d, unit rows), logit scale
// scale = exp(logit_scale) and temperature (WATTTemperature in the code):
//
//	Ẑ = normalize(F), ŷ = argmax Ẑ·tᵀ, T̂ = t[ŷ] (B×d),
//	Q = rowsoftmax((Ẑ·Ẑᵀ + T̂·T̂ᵀ)/2/temperature),
//	L = (1/B) Σ_i Σ_b −Q[b,i]·log softmax_b(scale·ẑ_i·t̂_b).
//
// Row b of Q is a distribution, but the target of image i is column i, as in
// the code (its cross_entropy takes logits.t() against targets.t()). Q is
// not detached: the image–image similarity in it carries gradient, which
// DLdF includes. The pseudo-labels carry none.
func WATTLoss(f, t mat.Matrix, scale, temperature float64) (*WATTResult, error) {
	if err := checkFeatures(f, t, "watt loss"); err != nil {
		return nil, err
	}
	if !(temperature > 0) {
		return nil, errors.New("feature: watt loss: temperature must be positive")
	}
	b, d := f.Dims()
	z, norms := NormalizeRows(f)
	var cos mat.Dense
	cos.Mul(z, t.T())
	preds := Argmax(&cos)
	that := mat.NewDense(b, d, nil)
	for i, y := range preds {
		for j := range d {
			that.Set(i, j, t.At(y, j))
		}
	}

	// P[i,b] = scale·ẑ_i·t̂_b, the code's logits.t().
	p := Logits(z, that, scale)
	// A = (ẐẐᵀ + T̂T̂ᵀ)/(2·temperature), Q its row-softmax.
	var zz, tt mat.Dense
	zz.Mul(z, z.T())
	tt.Mul(that, that.T())
	q := mat.NewDense(b, b, nil)
	q.Add(&zz, &tt)
	q.Scale(1/(2*temperature), q)
	for k := range b {
		softmaxInPlace(q.RawRowView(k))
	}

	// Log-softmax of P's rows, the loss, and ∂L/∂P[i,b] = (S[i,b]·w_i −
	// Q[b,i])/B with S = softmax(P) and w_i = Σ_b Q[b,i].
	ls := mat.NewDense(b, b, nil)
	dp := mat.NewDense(b, b, nil)
	var loss float64
	for i := range b {
		row := ls.RawRowView(i)
		copy(row, p.RawRowView(i))
		logSoftmaxInPlace(row)
		var w float64
		for k := range b {
			loss -= q.At(k, i) * row[k]
			w += q.At(k, i)
		}
		for k := range b {
			dp.Set(i, k, (math.Exp(row[k])*w-q.At(k, i))/float64(b))
		}
	}
	loss /= float64(b)

	// Through P: ∂L/∂Ẑ = scale·∂L/∂P·T̂.
	var dz mat.Dense
	dz.Mul(dp, that)
	dz.Scale(scale, &dz)
	// Through Q: ∂L/∂Q[k,i] = −LS[i,k]/B; the row-softmax backward gives
	// ∂L/∂A[k,i] = Q[k,i]·(∂L/∂Q[k,i] − Σ_j Q[k,j]·∂L/∂Q[k,j]); and
	// A = ẐẐᵀ/(2·temperature) + const gives ∂L/∂Ẑ += (∂L/∂A + ∂L/∂Aᵀ)·Ẑ/(2·temperature).
	da := mat.NewDense(b, b, nil)
	for k := range b {
		var s float64
		for i := range b {
			s += q.At(k, i) * -ls.At(i, k) / float64(b)
		}
		for i := range b {
			da.Set(k, i, q.At(k, i)*(-ls.At(i, k)/float64(b)-s))
		}
	}
	var sym mat.Dense
	sym.Add(da, da.T())
	var dzq mat.Dense
	dzq.Mul(&sym, z)
	dzq.Scale(1/(2*temperature), &dzq)
	dz.Add(&dz, &dzq)

	return &WATTResult{
		Preds:   preds,
		Targets: q,
		Loss:    loss,
		DLdF:    normalizeRowsBackward(z, norms, &dz),
	}, nil
}
