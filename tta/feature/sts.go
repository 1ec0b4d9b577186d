package feature

import (
	"errors"
	"fmt"

	"gonum.org/v1/gonum/mat"
)

// Spectrum is the top of the singular spectrum of a head T = U·S·Vᵀ (C×d,
// the initial text prototypes): the right singular vectors V_k (d×k) and
// their singular values S_k, largest first. STS steers the prototypes
// within span(V_k), each direction scaled by its singular value.
type Spectrum struct {
	Basis  *mat.Dense // V_k, d×k
	Values []float64  // S_k
}

// NewSpectrum returns the top k singular directions of t (C×d); k is cut
// to the rank the SVD can give, min(C, d).
func NewSpectrum(t mat.Matrix, k int) (*Spectrum, error) {
	c, d := t.Dims()
	if k < 1 {
		return nil, fmt.Errorf("feature: sts: %d singular directions, want at least 1", k)
	}
	k = min(k, c, d)
	var svd mat.SVD
	if !svd.Factorize(t, mat.SVDThinV) {
		return nil, errors.New("feature: sts: the SVD of the text prototypes did not converge")
	}
	var v mat.Dense
	svd.VTo(&v)
	return &Spectrum{Basis: mat.DenseCopyOf(v.Slice(0, d, 0, k)), Values: svd.Values(nil)[:k]}, nil
}

// Steer returns the steered, renormalised prototypes T' = normalize(T + δ)
// with δ = V_k·(S_k ⊙ γ), one shift for every class, and the norms of
// T + δ's rows (for the backward pass).
func (s *Spectrum) Steer(t mat.Matrix, gamma []float64) (steered *mat.Dense, norms []float64, err error) {
	d, k := s.Basis.Dims()
	c, td := t.Dims()
	if len(gamma) != k || td != d {
		return nil, nil, fmt.Errorf("feature: sts: %d coefficients for %d directions, prototypes %d wide for a %d-wide basis", len(gamma), k, td, d)
	}
	delta := make([]float64, d)
	for j := range k {
		w := s.Values[j] * gamma[j]
		for i := range d {
			delta[i] += w * s.Basis.At(i, j)
		}
	}
	shifted := mat.NewDense(c, d, nil)
	for r := range c {
		row := shifted.RawRowView(r)
		for i := range d {
			row[i] = t.At(r, i) + delta[i]
		}
	}
	steered, norms = NormalizeRows(shifted)
	return steered, norms, nil
}

// SteeringResult is SteeringLoss's result on one image's views.
type SteeringResult struct {
	// Logits are scale·F̂·T'ᵀ (V×C) with the steered prototypes.
	Logits   *mat.Dense
	Marginal *MarginalResult
	// DLdGamma is ∂Loss/∂γ (k).
	DLdGamma []float64
}

// SteeringLoss is STS's objective on the normalised view features fn
// (V×d) for the coefficients γ: the marginal entropy (MarginalEntropy over
// rows, nil for all) of the logits scale·fn·T'ᵀ with T' = Steer(t, γ), and
// its gradient w.r.t. γ through the renormalisation and the shift, with no
// gradient through either encoder.
func (s *Spectrum) SteeringLoss(fn, t mat.Matrix, gamma []float64, scale float64, rows []int) (*SteeringResult, error) {
	steered, norms, err := s.Steer(t, gamma)
	if err != nil {
		return nil, err
	}
	logits := Logits(fn, steered, scale)
	m, err := MarginalEntropy(logits, rows)
	if err != nil {
		return nil, fmt.Errorf("feature: sts: %w", err)
	}
	// ∂L/∂T' = scale·(∂L/∂logits)ᵀ·F̂, then through the row normalisation;
	// every class's row moved by the same δ, so ∂L/∂δ sums the rows.
	var dt mat.Dense
	dt.Mul(m.DLdLogits.T(), fn)
	dt.Scale(scale, &dt)
	dshift := normalizeRowsBackward(steered, norms, &dt)
	c, d := dshift.Dims()
	ddelta := make([]float64, d)
	for r := range c {
		for i, v := range dshift.RawRowView(r) {
			ddelta[i] += v
		}
	}
	_, k := s.Basis.Dims()
	dg := make([]float64, k)
	for j := range k {
		var sum float64
		for i := range d {
			sum += s.Basis.At(i, j) * ddelta[i]
		}
		dg[j] = s.Values[j] * sum
	}
	return &SteeringResult{Logits: logits, Marginal: m, DLdGamma: dg}, nil
}
