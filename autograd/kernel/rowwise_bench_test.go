package kernel

import "testing"

func BenchmarkQuickGELU(b *testing.B) {
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(i%2000)/200 - 5
	}
	y := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		QuickGELU(y, x)
	}
}

func BenchmarkQuickGELUBackward(b *testing.B) {
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(i%2000)/200 - 5
	}
	y := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		QuickGELUBackward(y, x, x)
	}
}
