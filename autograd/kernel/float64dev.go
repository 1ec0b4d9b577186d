package kernel

import (
	"fmt"
	"unsafe"
)

// Float64Device is a Device that can also multiply and decompose float64
// matrices kept in its buffers: SubTTA's covariance, its EMA, its
// eigendecomposition, the alignment gradient's products and the subspace
// projection, which the CPU computes in float64 (package gpu: cublasDgemm
// and cuSOLVER). A float64 value takes two of a buffer's float32 places:
// Alloc(2·n) holds n of them, UploadFloat64 and DownloadFloat64 copy them,
// and sizes and leading dimensions count float64 values.
type Float64Device interface {
	Device
	// Dgemm is Gemm in float64: C = alpha·op(A)·op(B) + beta·C, row-major,
	// C not read when beta is 0.
	Dgemm(transA, transB bool, m, n, k int, alpha float64, a Buf, lda int, b Buf, ldb int, beta float64, c Buf, ldc int) error
	// SymEigInto decomposes the symmetric n×n matrix a (left as it is)
	// into its eigenvalues in ascending order (values, n) and its
	// eigenvectors as the rows of vectors (n×n, row-major), as
	// SymmetricEigen.SymEig does on host memory. An error wrapping
	// ErrUnsupported means the device cannot do it here.
	SymEigInto(values, vectors, a Buf, n int) error
}

// UploadFloat64 copies src into the first len(src) float64 values of dst,
// a buffer of a Float64Device.
func UploadFloat64(d Device, dst Buf, src []float64) error {
	return d.Upload(dst, Float64Bits(src))
}

// DownloadFloat64 copies the first len(dst) float64 values of src into dst.
func DownloadFloat64(d Device, dst []float64, src Buf) error {
	return d.Download(Float64Bits(dst), src)
}

// Float64Bits views float64 values as twice as many float32 places (their
// bits, not their values), for the float32 copies of Upload and Download.
func Float64Bits(v []float64) []float32 {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&v[0])), 2*len(v))
}

// float64s views a Host buffer as the float64 values it holds.
func float64s(b Buf) []float64 {
	s := hb(b)
	if len(s) < 2 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&s[0])), len(s)/2)
}

// Dgemm is Host's float64 product. Host is not a Float64Device (it has no
// SymEigInto: the CPU's eigendecomposition is package internal/symeig),
// but its Dgemm lets tests stand a Float64Device on it.
func (host) Dgemm(transA, transB bool, m, n, k int, alpha float64, a Buf, lda int, b Buf, ldb int, beta float64, c Buf, ldc int) error {
	as, bs, cs := float64s(a), float64s(b), float64s(c)
	need := func(rows, cols, ld, have int) bool {
		return rows == 0 || cols == 0 || ld >= cols && (rows-1)*ld+cols <= have
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if m < 0 || n < 0 || k < 0 || !need(ar, ac, lda, len(as)) || !need(br, bc, ldb, len(bs)) || !need(m, n, ldc, len(cs)) {
		return fmt.Errorf("kernel: Host.Dgemm: %d×%d×%d does not fit the buffers (leading dimensions %d, %d, %d)", m, n, k, lda, ldb, ldc)
	}
	Dgemm(transA, transB, m, n, k, alpha, as, lda, bs, ldb, beta, cs, ldc)
	return nil
}

// Dgemm computes C = alpha·op(A)·op(B) + beta·C on row-major float64
// slices (C not read when beta is 0), each sum in order of k.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				var x, y float64
				if transA {
					x = a[p*lda+i]
				} else {
					x = a[i*lda+p]
				}
				if transB {
					y = b[j*ldb+p]
				} else {
					y = b[p*ldb+j]
				}
				s += x * y
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}
