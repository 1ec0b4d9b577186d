//go:build !amd64

package kernel

// haveTransposeStrip8 is false: PackB transposes with scalar code only.
var haveTransposeStrip8 = false

func transposeStrip8(dst []float32, dstStride int, src []float32, ldb, groups int) {
	panic("kernel: transposeStrip8 without assembly support")
}
