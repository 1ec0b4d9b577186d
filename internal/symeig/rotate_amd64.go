package symeig

import "golang.org/x/sys/cpu"

// rotateSweepAVX is rotateSweepGo in AVX assembly (rotate_amd64.s), to
// the same bits.
//
//go:noescape
func rotateSweepAVX(z *float64, stride, count, width int, cs, sn *float64)

// useAVX selects the assembly; tests clear it to run the Go code.
var useAVX = cpu.X86.HasAVX

// rotateSweep is rotateSweepGo, in assembly where the CPU has AVX.
func rotateSweep(z []float64, stride, count, width int, cs, sn []float64) {
	if count <= 0 || width <= 0 {
		return
	}
	if !useAVX {
		rotateSweepGo(z, stride, count, width, cs, sn)
		return
	}
	// The assembly reads rows 0 … count and rotations 0 … count−1.
	_ = z[count*stride+width-1]
	_, _ = cs[count-1], sn[count-1]
	rotateSweepAVX(&z[0], stride, count, width, &cs[0], &sn[0])
}
