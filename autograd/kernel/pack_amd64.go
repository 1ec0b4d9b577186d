package kernel

import "unsafe"

//go:noescape
func transposeStrip8AVX2(dst *float32, dstStride int, src *float32, ldb int, groups int)

// haveTransposeStrip8 gates transposeStrip8; a variable so tests can also
// exercise the scalar path.
var haveTransposeStrip8 = haveAVX2

// transposeStrip8 writes dst[kk*dstStride+j] = src[j*ldb+kk] for j < 8 and
// kk < 8·groups. Callers check haveTransposeStrip8 first.
func transposeStrip8(dst []float32, dstStride int, src []float32, ldb, groups int) {
	if groups <= 0 {
		return
	}
	// The assembly reads and writes exactly these extremes and nothing past
	// them; the checks keep a bad caller in bounds.
	_ = src[7*ldb+8*groups-1]
	_ = dst[(8*groups-1)*dstStride+7]
	transposeStrip8AVX2(unsafe.SliceData(dst), dstStride, unsafe.SliceData(src), ldb, groups)
}
