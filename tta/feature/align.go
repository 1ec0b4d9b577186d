package feature

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/rowdot"
	"github.com/subtta/subtta/internal/symeig"
)

// DefaultGapTol is the default relative eigen-gap guard of the alignment
// gradient: a gap |λ_k − λ_j| below DefaultGapTol·λ_max is clamped to that
// size (keeping its sign). The fixtures' smallest boundary gaps are about
// 8e-5·λ_max, far above it.
const DefaultGapTol = 1e-9

// AlignOptions configure the visual covariance and the alignment loss.
type AlignOptions struct {
	// Alpha is the weight on history: Σ = α·Σ_old + (1−α)·S. As in the
	// official code, α = 0 turns the alignment step off.
	Alpha float64
	// Disabled turns the alignment step off whatever Alpha is.
	Disabled bool
	// NoEMA takes each batch's covariance alone, Σ = S (α = 0 in the
	// formulas), with the alignment step on whatever Alpha is: the paper's
	// "w/o EMA".
	NoEMA bool
	// GapTol is the relative eigen-gap guard; 0 means DefaultGapTol.
	GapTol float64
}

func (o AlignOptions) off() bool { return o.Disabled || (o.Alpha == 0 && !o.NoEMA) }

// Alignment is the result of one alignment step on a batch of features.
type Alignment struct {
	S       *mat.SymDense // batch covariance FcᵀFc/(B−1+1e-6) + 1e-6·I
	Sigma   *mat.SymDense // α·Σ_old + (1−α)·S
	Eigvals []float64     // of Sigma, descending
	Eigvecs *mat.Dense    // d×d, column i belongs to Eigvals[i]
	Basis   *mat.Dense    // B_V (r×d): eigenvectors First…First+r−1 as rows
	Loss    float64       // −‖B_V B_Tᵀ‖²_F / (r·max(1−α, 1e-6))
	DLdS    *mat.SymDense // gradient w.r.t. S (symmetric)
	DLdF    *mat.Dense    // gradient w.r.t. the features F (B×d)
	// GuardedGaps counts the eigen-gaps clamped by the guard; MinGap is the
	// smallest |λ_k − λ_j| over the pairs that enter the gradient.
	GuardedGaps int
	MinGap      float64
}

// BatchCovariance returns S = FcᵀFc/(B−1+1e-6) + 1e-6·I for the B×d
// features f (Fc = f minus its row mean), and Fc.
func BatchCovariance(f mat.Matrix) (*mat.SymDense, *mat.Dense) {
	b, d := f.Dims()
	fc, _ := CenterRows(f)
	s := mat.NewSymDense(d, nil)
	s.SymOuterK(1/(float64(b-1)+covEps), fc.T())
	for i := range d {
		s.SetSym(i, i, s.At(i, i)+covEps)
	}
	return s, fc
}

// Align computes the SubTTA alignment step for the features f (B×d,
// unnormalised image features) against the text subspace, given the previous
// covariance sigmaOld (Σ_T on the first batch): S, the EMA Σ, its descending
// eigendecomposition (float64), B_V, L_align and its closed-form gradients
// w.r.t. S and f. The result does not depend on opt.Disabled; callers
// check that (see Aligner).
//
// With Σ = Σ_i λ_i v_i v_iᵀ and U = {First…First+r−1},
//
//	∂L/∂Σ = −1/(r·m) Σ_{k∈U} Σ_{j∉U} (v_jᵀ P_T v_k)/(λ_k−λ_j) (v_j v_kᵀ + v_k v_jᵀ),
//
// m = max(1−α, 1e-6); pairs inside U cancel. ∂L/∂S = (1−α)·∂L/∂Σ, so the
// (1−α) cancels the loss's 1/(1−α) unless α > 1−1e-6. Then
// ∂L/∂F = 2·Fc·∂L/∂S/(B−1+1e-6): the centring adds nothing because the
// columns of Fc sum to zero.
func Align(f mat.Matrix, sigmaOld mat.Symmetric, text *TextSubspace, opt AlignOptions) (*Alignment, error) {
	b, d := f.Dims()
	if sigmaOld.SymmetricDim() != d {
		return nil, fmt.Errorf("feature: align: previous covariance is %d×%d, features have %d dims", sigmaOld.SymmetricDim(), sigmaOld.SymmetricDim(), d)
	}
	alpha, gapTol, err := checkAlign(f, text, opt)
	if err != nil {
		return nil, err
	}
	r := text.Rank()
	first := text.First

	s, fc := BatchCovariance(f)
	sigma := mat.NewSymDense(d, nil)
	for i := range d {
		for j := i; j < d; j++ {
			sigma.SetSym(i, j, alpha*sigmaOld.At(i, j)+(1-alpha)*s.At(i, j))
		}
	}

	dec, err := factorizeSym(sigma)
	if err != nil {
		return nil, fmt.Errorf("feature: align: eigendecomposition of the covariance: %w", err)
	}
	// Descending order, eigenvectors as columns.
	lam := make([]float64, d)
	vecs := mat.NewDense(d, d, nil)
	raw := vecs.RawMatrix()
	for i := range d {
		lam[i] = dec.Values[d-1-i]
		row := dec.Vectors.RawRowView(d - 1 - i)
		for k, v := range row {
			raw.Data[k*raw.Stride+i] = v
		}
	}
	basis := mat.NewDense(r, d, nil)
	basis.Copy(vecs.Slice(0, d, first, first+r).T())

	// Loss = −‖B_V B_Tᵀ‖²_F/(r·m).
	m := math.Max(1-alpha, 1e-6)
	loss := alignLoss(basis, text.Basis, r, m)

	// M = Vᵀ P_T V, needed for columns k ∈ U only.
	var pv, mm mat.Dense
	pv.Mul(text.Projector, vecs.Slice(0, d, first, first+r))
	mm.Mul(vecs.T(), &pv) // d×r: mm[j, k−first] = v_jᵀ P_T v_k

	// K[j,k] = −(1−α)/(r·m) · M[j,k]/(λ_k−λ_j) for k∈U, j∉U (d×r, zero rows
	// inside U); ∂L/∂S = A + Aᵀ with A = V·K·V_Uᵀ.
	coef := -(1 - alpha) / (float64(r) * m)
	k := mat.NewDense(d, r, nil)
	guarded, minGap := alignmentGrad(lam, first, r, coef, gapTol, mm.At, k.Set)
	var vk, a mat.Dense
	vk.Mul(vecs, k)
	a.Mul(&vk, vecs.Slice(0, d, first, first+r).T())
	dldsSym := mat.NewSymDense(d, nil)
	for i := range d {
		for j := i; j < d; j++ {
			dldsSym.SetSym(i, j, a.At(i, j)+a.At(j, i))
		}
	}

	dldf := mat.NewDense(b, d, nil)
	dldf.Mul(fc, dldsSym)
	dldf.Scale(2/(float64(b-1)+covEps), dldf)

	return &Alignment{
		S:           s,
		Sigma:       sigma,
		Eigvals:     lam,
		Eigvecs:     vecs,
		Basis:       basis,
		Loss:        loss,
		DLdS:        dldsSym,
		DLdF:        dldf,
		GuardedGaps: guarded,
		MinGap:      minGap,
	}, nil
}

// CovarianceBasis returns B_V of the batch covariance alone: the basis
// that Align(f, text.Cov, text, AlignOptions{}) returns (α = 0, so Σ = S),
// bit for bit, computed with the same arithmetic (S, the EMA with α = 0,
// the decomposition on the current device or the CPU as Align's) but
// without the loss, its gradients and the d×d eigenvector matrix. The
// diagnostics of a method without an alignment of its own measure their
// principal angles on it.
func CovarianceBasis(f mat.Matrix, text *TextSubspace) (*mat.Dense, error) {
	return covarianceBasis(f, text, factorizeSym)
}

// CovarianceBasisOnHost is CovarianceBasis with the decomposition always
// on the CPU (internal/symeig), whatever device is set: it is safe to call
// from a goroutine other than the one driving the device (a GPU's
// cuSOLVER handle is not), and gives the CPU's bits on any device. With
// serial the decomposition stays on the calling goroutine
// (symeig.FactorizeSerial, the same bits), for callers that run several
// at once.
func CovarianceBasisOnHost(f mat.Matrix, text *TextSubspace, serial bool) (*mat.Dense, error) {
	factorize := symeig.Factorize
	if serial {
		factorize = symeig.FactorizeSerial
	}
	return covarianceBasis(f, text, func(a *mat.SymDense) (*symeig.Decomposition, error) { return factorize(a) })
}

func covarianceBasis(f mat.Matrix, text *TextSubspace, factorize func(*mat.SymDense) (*symeig.Decomposition, error)) (*mat.Dense, error) {
	_, d := f.Dims()
	if text.Cov.SymmetricDim() != d {
		return nil, fmt.Errorf("feature: align: previous covariance is %d×%d, features have %d dims", text.Cov.SymmetricDim(), text.Cov.SymmetricDim(), d)
	}
	alpha, _, err := checkAlign(f, text, AlignOptions{})
	if err != nil {
		return nil, err
	}
	r := text.Rank()
	first := text.First

	s, _ := BatchCovariance(f)
	// Σ = α·Σ_T + (1−α)·S as Align forms it, in S's place: with α = 0 it
	// is S but for the sign of a zero (0·x is −0 for a negative x).
	sr, so := s.RawSymmetric(), text.Cov.RawSymmetric()
	for i := range d {
		for j := i; j < d; j++ {
			sr.Data[i*sr.Stride+j] = alpha*so.Data[i*so.Stride+j] + (1-alpha)*sr.Data[i*sr.Stride+j]
		}
	}
	dec, err := factorize(s)
	if err != nil {
		return nil, fmt.Errorf("feature: align: eigendecomposition of the covariance: %w", err)
	}
	// Row i of B_V is the eigenvector of the (first+i)-th largest
	// eigenvalue: row d−1−first−i of the ascending decomposition.
	basis := mat.NewDense(r, d, nil)
	for i := range r {
		copy(basis.RawRowView(i), dec.Vectors.RawRowView(d-1-first-i))
	}
	return basis, nil
}

// checkAlign checks Align's features and options against the text
// subspace and returns α (0 with NoEMA) and the gap guard.
func checkAlign(f mat.Matrix, text *TextSubspace, opt AlignOptions) (alpha, gapTol float64, err error) {
	b, d := f.Dims()
	if b < 1 {
		return 0, 0, errors.New("feature: align: empty batch")
	}
	if _, td := text.Basis.Dims(); td != d {
		return 0, 0, fmt.Errorf("feature: align: features have %d dims, text subspace %d", d, td)
	}
	alpha = opt.Alpha
	if !(alpha >= 0 && alpha <= 1) {
		return 0, 0, fmt.Errorf("feature: align: alpha %v outside [0, 1]", alpha)
	}
	if opt.NoEMA {
		alpha = 0
	}
	gapTol = opt.GapTol
	if gapTol == 0 {
		gapTol = DefaultGapTol
	}
	if text.First+text.Rank() > d {
		return 0, 0, fmt.Errorf("feature: align: rank %d from component %d exceeds dimension %d", text.Rank(), text.First, d)
	}
	return alpha, gapTol, nil
}

// alignmentGrad computes, from the eigenvalues in descending order and
// mm[j, k−first] = v_jᵀ P_T v_k (mm(j, k)), the coefficients K[j, k−first] =
// coef·mm/(λ_k−λ_j) for k ∈ U, j ∉ U (set), with the gap guard, and returns
// the guarded count and the smallest gap.
func alignmentGrad(lam []float64, first, r int, coef, gapTol float64, mm func(j, k int) float64, set func(j, k int, v float64)) (guarded int, minGap float64) {
	d := len(lam)
	tol := gapTol * math.Max(math.Abs(lam[0]), math.SmallestNonzeroFloat64)
	minGap = math.Inf(1)
	for kk := first; kk < first+r; kk++ {
		for j := range d {
			if j >= first && j < first+r {
				continue
			}
			gap := lam[kk] - lam[j]
			minGap = math.Min(minGap, math.Abs(gap))
			if math.Abs(gap) < tol {
				guarded++
				// Eigenvalues are sorted: j < k means λ_k ≤ λ_j.
				if j < kk {
					gap = -tol
				} else {
					gap = tol
				}
			}
			set(j, kk-first, coef*mm(j, kk-first)/gap)
		}
	}
	return guarded, minGap
}

// alignLoss is −‖B_V B_Tᵀ‖²_F/(r·m). The product is rowdot's, gonum's
// mat.Dense.Mul(basis, textBasis.T()) to the bit in a quarter of its time
// (the r×d by r×d product of every SubTTA step, on the host with or
// without a device).
func alignLoss(basis, textBasis mat.Matrix, r int, m float64) float64 {
	cross := rowdot.MulMatrix(basis, textBasis)
	fro := mat.Norm(cross, 2) // for a Dense, norm 2 is Frobenius
	return -fro * fro / (float64(r) * m)
}

// Aligner keeps the EMA covariance across batches (the official code's
// global_cov) and runs Align on each batch.
//
// With a kernel.Float64Device set (autograd.SetDevice: a GPU), Update keeps
// Σ and P_T on the device and runs the step's products there in float64
// (alignOnDevice); Covariance and SyncCovariance bring Σ back.
type Aligner struct {
	Text    *TextSubspace
	Options AlignOptions
	sigma   *mat.SymDense // Σ on the host; older than the device's when stale
	guarded int

	dev   *alignDevice // Σ and P_T on the device, after an Update there
	stale bool
	// probed is the last device deviceCan tried, and can its answer.
	probed kernel.Float64Device
	can    bool
}

// NewAligner returns an Aligner whose history starts at Σ_T.
func NewAligner(text *TextSubspace, opt AlignOptions) *Aligner {
	a := &Aligner{Text: text, Options: opt}
	a.Reset()
	return a
}

// Enabled reports whether the alignment step runs (not Disabled, and α ≠ 0
// or NoEMA).
func (a *Aligner) Enabled() bool { return !a.Options.off() }

// Update aligns one batch of features and stores the new Σ (detached) as the
// history. It returns nil, nil when the alignment step is off.
func (a *Aligner) Update(f mat.Matrix) (*Alignment, error) {
	res, finish, err := a.UpdateDeferred(f)
	if err == nil {
		finish()
	}
	return res, err
}

// UpdateDeferred is Update with the host's last part left to finish, which
// fills the result's Loss and Basis: on a device (alignOnDevice) the
// gradient ∂L/∂F is ready before them, so a caller can queue the backward
// pass on the device first and compute them while the device runs it. The
// result's other fields are set at once. finish is never nil; on the CPU
// it does nothing. Call it before the next Update.
func (a *Aligner) UpdateDeferred(f mat.Matrix) (res *Alignment, finish func(), err error) {
	finish = func() {}
	if !a.Enabled() {
		return nil, finish, nil
	}
	if d, ok := kernel.Current().(kernel.Float64Device); ok && a.deviceCan(d) {
		res, finish, err := a.updateOnDevice(d, f)
		if err != nil {
			return nil, func() {}, err
		}
		a.guarded += res.GuardedGaps
		return res, finish, nil
	}
	if err := a.SyncCovariance(); err != nil {
		return nil, finish, err
	}
	a.dropDevice()
	res, err = Align(f, a.sigma, a.Text, a.Options)
	if err != nil {
		return nil, finish, err
	}
	a.sigma = res.Sigma
	a.guarded += res.GuardedGaps
	return res, finish, nil
}

// Covariance returns a copy of the current history Σ. When Update keeps Σ
// on a device, it downloads Σ first (SyncCovariance) and panics if that
// fails; call SyncCovariance first to have the error instead.
func (a *Aligner) Covariance() *mat.SymDense {
	if err := a.SyncCovariance(); err != nil {
		panic(err)
	}
	return mat.NewSymDense(a.sigma.SymmetricDim(), append([]float64(nil), a.sigma.RawSymmetric().Data...))
}

// SetCovariance replaces the history with a copy of sigma.
func (a *Aligner) SetCovariance(sigma mat.Symmetric) error {
	d := a.Text.Cov.SymmetricDim()
	if sigma.SymmetricDim() != d {
		return fmt.Errorf("feature: aligner: covariance is %d×%d, want %d×%d", sigma.SymmetricDim(), sigma.SymmetricDim(), d, d)
	}
	s := mat.NewSymDense(d, nil)
	s.CopySym(sigma)
	a.dropDevice()
	a.sigma = s
	return nil
}

// Reset sets the history back to Σ_T. The official code never does this
// between corruptions (its global_cov survives the model reset); a Method
// that follows the code does not call Reset there.
func (a *Aligner) Reset() {
	a.dropDevice()
	a.sigma = mat.NewSymDense(a.Text.Cov.SymmetricDim(), nil)
	a.sigma.CopySym(a.Text.Cov)
}

// GuardedGaps is the total number of eigen-gaps clamped since construction.
func (a *Aligner) GuardedGaps() int { return a.guarded }

// factorizeSym decomposes the covariance on the device set by
// autograd.SetDevice (kernel.Current) when it can (kernel.SymmetricEigen: a GPU's cuSOLVER),
// else on the CPU (internal/symeig). Both are float64; the decompositions
// agree within rounding, and the loss and its gradient do not depend on the
// eigenvectors' signs.
func factorizeSym(a *mat.SymDense) (*symeig.Decomposition, error) {
	if d, ok := kernel.Current().(kernel.SymmetricEigen); ok {
		n := a.SymmetricDim()
		full := make([]float64, n*n)
		for i := range n {
			for j := range n {
				full[i*n+j] = a.At(i, j)
			}
		}
		values, vectors, err := d.SymEig(full, n)
		if err == nil {
			return &symeig.Decomposition{Values: values, Vectors: mat.NewDense(n, n, vectors)}, nil
		}
		if !errors.Is(err, kernel.ErrUnsupported) {
			return nil, err
		}
	}
	return symeig.Factorize(a)
}

// SetGuardedGaps sets the count that GuardedGaps reports, for an Aligner
// restored from a saved state.
func (a *Aligner) SetGuardedGaps(n int) { a.guarded = n }
