package kernel

import "testing"

// geluInput is one MLP hidden layer's worth of pre-activations, 2²⁰ values.
func geluInput() []float32 {
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(i%2000)/200 - 5
	}
	return x
}

func BenchmarkQuickGELU(b *testing.B) {
	x := geluInput()
	y := make([]float32, len(x))
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			QuickGELU(y, x)
		}
	})
}

func BenchmarkQuickGELUSlope(b *testing.B) {
	x := geluInput()
	y, slope := make([]float32, len(x)), make([]float32, len(x))
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			QuickGELUSlope(y, slope, x)
		}
	})
}

func BenchmarkQuickGELUBackward(b *testing.B) {
	x := geluInput()
	y := make([]float32, len(x))
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			QuickGELUBackward(y, x, x)
		}
	})
}

// BenchmarkSoftmax: the attention probabilities of one ViT-B/32 layer at
// batch 64 (64 images × 12 heads × 50 queries, rows of 50).
func BenchmarkSoftmax(b *testing.B) {
	const rows, cols = 64 * 12 * 50, 50
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i%97)/10 - 5
	}
	y := make([]float32, len(x))
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			Softmax(y, x, rows, cols, 1, false)
		}
	})
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
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			LayerNorm(y, x, rows, cols, g, bb, 1e-5, mean, rstd)
		}
	})
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
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			LayerNormBackward(dx, dg, db, dy, x, rows, cols, g, mean, rstd)
		}
	})
}

// geluHidden is the MLP hidden layer of ViT-B/32 for a batch of 64 images:
// 64·50 tokens × 3072 values, from −5 to 5.
func geluHidden() []float32 {
	x := make([]float32, 64*50*3072)
	for i := range x {
		x[i] = float32(i%2000)/200 - 5
	}
	return x
}

func BenchmarkGELU(b *testing.B) {
	x := geluHidden()
	y := make([]float32, len(x))
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			GELU(y, x)
		}
	})
}

func BenchmarkGELUSlope(b *testing.B) {
	x := geluHidden()
	slope := make([]float32, len(x))
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			GELUSlope(slope, x)
		}
	})
}

func BenchmarkGELUBackward(b *testing.B) {
	x := geluHidden()
	dx := make([]float32, len(x))
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			GELUBackward(dx, x, x)
		}
	})
}

// BenchmarkGELUAndSlope: the value and the slope in one pass, against
// BenchmarkGELU plus BenchmarkGELUSlope, the two passes it replaces.
func BenchmarkGELUAndSlope(b *testing.B) {
	x := geluHidden()
	y, slope := make([]float32, len(x)), make([]float32, len(x))
	forEachPath(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			GELUAndSlope(y, slope, x)
		}
	})
}
