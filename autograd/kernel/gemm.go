package kernel

// Gemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, where
// op(A) is m×k and op(B) is k×n; op(X) = Xᵀ when the matching trans flag is
// set. lda, ldb and ldc are the leading dimensions of the stored matrices.
// With beta == 0, C is overwritten without being read.
func Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	p := PackB(transB, k, n, b, ldb)
	GemmPacked(transA, m, alpha, a, lda, p, beta, c, ldc)
	p.Release()
}

// GemmBatched runs batch independent GEMMs C_i = alpha·op(A_i)·op(B_i) + beta·C_i,
// where operand i starts at offset i·stride in its slice. It is meant for the
// many small products of attention (one per image and head).
func GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32,
	a []float32, lda, strideA int, b []float32, ldb, strideB int,
	beta float32, c []float32, ldc, strideC int) {
	ParallelFor(batch, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p := PackB(transB, k, n, b[i*strideB:], ldb)
			gemmPackedSerial(transA, m, alpha, a[i*strideA:], lda, p, beta, c[i*strideC:], ldc)
			p.Release()
		}
	})
}
