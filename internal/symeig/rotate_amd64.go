package symeig

import "golang.org/x/sys/cpu"

// gen_asm.go writes the package's assembly (rotate_amd64.s,
// tridiag_amd64.s and tridiag_avx512_amd64.s).
//
//go:generate go run gen_asm.go

// Assembly in rotate_amd64.s; both have rotateSweepGo's bits.
//
//go:noescape
func rotateSweepAVX(z *float64, stride, count, width int, cs, sn *float64)

//go:noescape
func rotateSweepAVX512(z *float64, stride, count, width int, cs, sn *float64)

// The instruction sets of rotateSweep.
const (
	isaGo = iota
	isaAVX
	isaAVX512
)

// rotateISA is the instruction set rotateSweep uses, the widest the CPU
// has; tests lower it to compare the others.
var rotateISA = func() int {
	switch {
	case cpu.X86.HasAVX512F:
		return isaAVX512
	case cpu.X86.HasAVX:
		return isaAVX
	}
	return isaGo
}()

// rotateSweep is rotateSweepGo, in assembly where the CPU has AVX.
func rotateSweep(z []float64, stride, count, width int, cs, sn []float64) {
	if count <= 0 || width <= 0 {
		return
	}
	if rotateISA == isaGo {
		rotateSweepGo(z, stride, count, width, cs, sn)
		return
	}
	// The assembly reads rows 0 … count and rotations 0 … count−1.
	_ = z[count*stride+width-1]
	_, _ = cs[count-1], sn[count-1]
	if rotateISA == isaAVX512 {
		rotateSweepAVX512(&z[0], stride, count, width, &cs[0], &sn[0])
	} else {
		rotateSweepAVX(&z[0], stride, count, width, &cs[0], &sn[0])
	}
}
