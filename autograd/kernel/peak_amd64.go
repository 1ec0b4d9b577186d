package kernel

import "golang.org/x/sys/cpu"

//go:noescape
func fmaPeakAVX2(n int)

//go:noescape
func fmaPeakAVX512(n int)

// fmaPeak runs n iterations of register-only FMAs of the widest kind the
// CPU has on one core and returns the flops of one iteration: 384 with
// AVX-512 (12 FMAs of 16 lanes), 192 with AVX2 and FMA (12 of 8), 0 (and
// nothing run) without them.
func fmaPeak(n int) int {
	switch {
	case cpu.X86.HasAVX512F:
		fmaPeakAVX512(n)
		return 384
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		fmaPeakAVX2(n)
		return 192
	}
	return 0
}
