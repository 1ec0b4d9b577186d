package symeig

import (
	"math"
	"math/rand/v2"
	"testing"
)

// tridiagonalForm returns the tridiagonal form (d, e) of a random
// covariance of n dimensions and b samples and Qᵀ, e with the trailing 0
// that tridiagonalQL takes.
func tridiagonalForm(n, b int) (d, e, z []float64) {
	a := covariance(rand.New(rand.NewPCG(uint64(n), uint64(b))), n, b)
	d, e, z = make([]float64, n), make([]float64, n), make([]float64, n*n)
	tridiagonalize(upper(a), n, d, e[:n-1], z)
	return d, e, z
}

// qlRotations returns the rotations of the QL iteration on the tridiagonal
// form of a random covariance of n dimensions and b samples, and Qᵀ.
func qlRotations(t testing.TB, n, b int) (*rotations, []float64) {
	t.Helper()
	d, e, z := tridiagonalForm(n, b)
	rot, err := tridiagonalQL(d, e, n)
	if err != nil {
		t.Fatal(err)
	}
	return rot, z
}

// TestRotateSweepAssembly: each assembly the CPU runs applies the
// rotations with the Go code's bits, on widths that exercise its vector
// loop and its one-column tail, split over one or three goroutines.
func TestRotateSweepAssembly(t *testing.T) {
	best := rotateISA
	defer func() { rotateISA = best }()
	if best == isaGo {
		t.Skip("no assembly on this CPU")
	}
	for _, tc := range []struct{ n, b int }{{2, 3}, {13, 40}, {64, 20}, {203, 300}} {
		rot, z0 := qlRotations(t, tc.n, tc.b)
		for _, parts := range []int{1, 3} {
			rotateISA = isaGo
			plain := append([]float64(nil), z0...)
			applyRotations(plain, tc.n, rot, parts)
			for isa := isaAVX; isa <= best; isa++ {
				rotateISA = isa
				asm := append([]float64(nil), z0...)
				applyRotations(asm, tc.n, rot, parts)
				for i := range plain {
					if math.Float64bits(asm[i]) != math.Float64bits(plain[i]) {
						t.Fatalf("n=%d, %d parts, instruction set %d: element %d is %v in assembly, %v in Go", tc.n, parts, isa, i, asm[i], plain[i])
					}
				}
			}
		}
	}
}

// BenchmarkApplyRotations: the QL rotations of a 512×512 covariance of 576
// samples (about 225,000 rotations of 512 elements) applied to the
// eigenvectors on one goroutine, in each instruction set the CPU has.
func BenchmarkApplyRotations(b *testing.B) {
	rot, z0 := qlRotations(b, 512, 576)
	z := make([]float64, len(z0))
	best := rotateISA
	defer func() { rotateISA = best }()
	for isa, name := range []string{"go", "avx", "avx512"} {
		if isa > best {
			continue
		}
		b.Run(name, func(b *testing.B) {
			rotateISA = isa
			for b.Loop() {
				copy(z, z0)
				applyRotations(z, 512, rot, 1)
			}
			b.ReportMetric(float64(rot.count()), "rotations")
		})
	}
}

// BenchmarkQLRotations: the QL iteration's rotations of a 512×512
// covariance of 576 samples, without applying them.
func BenchmarkQLRotations(b *testing.B) {
	const n = 512
	d0, e0, _ := tridiagonalForm(n, 576)
	d, e := make([]float64, n), make([]float64, n)
	for b.Loop() {
		copy(d, d0)
		copy(e, e0)
		if _, err := tridiagonalQL(d, e, n); err != nil {
			b.Fatal(err)
		}
	}
}
