package online

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

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
	head, ts := imageNetText(b, rng)
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
		if err := r.diagnose(&rec, viewResult(res, labels)); err != nil {
			b.Fatal(err)
		}
	}
}

// imageNetText returns a random zero-shot head of ImageNet's shape (1,000
// classes, 512 dims, rows normalised) and its text subspace with the
// ImageNet-C preset's options.
func imageNetText(b *testing.B, rng *rand.Rand) (*mat.Dense, *feature.TextSubspace) {
	b.Helper()
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 1000, 512, 1))
	opt, err := tta.SubspaceOptions("imagenet-c")
	if err != nil {
		b.Fatal(err)
	}
	ts, err := feature.NewTextSubspace(head, opt)
	if err != nil {
		b.Fatal(err)
	}
	return head, ts
}

// sleepingSource is a method without an alignment that returns the same
// features and predictions for every batch after sleeping for its step's
// time: a GPU's forward pass, as the host sees it, or nothing.
type sleepingSource struct {
	tta.Stateless
	step  time.Duration
	f     *mat.Dense
	preds []int
}

func (m *sleepingSource) Name() string       { return "source" }
func (m *sleepingSource) Reset() error       { return nil }
func (m *sleepingSource) ResetSample() error { return nil }
func (m *sleepingSource) Step(px []float32, n int) (*tta.Result, error) {
	time.Sleep(m.step)
	return &tta.Result{Features: m.f, Preds: m.preds}, nil
}

// BenchmarkRunnerDiagnostics times the runner per batch (ms/batch) on a
// stream of 8 batches at BenchmarkDiagnose's shape, for a method whose
// step costs no CPU time: nothing, 19 ms of sleep (a GPU's forward pass of
// ViT-B/32 at batch 64, as the host sees it) or 300 ms (more than a
// batch's diagnostics), with the diagnostics computed inline (workers −1)
// or by 1, 2 or 4 workers. Without workers a batch costs the step and the
// diagnostics; with them, the larger of the step and the diagnostics'
// share of the cores.
func BenchmarkRunnerDiagnostics(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	head, ts := imageNetText(b, rng)
	const bs, nb = 64, 8
	labels := make([]int, bs*nb)
	preds := make([]int, bs)
	for i := range labels {
		labels[i] = rng.IntN(1000)
	}
	for i := range preds {
		preds[i] = rng.IntN(1000)
	}
	d := fxt.NewDomain("d", make([][]float32, len(labels)), labels)
	f := fxt.RandDense(rng, bs, 512, 1)
	for _, step := range []time.Duration{0, 19 * time.Millisecond, 300 * time.Millisecond} {
		for _, workers := range []int{-1, 1, 2, 4} {
			b.Run(fmt.Sprintf("step=%v/workers=%d", step, workers), func(b *testing.B) {
				r := Runner{Method: &sleepingSource{step: step, f: f, preds: preds}, Config: RunnerConfig{BatchSize: bs, Text: ts, Head: head,
					DiagnosticWorkers: workers, OnBatch: func(BatchRecord) error { return nil }}}
				for range b.N {
					if _, err := r.Run([]Domain{d}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*nb), "ms/batch")
			})
		}
	}
}
