package kernel

import "golang.org/x/sys/cpu"

//go:noescape
func fmaPeakAVX2(n int)

// fmaPeak runs n iterations of 192 register-only FMA flops on one core and
// reports whether it could (the CPU needs AVX2 and FMA).
func fmaPeak(n int) bool {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return false
	}
	fmaPeakAVX2(n)
	return true
}
