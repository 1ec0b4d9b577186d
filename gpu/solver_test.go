//go:build cuda && cgo

package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/symeig"
	"github.com/subtta/subtta/tta/feature"
)

// TestSymEigMatchesCPU: cuSOLVER's eigendecomposition of random symmetric
// matrices (up to 256×256; ViT-B/32's covariance is 512×512) against the CPU's
// (internal/symeig), both float64: eigenvalues within 1e-10 of the largest,
// each eigenvector equal up to its sign within 1e-8 (random spectra are well
// separated); and three alignment steps of SubTTA (feature.Aligner) with the
// device set, Σ kept there (its EMA, decomposition and the gradient's
// products in float64 on the device), against the CPU's: loss and feature
// gradient within 1e-9, the covariance brought back within 1e-12.
func TestSymEigMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 2, 9, 64, 256} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b := mat.NewDense(n, n, nil)
			for i := range n {
				for j := range n {
					b.Set(i, j, rng.NormFloat64())
				}
			}
			a := mat.NewSymDense(n, nil)
			a.SymOuterK(1, b) // a covariance-like matrix: B·Bᵀ
			full := make([]float64, n*n)
			for i := range n {
				for j := range n {
					full[i*n+j] = a.At(i, j)
				}
			}
			values, vectors, err := d.SymEig(full, n)
			if err != nil {
				t.Fatal(err)
			}
			want, err := symeig.Factorize(a)
			if err != nil {
				t.Fatal(err)
			}
			scale := math.Abs(want.Values[n-1])
			var worstVal, worstVec float64
			for i := range n {
				worstVal = max(worstVal, math.Abs(values[i]-want.Values[i])/scale)
				dot := 0.0
				for k := range n {
					dot += vectors[i*n+k] * want.Vectors.At(i, k)
				}
				worstVec = max(worstVec, math.Abs(1-math.Abs(dot)))
			}
			t.Logf("%d×%d: eigenvalues within %.1e of the largest, eigenvectors' 1−|cos| ≤ %.1e", n, n, worstVal, worstVec)
			if worstVal > 1e-10 || worstVec > 1e-8 {
				t.Errorf("eigenvalue error %.1e (tolerance 1e-10), eigenvector 1−|cos| %.1e (tolerance 1e-8)", worstVal, worstVec)
			}
		})
	}

	t.Run("alignment", func(t *testing.T) {
		const classes, dim, batch = 10, 32, 48
		text := mat.NewDense(classes, dim, nil)
		feats := mat.NewDense(batch, dim, nil)
		for _, m := range []*mat.Dense{text, feats} {
			r, c := m.Dims()
			for i := range r {
				for j := range c {
					m.Set(i, j, rng.NormFloat64())
				}
			}
		}
		text, _ = feature.NormalizeRows(text)
		sub, err := feature.NewTextSubspace(text, feature.SubspaceOptions{Rank: 5})
		if err != nil {
			t.Fatal(err)
		}
		cpu := feature.NewAligner(sub, feature.AlignOptions{Alpha: 0.5})
		dev := feature.NewAligner(sub, feature.AlignOptions{Alpha: 0.5})
		solver := &countingSolver{device: d}
		for step := range 3 {
			if step > 0 {
				for i := range batch {
					for j := range dim {
						feats.Set(i, j, rng.NormFloat64())
					}
				}
			}
			want, err := cpu.Update(feats)
			if err != nil {
				t.Fatal(err)
			}
			var got *feature.Alignment
			solver.calls = 0
			onDevice(solver, func() { got, err = dev.Update(feats) })
			if err != nil {
				t.Fatal(err)
			}
			if solver.calls != 1 {
				t.Fatalf("step %d: the alignment step decomposed on the device %d times, want 1", step, solver.calls)
			}
			rel := math.Abs(got.Loss-want.Loss) / math.Abs(want.Loss)
			var diff mat.Dense
			diff.Sub(got.DLdF, want.DLdF)
			grad := mat.Norm(&diff, math.Inf(1)) / mat.Norm(want.DLdF, math.Inf(1))
			t.Logf("alignment step %d on the device: loss within %.1e, ∂L/∂F within %.1e (relative)", step, rel, grad)
			if rel > 1e-9 || grad > 1e-9 {
				t.Errorf("step %d: loss %.1e, gradient %.1e apart (tolerance 1e-9)", step, rel, grad)
			}
		}
		var diff mat.Dense
		wantS := mat.DenseCopyOf(cpu.Covariance())
		diff.Sub(mat.DenseCopyOf(dev.Covariance()), wantS)
		if e := mat.Norm(&diff, math.Inf(1)) / mat.Norm(wantS, math.Inf(1)); e > 1e-12 {
			t.Errorf("covariance after three steps: %.1e from the CPU's (tolerance 1e-12)", e)
		}
	})
}

// countingSolver is the device, counting its decompositions of more than
// one row (SymEig on host memory, SymEigInto on the device's: not the 1×1
// with which an Aligner probes the device).
type countingSolver struct {
	*device
	calls int
}

func (c *countingSolver) SymEig(a []float64, n int) ([]float64, []float64, error) {
	if n > 1 {
		c.calls++
	}
	return c.device.SymEig(a, n)
}

func (c *countingSolver) SymEigInto(values, vectors, a kernel.Buf, n int) error {
	if n > 1 {
		c.calls++
	}
	return c.device.SymEigInto(values, vectors, a, n)
}
