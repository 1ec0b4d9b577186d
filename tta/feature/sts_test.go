package feature

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta/internal/fxt"
)

// TestSteeringLossGradCheck checks ∂L/∂γ of STS's objective against
// float64 central differences (h = 1e-6, tolerance 1e-6 relative to the
// largest numeric entry), for all views and for a selection of rows.
func TestSteeringLossGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const c, d, v, k = 6, 9, 5, 4
	text, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	fn, _ := NormalizeRows(fxt.RandDense(rng, v, d, 1))
	s, err := NewSpectrum(text, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range [][]int{nil, {1, 3}} {
		gamma := []float64{0.05, -0.03, 0.02, 0.01}
		res, err := s.SteeringLoss(fn, text, gamma, 20, rows)
		if err != nil {
			t.Fatal(err)
		}
		x := mat.NewDense(1, k, append([]float64(nil), gamma...))
		loss := func(x *mat.Dense) float64 {
			r, err := s.SteeringLoss(fn, text, x.RawRowView(0), 20, rows)
			if err != nil {
				t.Fatal(err)
			}
			return r.Marginal.Loss
		}
		fxt.GradCheck(t, "sts ∂L/∂γ", x, loss, mat.NewDense(1, k, res.DLdGamma), 1e-6, 1e-6)
	}
}

// TestSpectrum: the basis is orthonormal, the values descend, γ = 0 leaves
// the prototypes as they are, and a shift stays in the basis's span.
func TestSpectrum(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	text, _ := NormalizeRows(fxt.RandDense(rng, 5, 8, 1))
	s, err := NewSpectrum(text, 10)
	if err != nil {
		t.Fatal(err)
	}
	_, k := s.Basis.Dims()
	if k != 5 {
		t.Fatalf("%d directions from a 5×8 head, want 5", k)
	}
	var g mat.Dense
	g.Mul(s.Basis.T(), s.Basis)
	for i := range k {
		for j := range k {
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(g.At(i, j)-want) > 1e-12 {
				t.Fatalf("VᵀV[%d,%d] = %g", i, j, g.At(i, j))
			}
		}
		if i > 0 && s.Values[i] > s.Values[i-1] {
			t.Errorf("singular values not descending: %v", s.Values)
		}
	}
	same, _, err := s.Steer(text, make([]float64, k))
	if err != nil || !mat.EqualApprox(same, text, 1e-15) {
		t.Errorf("γ = 0 moved the prototypes (%v)", err)
	}
	if _, _, err := s.Steer(text, make([]float64, k+1)); err == nil {
		t.Error("a γ of the wrong length accepted")
	}
}
