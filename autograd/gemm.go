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
		gemm32(transA, transB, m, n, k, float32(alpha), a32, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
		return
	}
	gemm64(transA, transB, m, n, k, float64(alpha), any(a).([]float64), lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
}

// packDepth is the depth of the K slices gemm32 packs in parallel: the
// kernel's K block (kc), so that the slices add up in the order, and with
// the rounding, of one kernel.Gemm call.
const packDepth = 256

// gemm32 is kernel.Gemm with op(B) packed in parallel: kernel.Gemm packs
// it on the calling goroutine before the (parallel) product, which for a
// weight of 768×3072 takes 3–7 ms, some 5% of the product at batch 64 on two
// cores. Here op(B) is cut into K slices of packDepth rows, packed
// concurrently, and the slices' products are summed into C one after the
// other.
func gemm32(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if k <= packDepth || kernel.Threads() < 2 {
		kernel.Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	packs := packSlices(transB, k, n, b, ldb)
	gemmSlices(transA, m, alpha, a, lda, packs, beta, nil, c, ldc)
	for _, p := range packs {
		p.Release()
	}
}

// linear32 computes y = x·Wᵀ + bias (x is m×k, W is n×k, bias has n
// values) with the bias added by the GEMM as it stores C, saving a pass
// over y.
func linear32(m, n, k int, x, w, bias, y []float32) {
	if m == 0 || n == 0 {
		return
	}
	if k <= packDepth || kernel.Threads() < 2 {
		p := kernel.PackB(true, k, n, w, k)
		kernel.GemmPackedBias(false, m, 1, x, k, p, bias, y, n)
		p.Release()
		return
	}
	packs := packSlices(true, k, n, w, k)
	gemmSlices(false, m, 1, x, k, packs, 0, bias, y, n)
	for _, p := range packs {
		p.Release()
	}
}

// packSlices packs op(B) (k×n; B itself, or Bᵀ of a stored n×k matrix) as
// K slices of packDepth rows, concurrently.
func packSlices(transB bool, k, n int, b []float32, ldb int) []*kernel.PackedB {
	packs := make([]*kernel.PackedB, (k+packDepth-1)/packDepth)
	kernel.ParallelFor(len(packs), func(lo, hi int) {
		for s := lo; s < hi; s++ {
			k0 := s * packDepth
			kb := min(packDepth, k-k0)
			if transB { // B is n×k: columns k0…
				packs[s] = kernel.PackB(true, kb, n, b[k0:], ldb)
			} else { // B is k×n: rows k0…
				packs[s] = kernel.PackB(false, kb, n, b[k0*ldb:], ldb)
			}
		}
	})
	return packs
}

// gemmSlices computes C = alpha·op(A)·op(B) + beta·C with op(B) packed by
// packSlices; with a bias (beta must then be 0), C = alpha·op(A)·op(B) +
// biasᵀ, the bias added by the first slice's product.
func gemmSlices(transA bool, m int, alpha float32, a []float32, lda int, packs []*kernel.PackedB, beta float32, bias, c []float32, ldc int) {
	for s, p := range packs {
		k0 := s * packDepth
		as := a[k0:] // A is m×k: columns k0…
		if transA {  // A is k×m: rows k0…
			as = a[k0*lda:]
		}
		switch {
		case s == 0 && bias != nil:
			kernel.GemmPackedBias(transA, m, alpha, as, lda, p, bias, c, ldc)
			continue
		case s > 0:
			beta = 1
		}
		kernel.GemmPacked(transA, m, alpha, as, lda, p, beta, c, ldc)
	}
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
