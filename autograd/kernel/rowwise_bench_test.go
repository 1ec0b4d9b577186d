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

// BenchmarkLayerNorm: one LayerNorm of ViT-B/32 at batch 64 (3200×768).
func BenchmarkLayerNorm(b *testing.B) {
	const rows, cols = 3200, 768
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i%2000)/200 - 5
	}
	y := make([]float32, len(x))
	g, bb := make([]float32, cols), make([]float32, cols)
	mean, rstd := make([]float32, rows), make([]float32, rows)
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		LayerNorm(y, x, rows, cols, g, bb, 1e-5, mean, rstd)
	}
}

// BenchmarkLayerNormBackward: dx, dγ and dβ of one ViT-B/32 LayerNorm at
// batch 64 (3200×768), as a TTA step needs them.
func BenchmarkLayerNormBackward(b *testing.B) {
	const rows, cols = 3200, 768
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i%2000)/200 - 5
	}
	dx, dy := make([]float32, len(x)), make([]float32, len(x))
	copy(dy, x)
	g, dg, db := make([]float32, cols), make([]float32, cols), make([]float32, cols)
	mean, rstd := make([]float32, rows), make([]float32, rows)
	LayerNorm(dx, x, rows, cols, g, db, 1e-5, mean, rstd)
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		LayerNormBackward(dx, dg, db, dy, x, rows, cols, g, mean, rstd)
	}
}
