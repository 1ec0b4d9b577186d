package autograd

import (
	"github.com/subtta/subtta/autograd/kernel"
)

// gemm computes C = alpha·op(A)·op(B) + beta·C (row-major, op(X) = Xᵀ when
// the flag is set): kernel.Gemm for float32, gemm64 for float64.
func gemm[T dtype](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if a32, ok := any(a).([]float32); ok {
		// One call for the whole product (kernel.PackB packs op(B) on all
		// cores): each block of C stays in cache across K, and the cores
		// wait for each other once, at the end.
		kernel.Gemm(transA, transB, m, n, k, float32(alpha), a32, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
		return
	}
	gemm64(transA, transB, m, n, k, float64(alpha), any(a).([]float64), lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
}

// gemmSerial is gemm on the calling goroutine only (for work already split
// over goroutines, such as attention heads).
func gemmSerial[T dtype](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if a32, ok := any(a).([]float32); ok {
		// GemmBatched with one item runs on the calling goroutine.
		kernel.GemmBatched(transA, transB, 1, m, n, k, float32(alpha), a32, lda, 0, any(b).([]float32), ldb, 0, float32(beta), any(c).([]float32), ldc, 0)
		return
	}
	gemm64(transA, transB, m, n, k, float64(alpha), any(a).([]float64), lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
}

// gemm64 is a plain float64 GEMM: the reference path used by gradient
// checks. It is correct for any shape and not tuned.
func gemm64(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(ci)
		case 1:
		default:
			for j := range ci {
				ci[j] *= beta
			}
		}
		for p := 0; p < k; p++ {
			var av float64
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			av *= alpha
			if av == 0 {
				continue
			}
			if transB {
				for j := range ci {
					ci[j] += av * b[j*ldb+p]
				}
			} else {
				bp := b[p*ldb : p*ldb+n]
				for j, bv := range bp {
					ci[j] += av * bv
				}
			}
		}
	}
}

// parallelFor splits [0, n) over the kernel's goroutines.
func parallelFor(n int, fn func(lo, hi int)) { kernel.ParallelFor(n, fn) }
