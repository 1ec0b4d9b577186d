package feature

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// Tolerances for the SubTTA fixtures, relative to the max of each tensor.
type subttaTols struct {
	forward float64 // covariances, eigenvalues, singular values, features, logits
	basis   float64 // sign-normalised bases and projectors
	grad    float64 // alignment gradients (eigen-gap conditioned)
	loss    float64 // scalar losses, relative
}

// The fp32 file is torch float32; our float64 path is compared at the README's
// suggested fp32 tolerances (forward 1e-5; alignment gradients 1e-3 because
// the r/r+1 eigen-gap is ~8e-5·λ_max). The fp64 file is compared with float64
// at 1e-9 except for the gap-conditioned gradients (1e-6).
func tolsFor(file string) subttaTols {
	if strings.Contains(file, "fp64") {
		return subttaTols{forward: 1e-9, basis: 1e-9, grad: 1e-6, loss: 1e-9}
	}
	return subttaTols{forward: 1e-5, basis: 1e-4, grad: 1e-3, loss: 1e-5}
}

func textSubspaceFrom(t *testing.T, x *fxt.File, cfg fxt.SubTTAConfig) *TextSubspace {
	t.Helper()
	ts, err := NewTextSubspace(x.Dense("text.T"), SubspaceOptions{Rank: cfg.R, KeepTopPC: !cfg.RemoveFirstPC})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestTextSubspaceFixture(t *testing.T) {
	cfg := fxt.ReadSubTTAConfig(t)
	for _, file := range fxt.SubTTAFiles {
		t.Run(file, func(t *testing.T) {
			x := fxt.Open(t, file)
			tol := tolsFor(file)
			ts := textSubspaceFrom(t, x, cfg)
			wantBT := x.Dense("text.B_T")
			if r, _ := wantBT.Dims(); ts.Rank() != r {
				t.Fatalf("rank %d, fixture B_T has %d rows", ts.Rank(), r)
			}
			fxt.Compare(t, "text.mean", ts.Mean, x.Vec("text.mean"), tol.forward, fxt.Rel)
			fxt.CompareDense(t, "text.Sigma_T", ts.Cov, x.Dense("text.Sigma_T"), tol.forward, fxt.Rel)
			fxt.Compare(t, "text.singular_values", ts.SingularValues, x.Vec("text.singular_values"), tol.forward, fxt.Rel)
			fxt.CompareDense(t, "text.P_T", ts.Projector, x.Dense("text.P_T"), tol.basis, fxt.Rel)
			bt := mat.DenseCopyOf(ts.Basis)
			SignNormalizeRows(bt)
			fxt.CompareDense(t, "text.B_T (sign-normalised)", bt, wantBT, tol.basis, fxt.Rel)
		})
	}
}

// TestTextSubspaceRankDeficient covers the CIFAR-10 case: C=10 classes give
// centred features of rank 9, so r = min(C−1, R) = 9 rows after the top PC
// would need a null direction.
func TestTextSubspaceRankDeficient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const c, d = 10, 32
	tm := fxt.RandDense(rng, c, d, 1)
	tm, _ = NormalizeRows(tm)
	tc, _ := CenterRows(tm)

	def, err := NewTextSubspace(tm, SubspaceOptions{Rank: 256})
	if err != nil {
		t.Fatal(err)
	}
	if def.Rank() != 8 || def.Nominal != 9 {
		t.Errorf("default: rank %d nominal %d, want 8 and 9", def.Rank(), def.Nominal)
	}
	code, err := NewTextSubspace(tm, SubspaceOptions{Rank: 256, KeepNullDirections: true})
	if err != nil {
		t.Fatal(err)
	}
	if code.Rank() != 9 {
		t.Fatalf("KeepNullDirections: rank %d, want 9", code.Rank())
	}
	// The 9th row is a null direction of Tc: Tc·v = 0.
	var tv mat.VecDense
	tv.MulVec(tc, code.Basis.RowView(8))
	if n := mat.Norm(&tv, 2); n > 1e-12 {
		t.Errorf("last basis row is not a null direction: |Tc v| = %g", n)
	}
	// Every default row is a principal direction: |Tc v| equals its singular value.
	for i := range def.Rank() {
		tv.MulVec(tc, def.Basis.RowView(i))
		if got, want := mat.Norm(&tv, 2), def.SingularValues[def.First+i]; math.Abs(got-want) > 1e-12 {
			t.Errorf("row %d: |Tc v| = %g, singular value %g", i, got, want)
		}
	}
	keep, _ := NewTextSubspace(tm, SubspaceOptions{Rank: 256, KeepTopPC: true})
	if keep.Rank() != 9 || keep.First != 0 {
		t.Errorf("KeepTopPC: rank %d first %d, want 9 and 0", keep.Rank(), keep.First)
	}
	if _, err := NewTextSubspace(tm, SubspaceOptions{Rank: 0}); err == nil {
		t.Error("R=0: no error")
	}
	if _, err := NewTextSubspace(mat.NewDense(1, d, nil), SubspaceOptions{Rank: 4}); err == nil {
		t.Error("one class: no error")
	}
}
