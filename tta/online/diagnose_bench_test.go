package online

import (
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
)

// BenchmarkDiagnose times the diagnostics of one batch of a method without
// its own alignment (source) at ImageNet's shape: 1,000 classes, batch 64,
// 512-dim features, the ImageNet-C preset's rank (256 from the second
// component).
func BenchmarkDiagnose(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 1000, 512, 1))
	opt, err := tta.SubspaceOptions("imagenet-c")
	if err != nil {
		b.Fatal(err)
	}
	ts, err := feature.NewTextSubspace(head, opt)
	if err != nil {
		b.Fatal(err)
	}
	f := fxt.RandDense(rng, 64, 512, 1)
	preds, labels := make([]int, 64), make([]int, 64)
	for i := range preds {
		preds[i], labels[i] = rng.IntN(1000), rng.IntN(1000)
	}
	res := &tta.Result{Features: f, Preds: preds}
	r := Runner{Config: RunnerConfig{Text: ts, Head: head}}
	b.ResetTimer()
	for range b.N {
		var rec BatchRecord
		if err := r.diagnose(&rec, res, labels); err != nil {
			b.Fatal(err)
		}
	}
}
