package autograd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLinear32Bias: the fused-bias linear, x·Wᵀ + b, against float64 for an
// input width within one of the kernel's K blocks (256 deep) and one
// spanning three (the bias must be added with the first block only). The
// error bound is the float32 GEMM's: k·2⁻²⁴ times Σ|x||w| + |b|, with a
// factor 4 of room.
func TestLinear32Bias(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, k := range []int{100, 3*256 - 17} {
		const m, n = 37, 45
		x, w, b := make([]float32, m*k), make([]float32, n*k), make([]float32, n)
		for _, s := range [][]float32{x, w, b} {
			for i := range s {
				s[i] = float32(r.NormFloat64())
			}
		}
		y := make([]float32, m*n)
		linear32(m, n, k, x, w, b, y)
		worst := 0.0
		for i := range m {
			for j := range n {
				want, scale := float64(b[j]), math.Abs(float64(b[j]))
				for p := range k {
					v := float64(x[i*k+p]) * float64(w[j*k+p])
					want += v
					scale += math.Abs(v)
				}
				bound := 4 * float64(k+2) * 0x1p-24 * scale
				d := math.Abs(float64(y[i*n+j]) - want)
				if !(d <= bound) {
					t.Fatalf("k=%d: y[%d,%d] = %g, want %g (bound %g)", k, i, j, y[i*n+j], want, bound)
				}
				worst = max(worst, d/bound)
			}
		}
		t.Logf("k=%d: worst error %.3f of the bound", k, worst)
	}
}
