package kernel

import "golang.org/x/sys/cpu"

//go:noescape
func expAVX2(x *float32, n int)

var haveAVX2 = cpu.X86.HasAVX2

// expVector applies expInPlace32 to the longest prefix of x whose length is a
// multiple of 8 and returns that length; 0 without AVX2.
func expVector(x []float32) int {
	n := len(x) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	expAVX2(&x[0], n)
	return n
}
