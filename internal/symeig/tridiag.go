package symeig

import (
	"gonum.org/v1/gonum/blas"
	lapack "gonum.org/v1/gonum/lapack/gonum"
)

// tridiagonalize reduces the symmetric matrix A whose upper triangle is
// held in a (n×n, row-major; the strict lower triangle is not read, and a
// is overwritten) to tridiagonal form, A = Q·T·Qᵀ, with T's diagonal in d
// (length n) and its off-diagonal in e (length n−1, e[i] couples i and
// i+1). It writes Qᵀ into z (n×n, row-major): row i of z is column i of Q.
func tridiagonalize(a []float64, n int, d, e, z []float64) {
	var impl lapack.Implementation
	tau := make([]float64, n-1)
	work := []float64{0}
	impl.Dsytrd(blas.Upper, n, a, n, d, e, tau, work, -1)
	impl.Dorgtr(blas.Upper, n, a, n, tau, work, -1)
	work = make([]float64, int(work[0])+n)
	impl.Dsytrd(blas.Upper, n, a, n, d, e, tau, work, len(work))
	impl.Dorgtr(blas.Upper, n, a, n, tau, work, len(work))
	for i := range n {
		for j := range n {
			z[j*n+i] = a[i*n+j]
		}
	}
}
