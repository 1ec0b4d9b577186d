package feature

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// alignDevice is an Aligner's state on a kernel.Float64Device: the EMA
// covariance Σ and the text projector P_T (d×d float64 each), kept there
// from one batch to the next, and d ones for Σ's diagonal.
type alignDevice struct {
	d                 kernel.Float64Device
	dim               int
	sigma, proj, ones kernel.Buf
	bufs              *[]kernel.Buf // freed by a cleanup once the Aligner is gone
	// vu, m and k are the host's copies of V_U, M and K, kept from one
	// step to the next (3 MB for ViT-B/32's rank 256 of 512): the step
	// reads them and hands none of them on.
	vu, m, k []float64
}

// newAlignDevice allocates the state on d and uploads Σ and P_T.
func newAlignDevice(d kernel.Float64Device, sigma *mat.SymDense, proj mat.Symmetric) (*alignDevice, error) {
	dim := sigma.SymmetricDim()
	ad := &alignDevice{d: d, dim: dim, bufs: new([]kernel.Buf)}
	var err error
	alloc := func(n int) kernel.Buf {
		if err != nil {
			return nil
		}
		var b kernel.Buf
		if b, err = d.Alloc(2 * n); err == nil {
			*ad.bufs = append(*ad.bufs, b)
		}
		return b
	}
	ad.sigma, ad.proj, ad.ones = alloc(dim*dim), alloc(dim*dim), alloc(dim)
	if err == nil {
		err = kernel.UploadFloat64(d, ad.sigma, symFull(sigma))
	}
	if err == nil {
		err = kernel.UploadFloat64(d, ad.proj, symFull(proj))
	}
	if err == nil {
		ones := make([]float64, dim)
		for i := range ones {
			ones[i] = 1
		}
		err = kernel.UploadFloat64(d, ad.ones, ones)
	}
	if err != nil {
		ad.free()
		return nil, err
	}
	return ad, nil
}

func (ad *alignDevice) free() {
	for _, b := range *ad.bufs {
		ad.d.Free(b)
	}
	*ad.bufs = nil
}

// symFull returns the n×n values of a symmetric matrix, row-major.
func symFull(a mat.Symmetric) []float64 {
	n := a.SymmetricDim()
	full := make([]float64, n*n)
	for i := range n {
		for j := range n {
			full[i*n+j] = a.At(i, j)
		}
	}
	return full
}

// f64 returns a float64 slice of a buffer: values i…j−1.
func f64(b kernel.Buf, i, j int) kernel.Buf { return b.Slice(2*i, 2*j) }

// alignOnDevice is Align with Σ_old in ad.sigma, replaced there by the new
// Σ, every product on the device in float64:
//
//	Σ ← α·Σ + (1−α)/(B−1+1e-6)·FcᵀFc   one Dgemm with beta = α
//	Σ_ii += (1−α)·1e-6                  one Dgemm of rank 1 down the diagonal (ldc = d+1)
//	λ, V = eig(Σ)                       SymEigInto (cuSOLVER)
//	W = V_U·P_T, M = V·Wᵀ              v_jᵀ P_T v_k for k ∈ U
//	A = V·K·V_U                         K from M and λ on the host (d×r)
//	∂L/∂F = 2/(B−1+1e-6)·Fc·(A + Aᵀ)    two Dgemms
//
// Fc and K go up; λ, V_U (the basis, r×d), M (d×r) and ∂L/∂F come back:
// O((B+r)·d) values where the CPU path moved Σ up and V down (2·d²).
// The result has Eigvals, DLdF, GuardedGaps and MinGap, and Basis and Loss
// once finish has run (the host's work the gradient does not wait for: B_V
// from V_U's rows and the loss's product); S, Sigma, Eigvecs and DLdS stay
// on the device and are nil. Its values agree with Align's within rounding
// (the products sum in another order).
func alignOnDevice(ad *alignDevice, f mat.Matrix, text *TextSubspace, opt AlignOptions) (res *Alignment, finish func(), err error) {
	alpha, gapTol, err := checkAlign(f, text, opt)
	if err != nil {
		return nil, nil, err
	}
	b, dim := f.Dims()
	if dim != ad.dim {
		return nil, nil, fmt.Errorf("feature: align: previous covariance is %d×%d, features have %d dims", ad.dim, ad.dim, dim)
	}
	r, first := text.Rank(), text.First
	d := ad.d
	var bufs []kernel.Buf
	defer func() {
		for _, x := range bufs {
			d.Free(x)
		}
	}()
	alloc := func(n int) kernel.Buf {
		if err != nil {
			return nil
		}
		var x kernel.Buf
		if x, err = d.Alloc(2 * n); err == nil {
			bufs = append(bufs, x)
		}
		return x
	}
	do := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	fcB, vals, vecs := alloc(b*dim), alloc(dim), alloc(dim*dim)
	w, mB, kB, vk, aB, g := alloc(r*dim), alloc(dim*r), alloc(dim*r), alloc(dim*r), alloc(dim*dim), alloc(b*dim)
	if err != nil {
		return nil, nil, err
	}
	fc, _ := CenterRows(f)
	c := 1 / (float64(b-1) + covEps)
	do(func() error { return kernel.UploadFloat64(d, fcB, fc.RawMatrix().Data) })
	do(func() error {
		return d.Dgemm(true, false, dim, dim, b, (1-alpha)*c, fcB, dim, fcB, dim, alpha, ad.sigma, dim)
	})
	do(func() error {
		return d.Dgemm(false, false, dim, 1, 1, (1-alpha)*covEps, ad.ones, 1, f64(ad.ones, 0, 1), 1, 1, ad.sigma, dim+1)
	})
	do(func() error { return d.SymEigInto(vals, vecs, ad.sigma, dim) })
	// The rows of vecs are the eigenvectors in ascending order: v_j, in
	// Align's descending order, is row dim−1−j, and U (j = first…first+r−1)
	// the r rows from dim−first−r, in reverse.
	vu := f64(vecs, (dim-first-r)*dim, (dim-first)*dim)
	do(func() error { return d.Dgemm(false, false, r, dim, dim, 1, vu, dim, ad.proj, dim, 0, w, dim) })
	do(func() error { return d.Dgemm(false, true, dim, r, dim, 1, vecs, dim, w, dim, 0, mB, r) })
	if len(ad.vu) != r*dim {
		ad.vu, ad.m, ad.k = make([]float64, r*dim), make([]float64, dim*r), make([]float64, dim*r)
	}
	asc, vuH, mH := make([]float64, dim), ad.vu, ad.m
	do(func() error { return kernel.DownloadFloat64(d, asc, vals) })
	do(func() error { return kernel.DownloadFloat64(d, vuH, vu) })
	do(func() error { return kernel.DownloadFloat64(d, mH, mB) })
	if err != nil {
		return nil, nil, fmt.Errorf("feature: align on %s: %w", d.Name(), err)
	}
	lam := make([]float64, dim)
	for i := range dim {
		lam[i] = asc[dim-1-i]
	}
	m := math.Max(1-alpha, 1e-6)
	// In the device's order: row a of V is v_{dim−1−a}, column q of M and
	// K belongs to k = first+r−1−q.
	kH := ad.k
	clear(kH) // alignmentGrad sets only the coefficients it keeps
	coef := -(1 - alpha) / (float64(r) * m)
	guarded, minGap := alignmentGrad(lam, first, r, coef, gapTol,
		func(j, k int) float64 { return mH[(dim-1-j)*r+r-1-k] },
		func(j, k int, v float64) { kH[(dim-1-j)*r+r-1-k] = v })
	do(func() error { return kernel.UploadFloat64(d, kB, kH) })
	do(func() error { return d.Dgemm(true, false, dim, r, dim, 1, vecs, dim, kB, r, 0, vk, r) })
	do(func() error { return d.Dgemm(false, false, dim, dim, r, 1, vk, r, vu, dim, 0, aB, dim) })
	do(func() error { return d.Dgemm(false, false, b, dim, dim, 2*c, fcB, dim, aB, dim, 0, g, dim) })
	do(func() error { return d.Dgemm(false, true, b, dim, dim, 2*c, fcB, dim, aB, dim, 1, g, dim) })
	dldf := mat.NewDense(b, dim, nil)
	do(func() error { return kernel.DownloadFloat64(d, dldf.RawMatrix().Data, g) })
	if err != nil {
		return nil, nil, fmt.Errorf("feature: align on %s: %w", d.Name(), err)
	}
	res = &Alignment{Eigvals: lam, DLdF: dldf, GuardedGaps: guarded, MinGap: minGap}
	finish = func() {
		basis := mat.NewDense(r, dim, nil)
		for i := range r {
			basis.SetRow(i, vuH[(r-1-i)*dim:(r-i)*dim])
		}
		res.Basis, res.Loss = basis, alignLoss(basis, text.Basis, r, m)
	}
	return res, finish, nil
}

// updateOnDevice is UpdateDeferred on d: the state moves there on the
// first call (Σ uploaded), and stays.
func (a *Aligner) updateOnDevice(d kernel.Float64Device, f mat.Matrix) (*Alignment, func(), error) {
	if a.dev != nil && a.dev.d != d {
		if err := a.SyncCovariance(); err != nil {
			return nil, nil, err
		}
		a.dropDevice()
	}
	if a.dev == nil {
		ad, err := newAlignDevice(d, a.sigma, a.Text.Projector)
		if err != nil {
			return nil, nil, fmt.Errorf("feature: aligner on %s: %w", d.Name(), err)
		}
		a.dev = ad
		runtime.AddCleanup(a, func(bufs *[]kernel.Buf) {
			for _, b := range *bufs {
				d.Free(b)
			}
		}, ad.bufs)
	}
	res, finish, err := alignOnDevice(a.dev, f, a.Text, a.Options)
	a.stale = true // Σ changed on the device, or is unknown after an error
	return res, finish, err
}

// deviceCan reports whether d can run the step: a device whose float64
// products or eigendecomposition are missing here (cuSOLVER not found:
// their errors wrap kernel.ErrUnsupported) leaves it on the CPU, as
// factorizeSym does, which then still uses what it can of d. A 1×1 product
// and decomposition tell, once per device; another error of theirs lets the
// step run there and fail with it.
func (a *Aligner) deviceCan(d kernel.Float64Device) bool {
	if a.dev != nil && a.dev.d == d {
		return true
	}
	if a.probed == d {
		return a.can
	}
	a.probed, a.can = d, true
	x, err := d.Alloc(4)
	if err != nil {
		return true
	}
	defer d.Free(x)
	err = kernel.UploadFloat64(d, x, []float64{1, 0})
	if err == nil {
		err = d.Dgemm(false, false, 1, 1, 1, 1, f64(x, 0, 1), 1, f64(x, 0, 1), 1, 0, f64(x, 1, 2), 1)
	}
	if err == nil {
		err = d.SymEigInto(f64(x, 1, 2), f64(x, 0, 1), f64(x, 0, 1), 1)
	}
	a.can = !errors.Is(err, kernel.ErrUnsupported)
	return a.can
}

// SyncCovariance downloads the EMA covariance Σ from the device, where
// Update keeps it when a kernel.Float64Device is set, into the Aligner's
// host copy (Covariance); it does nothing when that copy is current.
func (a *Aligner) SyncCovariance() error {
	if !a.stale || a.dev == nil {
		return nil
	}
	n := a.dev.dim
	full := make([]float64, n*n)
	if err := kernel.DownloadFloat64(a.dev.d, full, a.dev.sigma); err != nil {
		return fmt.Errorf("feature: aligner: covariance from %s: %w", a.dev.d.Name(), err)
	}
	// The device's products need not be exactly symmetric: keep the upper
	// triangle, the one a SymDense stores.
	a.sigma = mat.NewSymDense(n, full)
	a.stale = false
	return nil
}

// dropDevice frees the device state; Σ must be on the host.
func (a *Aligner) dropDevice() {
	if a.dev != nil {
		a.dev.free()
		a.dev = nil
	}
	a.stale = false
}
