package feature

import (
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
)

// BenchmarkDiagnosticParts times the parts of a batch's geometric
// diagnostics at ImageNet's shape: 1,000 classes, batch 64, 512-dim
// features, rank 256 from the second component (the ImageNet-C preset).
func BenchmarkDiagnosticParts(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	head, _ := NormalizeRows(fxt.RandDense(rng, 1000, 512, 1))
	ts, err := NewTextSubspace(head, SubspaceOptions{Rank: 256})
	if err != nil {
		b.Fatal(err)
	}
	f := fxt.RandDense(rng, 64, 512, 1)
	preds := make([]int, 64)
	for i := range preds {
		preds[i] = rng.IntN(1000)
	}
	a, err := Align(f, ts.Cov, ts, AlignOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("align", func(b *testing.B) {
		for range b.N {
			if _, err := Align(f, ts.Cov, ts, AlignOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("basis", func(b *testing.B) {
		for range b.N {
			if _, err := CovarianceBasis(f, ts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("eigen", func(b *testing.B) {
		s, _ := BatchCovariance(f)
		for range b.N {
			if _, err := factorizeSym(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("angles", func(b *testing.B) {
		for range b.N {
			if _, err := PrincipalAngleCosines(a.Basis, ts.Basis); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("concentration", func(b *testing.B) {
		for range b.N {
			if _, err := SemanticConcentration(f, ts.Projector); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cosines", func(b *testing.B) {
		for range b.N {
			if _, err := PredictedClassCosine(f, head, preds); err != nil {
				b.Fatal(err)
			}
		}
	})
}
