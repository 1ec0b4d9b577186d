package kernel

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_kernels.go

//go:noescape
func sgemmAVX2(kb int, a *float32, b *float32, c *float32, ldc int, alpha float32, load bool, bias *float32, tiles int, aNext int)

//go:noescape
func sgemmAVX512(kb int, a *float32, b *float32, c *float32, ldc int, alpha float32, load bool, bias *float32, tiles int, aNext int)

//go:noescape
func sgemmAVX2Rows(kb int, a *float32, lda int, b *float32, c *float32, ldc int, alpha float32, load bool, bias *float32, tiles int, aNext int)

//go:noescape
func sgemmAVX512Rows(kb int, a *float32, lda int, b *float32, c *float32, ldc int, alpha float32, load bool, bias *float32, tiles int, aNext int)

// The assembly kernels compute tiles tiles of C, one below the other. The
// packed form reads, per tile, kb·mr values of A (tile t's at t·kb·mr) and
// kb·nr of B (the same for every tile), and reads/writes mr rows of nr values
// of C; the in-place form reads mr rows of A per tile (tile t's from row
// t·mr). The slices gemmBlock passes always cover that; the checks below keep
// a bad caller from reading out of bounds.
func tileAVX2(kb int, a, b, c []float32, ldc int, alpha float32, load bool, bias []float32, tiles int) {
	_ = a[tiles*kb*6-1]
	_ = b[kb*16-1]
	_ = c[(tiles*6-1)*ldc+15]
	sgemmAVX2(kb, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, alpha, load, biasPtr(bias, 16), checkTiles(tiles), kb*6)
}

func tileAVX512(kb int, a, b, c []float32, ldc int, alpha float32, load bool, bias []float32, tiles int) {
	_ = a[tiles*kb*8-1]
	_ = b[kb*32-1]
	_ = c[(tiles*8-1)*ldc+31]
	sgemmAVX512(kb, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, alpha, load, biasPtr(bias, 32), checkTiles(tiles), kb*8)
}

func rowsAVX2(kb int, a []float32, lda int, b, c []float32, ldc int, alpha float32, load bool, bias []float32, tiles int) {
	_ = a[(tiles*6-1)*lda+kb-1]
	_ = b[kb*16-1]
	_ = c[(tiles*6-1)*ldc+15]
	sgemmAVX2Rows(kb, unsafe.SliceData(a), lda, unsafe.SliceData(b), unsafe.SliceData(c), ldc, alpha, load, biasPtr(bias, 16), checkTiles(tiles), 6*lda)
}

func rowsAVX512(kb int, a []float32, lda int, b, c []float32, ldc int, alpha float32, load bool, bias []float32, tiles int) {
	_ = a[(tiles*8-1)*lda+kb-1]
	_ = b[kb*32-1]
	_ = c[(tiles*8-1)*ldc+31]
	sgemmAVX512Rows(kb, unsafe.SliceData(a), lda, unsafe.SliceData(b), unsafe.SliceData(c), ldc, alpha, load, biasPtr(bias, 32), checkTiles(tiles), 8*lda)
}

// checkTiles returns tiles, which must be positive: the assembly loop runs
// its body before testing the count.
func checkTiles(tiles int) int {
	if tiles < 1 {
		panic("kernel: micro-kernel called for no tile")
	}
	return tiles
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
