package feature

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// covEps is the 1e-6 that the official code adds to the n−1 of every
// covariance denominator, and (times I) to the batch covariance.
const covEps = 1e-6

// SubspaceOptions choose the rank and the principal components of the
// subspaces. The zero value is not usable: Rank must be positive.
type SubspaceOptions struct {
	// Rank is R; the subspace rank is r = min(C−1, R).
	Rank int
	// KeepTopPC keeps the first principal component. The official code drops
	// it in both the text and the visual basis (REMOVE_FIRST_PC=True).
	KeepTopPC bool
	// KeepNullDirections reproduces the official code when r reaches past the
	// rank of the centred text features (CIFAR-10: C=10 gives rank 9, but
	// with the top PC dropped r=9 needs a 10th direction). The code then uses
	// a right singular vector of singular value 0, an arbitrary direction of
	// the null space chosen by LAPACK. By default such directions are left
	// out and r shrinks (CIFAR-10: principal components 2–9, r=8).
	KeepNullDirections bool
}

// TextSubspace is the text side of SubTTA, built once from the class
// embeddings T (C×d, L2-normalised rows).
type TextSubspace struct {
	Mean           []float64     // column mean of T
	Cov            *mat.SymDense // Σ_T = TcᵀTc/(C−1+1e-6)
	SingularValues []float64     // of Tc, descending, min(C, d) of them
	// Basis is B_T (r×d): right singular vectors First…First+r−1 of Tc.
	Basis *mat.Dense
	// Projector is P_T = B_TᵀB_T (d×d).
	Projector *mat.SymDense
	// First is the index of the first principal component used: 1 when the
	// top PC is dropped, else 0. The visual basis uses the same range.
	First int
	// Nominal is min(C−1, R), the rank the official code uses; Rank() can be
	// smaller when null directions are left out.
	Nominal int
}

// Rank is r, the number of rows of Basis.
func (s *TextSubspace) Rank() int { r, _ := s.Basis.Dims(); return r }

// NewTextSubspace builds the text subspace from the class embeddings t (C×d).
func NewTextSubspace(t mat.Matrix, opt SubspaceOptions) (*TextSubspace, error) {
	c, d := t.Dims()
	if c < 2 {
		return nil, fmt.Errorf("feature: text subspace: need at least 2 classes, have %d", c)
	}
	if opt.Rank < 1 {
		return nil, fmt.Errorf("feature: text subspace: rank R=%d < 1", opt.Rank)
	}
	tc, mean := CenterRows(t)
	cov := mat.NewSymDense(d, nil)
	cov.SymOuterK(1/(float64(c-1)+covEps), tc.T())

	var svd mat.SVD
	if !svd.Factorize(tc, mat.SVDThinV) {
		return nil, errors.New("feature: text subspace: SVD of the centred text features did not converge")
	}
	sv := svd.Values(nil)
	var v mat.Dense
	svd.VTo(&v) // d×min(C,d); column i is row i of torch's Vh

	first := 1
	if opt.KeepTopPC {
		first = 0
	}
	nominal := min(c-1, opt.Rank)
	r := nominal
	available := len(sv)
	if !opt.KeepNullDirections {
		// Numerical rank as in numpy.linalg.matrix_rank.
		tol := float64(max(c, d)) * 0x1p-52 * sv[0]
		available = 0
		for _, s := range sv {
			if s > tol {
				available++
			}
		}
	}
	r = min(r, available-first)
	if r < 1 {
		return nil, fmt.Errorf("feature: text subspace: no direction left (R=%d, C=%d, %d usable components, first %d)", opt.Rank, c, available, first)
	}
	basis := mat.NewDense(r, d, nil)
	for i := range r {
		for j := range d {
			basis.Set(i, j, v.At(j, first+i))
		}
	}
	proj := mat.NewSymDense(d, nil)
	proj.SymOuterK(1, basis.T())
	return &TextSubspace{
		Mean:           mean,
		Cov:            cov,
		SingularValues: sv,
		Basis:          basis,
		Projector:      proj,
		First:          first,
		Nominal:        nominal,
	}, nil
}

// SignNormalizeRows flips each row of m in place so that its entry of largest
// magnitude is positive (the fixtures' convention for bases, which are
// defined only up to sign).
func SignNormalizeRows(m *mat.Dense) {
	r, _ := m.Dims()
	for i := range r {
		row := m.RawRowView(i)
		best := 0
		for j, v := range row {
			if math.Abs(v) > math.Abs(row[best]) {
				best = j
			}
		}
		if row[best] < 0 {
			scale(row, -1)
		}
	}
}
