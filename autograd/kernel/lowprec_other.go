//go:build !amd64

package kernel

func int8Available() []lowKernel { return []lowKernel{goInt8Kernel} }
func bf16Available() []lowKernel { return []lowKernel{goAMXBF16Kernel, goBF16Kernel} }

const (
	haveQuantizeAVX512 = false
	haveQuantizeAVX2   = false
)

func rowRangeAVX512(*float32, int) (lo, hi, bad float32)            { panic("kernel: no AVX-512") }
func quantizeU8AVX512(*uint8, *float32, int, float32, int32, int32) { panic("kernel: no AVX-512") }
func rowRangeAVX2(*float32, int) (lo, hi, bad float32)              { panic("kernel: no AVX2") }
func quantizeU8AVX2(*uint8, *float32, int, float32, int32, int32)   { panic("kernel: no AVX2") }

func toBF16Panel([]uint8, int, []float32, int) { panic("kernel: no AVX-512") }

func toBF16Row(dst []uint16, x []float32, _ bool) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = ToBF16(v)
	}
}

func int8TileAsm(lowKernel, int, []uint8, int, []int8, []float32, int, []float32, []int32, []int32, []float32, []float32, int) {
	panic("kernel: no int8 assembly kernel on this architecture")
}

func bf16TileAsm(lowKernel, int, []uint8, int, []uint16, []float32, int, []float32, int) {
	panic("kernel: no bf16 assembly kernel on this architecture")
}
