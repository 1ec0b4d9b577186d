package kernel

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func gemmInt8VNNI(kg int, a *uint8, lda int, b *int8, c *float32, ldc int, rowScale *float32, rowZero *int32, colSum *int32, colScale *float32, bias *float32, tiles int)

//go:noescape
func gemmBF16AVX512(kg int, a *uint16, lda int, b *uint16, c *float32, ldc int, bias *float32, tiles int)

//go:noescape
func rowRangeAVX512(x *float32, n int) (lo, hi, bad float32)

//go:noescape
func quantizeU8AVX512(dst *uint8, x *float32, n int, inv float32, zero, levels int32)

//go:noescape
func gemmInt8AVX2(kg int, a *uint8, lda int, b *int8, c *float32, ldc int, rowScale *float32, rowZero *int32, colSum *int32, colScale *float32, bias *float32, tiles int)

//go:noescape
func rowRangeAVX2(x *float32, n int) (lo, hi, bad float32)

//go:noescape
func quantizeU8AVX2(dst *uint8, x *float32, n int, inv float32, zero, levels int32)

//go:noescape
func gemmInt8AVXVNNI(kg int, a *uint8, lda int, b *int8, c *float32, ldc int, rowScale *float32, rowZero *int32, colSum *int32, colScale *float32, bias *float32, tiles int)

//go:noescape
func toBF16AVX512(dst *uint16, x *float32, n int)

//go:noescape
func toBF16PanelAVX512(dst *uint16, ldd int, x *float32, rows int)

// toBF16Panel writes ToBF16 of rows rows of 32 values of x (contiguous) to
// dst, rows ldd bytes apart, in AVX-512.
func toBF16Panel(dst []uint8, ldd int, x []float32, rows int) {
	_ = dst[(rows-1)*ldd+2*lowNR-1]
	_ = x[rows*lowNR-1]
	toBF16PanelAVX512((*uint16)(unsafe.Pointer(&dst[0])), ldd, &x[0], rows)
}

// haveQuantizeAVX512 and haveQuantizeAVX2 report whether the activations'
// quantisation can run its AVX-512 or AVX2 loops (quantVecs).
var (
	haveQuantizeAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW
	haveQuantizeAVX2   = cpu.X86.HasAVX2
)

// toBF16Row writes ToBF16(x[i]) to dst[i], with VCVTNEPS2BF16 for whole
// groups of 16 values when asm is set.
func toBF16Row(dst []uint16, x []float32, asm bool) {
	dst = dst[:len(x)]
	n16 := 0
	if asm {
		n16 = len(x) &^ 15
		if n16 > 0 {
			toBF16AVX512(&dst[0], &x[0], n16)
		}
	}
	for i := n16; i < len(x); i++ {
		dst[i] = ToBF16(x[i])
	}
}

var (
	vnniKernel       = lowKernel{name: "avx512vnni", mr: lowMR, levels: 255, ref: "go"}
	avxVNNIKernel    = lowKernel{name: "avxvnni", mr: 3, levels: 255, ref: "go"}
	avx2Int8Kernel   = lowKernel{name: "avx2", mr: 3, levels: 127, w7: true, ref: "go"}
	avx512BF16Kernel = lowKernel{name: "avx512bf16", mr: lowMR, ref: "go"}
)

func int8Available() []lowKernel {
	var ks []lowKernel
	if haveAMXInt8() {
		ks = append(ks, amxKernel)
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VNNI {
		ks = append(ks, vnniKernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasAVXVNNI {
		ks = append(ks, avxVNNIKernel)
	}
	if cpu.X86.HasAVX2 {
		ks = append(ks, avx2Int8Kernel)
	}
	return append(ks, goInt8Kernel)
}

func bf16Available() []lowKernel {
	var ks []lowKernel
	if haveAMXBF16() {
		ks = append(ks, amxBF16Kernel)
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		ks = append(ks, avx512BF16Kernel)
	}
	return append(ks, goAMXBF16Kernel, goBF16Kernel)
}

// int8TileAsm and bf16TileAsm call the assembly; int8Tile and bf16Tile have
// checked the bounds.
func int8TileAsm(kern lowKernel, groups int, a []uint8, lda int, b []int8, c []float32, ldc int, scale []float32, zero []int32, colSum []int32, colScale, bias []float32, tiles int) {
	switch kern.name {
	case amxKernel.name:
		amxInt8Tile(groups, a, lda, b, c, ldc, scale, zero, colSum, colScale, bias, tiles)
		return
	case avx2Int8Kernel.name, avxVNNIKernel.name:
		// lowMR rows are lowMR/kern.mr tiles of these kernels' kern.mr = 3.
		f := gemmInt8AVX2
		if kern.name == avxVNNIKernel.name {
			f = gemmInt8AVXVNNI
		}
		f(groups, unsafe.SliceData(a), lda, unsafe.SliceData(b), unsafe.SliceData(c), ldc,
			unsafe.SliceData(scale), unsafe.SliceData(zero), unsafe.SliceData(colSum), unsafe.SliceData(colScale), unsafe.SliceData(bias), checkTiles(tiles)*(lowMR/kern.mr))
		return
	}
	gemmInt8VNNI(groups, unsafe.SliceData(a), lda, unsafe.SliceData(b), unsafe.SliceData(c), ldc,
		unsafe.SliceData(scale), unsafe.SliceData(zero), unsafe.SliceData(colSum), unsafe.SliceData(colScale), unsafe.SliceData(bias), checkTiles(tiles))
}

func bf16TileAsm(kern lowKernel, groups int, a []uint8, lda int, b []uint16, c []float32, ldc int, bias []float32, tiles int) {
	if kern.name == amxBF16Kernel.name {
		amxBF16Tile(groups, a, lda, b, c, ldc, bias, tiles)
		return
	}
	gemmBF16AVX512(groups, (*uint16)(unsafe.Pointer(unsafe.SliceData(a))), lda, unsafe.SliceData(b), unsafe.SliceData(c), ldc, unsafe.SliceData(bias), checkTiles(tiles))
}
