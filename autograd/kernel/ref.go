package kernel

// GemmRef is the reference GEMM: C = alpha·op(A)·op(B) + beta·C, row-major,
// op(X) = Xᵀ when the matching trans flag is set. It accumulates in float64
// per element, so tests can use it as the exact answer for float32 inputs.
// With beta == 0, C is overwritten without being read (NaNs in C vanish).
func GemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(v)
		}
	}
}
