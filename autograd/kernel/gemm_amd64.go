package kernel

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_kernels.go

//go:noescape
func sgemmAVX2(kb int, a *float32, b *float32, c *float32, ldc int, alpha float32, load bool, bias *float32)

//go:noescape
func sgemmAVX512(kb int, a *float32, b *float32, c *float32, ldc int, alpha float32, load bool, bias *float32)

//go:noescape
func sgemmAVX2Rows(kb int, a *float32, lda int, b *float32, c *float32, ldc int, alpha float32, load bool, bias *float32)

//go:noescape
func sgemmAVX512Rows(kb int, a *float32, lda int, b *float32, c *float32, ldc int, alpha float32, load bool, bias *float32)

// The assembly kernels read kb·mr packed values of A and kb·nr of B, and
// read/write mr rows of nr values of C. The slices passed by gemmBlock always
// cover that; the checks below keep a bad caller from reading out of bounds.
func tileAVX2(kb int, a, b, c []float32, ldc int, alpha float32, load bool, bias []float32) {
	_ = a[kb*6-1]
	_ = b[kb*16-1]
	_ = c[5*ldc+15]
	sgemmAVX2(kb, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, alpha, load, biasPtr(bias, 16))
}

func tileAVX512(kb int, a, b, c []float32, ldc int, alpha float32, load bool, bias []float32) {
	_ = a[kb*8-1]
	_ = b[kb*32-1]
	_ = c[7*ldc+31]
	sgemmAVX512(kb, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, alpha, load, biasPtr(bias, 32))
}

// The Rows kernels read mr rows of kb values at a, a+lda, …; the checks
// below keep a bad caller from reading out of bounds.
func rowsAVX2(kb int, a []float32, lda int, b, c []float32, ldc int, alpha float32, load bool, bias []float32) {
	_ = a[5*lda+kb-1]
	_ = b[kb*16-1]
	_ = c[5*ldc+15]
	sgemmAVX2Rows(kb, unsafe.SliceData(a), lda, unsafe.SliceData(b), unsafe.SliceData(c), ldc, alpha, load, biasPtr(bias, 16))
}

func rowsAVX512(kb int, a []float32, lda int, b, c []float32, ldc int, alpha float32, load bool, bias []float32) {
	_ = a[7*lda+kb-1]
	_ = b[kb*32-1]
	_ = c[7*ldc+31]
	sgemmAVX512Rows(kb, unsafe.SliceData(a), lda, unsafe.SliceData(b), unsafe.SliceData(c), ldc, alpha, load, biasPtr(bias, 32))
}

// biasPtr is the kernels' bias argument: nil for none, else the first of
// nr values (checked).
func biasPtr(bias []float32, nr int) *float32 {
	if bias == nil {
		return nil
	}
	_ = bias[nr-1]
	return unsafe.SliceData(bias)
}

var (
	avx2Kernel   = microKernel{name: "avx2", mr: 6, nr: 16, tile: tileAVX2, rows: rowsAVX2}
	avx512Kernel = microKernel{name: "avx512", mr: 8, nr: 32, tile: tileAVX512, rows: rowsAVX512}
)

func available() []microKernel {
	var ks []microKernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, avx2Kernel)
	}
	return append(ks, goKernel)
}
