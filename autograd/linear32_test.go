package autograd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
)

// TestLinear32 checks the float32 linear layer's two products, y = x·Wᵀ + b
// (the bias added by the GEMM as it stores y) and dx = dy·W, against
// float64, with the weight packed on every call and kept packed, for an
// input width within one of the kernel's K blocks (256 deep) and one
// spanning three (the bias must be added with the first block only). The
// error bound is the float32 GEMM's: k·2⁻²⁴ times Σ|x||w| + |b|, with a
// factor 4 of room.
func TestLinear32(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, keep := range []bool{false, true} {
		for _, k := range []int{100, 3*256 - 17} {
			t.Run(fmt.Sprintf("keep=%v/k=%d", keep, k), func(t *testing.T) {
				const m, n = 37, 45
				x, w, b, dy := randSlice32(r, m*k), randSlice32(r, n*k), randSlice32(r, n), randSlice32(r, m*n)
				p := NewLinearParams(smat.NewDense[float32](smat.WithShape(n, k), smat.WithBacking(w)),
					smat.NewDense[float32](smat.WithShape(n), smat.WithBacking(b)))
				p.KeepPacked(keep)
				for range 2 { // with keep, the second call reads the kept packs
					y, dx := make([]float32, m*n), make([]float32, m*k)
					linearInto(p, m, x, y, false)
					linearInputGrad(p, m, dy, dx)
					checkLinear32(t, "y", y, m, n, k, func(i, j, q int) float64 { return float64(x[i*k+q]) * float64(w[j*k+q]) }, b)
					checkLinear32(t, "dx", dx, m, k, n, func(i, j, q int) float64 { return float64(dy[i*n+q]) * float64(w[q*k+j]) }, nil)
				}
			})
		}
	}
}

// TestKeepPacked: kept packs never serve a weight that changed through
// training or was replaced, and KeepPacked(true) picks up a frozen weight
// written in place.
func TestKeepPacked(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 1))
	const m, n, k = 13, 40, 70
	x, w, dy := randSlice32(r, m*k), randSlice32(r, n*k), randSlice32(r, m*n)
	weight := smat.NewDense[float32](smat.WithShape(n, k), smat.WithBacking(w))
	p := NewLinearParams(weight, nil)
	p.KeepPacked(true)
	check := func(when string) {
		t.Helper()
		y, dx := make([]float32, m*n), make([]float32, m*k)
		linearInto(p, m, x, y, false)
		linearInputGrad(p, m, dy, dx)
		t.Run(when, func(t *testing.T) {
			checkLinear32(t, "y", y, m, n, k, func(i, j, q int) float64 { return float64(x[i*k+q]) * float64(w[j*k+q]) }, nil)
			checkLinear32(t, "dx", dx, m, k, n, func(i, j, q int) float64 { return float64(dy[i*n+q]) * float64(w[q*k+j]) }, nil)
		})
	}
	scale := func(s float32) {
		for i := range w {
			w[i] *= s
		}
	}
	check("frozen")
	weight.SetRequiresGrad(true)
	scale(-2) // as an optimizer step would
	check("trainable")
	weight.SetRequiresGrad(false)
	check("frozen again after training")
	scale(3)
	p.KeepPacked(true)
	check("after writing into the frozen weight and KeepPacked(true)")
	w = randSlice32(r, n*k)
	p.Weight = smat.NewDense[float32](smat.WithShape(n, k), smat.WithBacking(w))
	check("with a new weight matrix")
}

func randSlice32(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// checkLinear32 compares got (rows×cols) with bias[j] + Σ_q term(i, j, q)
// over depth terms, in float64, within the bound TestLinear32 states.
func checkLinear32(t *testing.T, name string, got []float32, rows, cols, depth int, term func(i, j, q int) float64, bias []float32) {
	t.Helper()
	worst := 0.0
	for i := range rows {
		for j := range cols {
			var want, scale float64
			if bias != nil {
				want, scale = float64(bias[j]), math.Abs(float64(bias[j]))
			}
			for q := range depth {
				v := term(i, j, q)
				want += v
				scale += math.Abs(v)
			}
			bound := 4 * float64(depth+2) * 0x1p-24 * scale
			d := math.Abs(float64(got[i*cols+j]) - want)
			if !(d <= bound) {
				t.Fatalf("%s[%d,%d] = %g, want %g (bound %g)", name, i, j, got[i*cols+j], want, bound)
			}
			worst = max(worst, d/bound)
		}
	}
	t.Logf("%s: worst error %.3f of the bound", name, worst)
}
