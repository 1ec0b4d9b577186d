package tta_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
	"github.com/subtta/subtta/tta/online"
	"gonum.org/v1/gonum/mat"
)

// probe records the state a SubTTA method sees at the start of every Step.
type probe struct {
	*tta.SubTTA
	steps []probeStep
}

type probeStep struct {
	n        int
	values   [][]float64
	adamStep int // the optimizer's step count (0: fresh)
	sigma    *mat.SymDense
}

func (p *probe) Step(px []float32, n int) (*tta.Result, error) {
	st := probeStep{n: n, values: tta.TrainerValues(p.SubTTA), sigma: p.Aligner().Covariance()}
	for _, ps := range tta.OptimizerState(p.SubTTA) {
		st.adamStep = max(st.adamStep, ps.Step)
	}
	p.steps = append(p.steps, st)
	return p.SubTTA.Step(px, n)
}

// TestRunnerProtocols runs SubTTA through clip-tiny on three synthetic
// domains (5, 4 and 3 images, batch size 2) under each protocol and checks
// the reset semantics: under online.ResetEachDomain every domain starts from the
// source weights and a fresh optimizer while the EMA covariance carries over
// (or is reset with ResetCovariance); under online.Continual and online.Mixed only the
// first batch starts fresh. The partial last batches are kept, and the JSONL
// log has one record per batch.
func TestRunnerProtocols(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	rng := rand.New(rand.NewPCG(1, 2))
	const classes = 6
	size := 3 * m.Config.Vision.ImageSize * m.Config.Vision.ImageSize
	domains := []online.Domain{
		fxt.NewRandomDomain("gaussian_noise", 5, size, classes, rng),
		fxt.NewRandomDomain("fog", 4, size, classes, rng),
		fxt.NewRandomDomain("jpeg", 3, size, classes, rng),
	}
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, classes, m.Config.EmbedDim, 1))
	source := func() [][]float64 {
		s, err := tta.NewSource(m, head)
		if err != nil {
			t.Fatal(err)
		}
		return tta.TrainerValues(s)
	}()

	tests := []struct {
		name      string
		protocol  online.Protocol
		resetCov  bool
		wantSizes []int
		// freshAt lists the Step indices that must start from the source
		// weights and a fresh optimizer; every other must not.
		freshAt []int
		streams []string
	}{
		{"reset", online.ResetEachDomain, false, []int{2, 2, 1, 2, 2, 2, 1}, []int{0, 3, 5}, []string{"gaussian_noise", "fog", "jpeg"}},
		{"reset+cov", online.ResetEachDomain, true, []int{2, 2, 1, 2, 2, 2, 1}, []int{0, 3, 5}, []string{"gaussian_noise", "fog", "jpeg"}},
		{"continual", online.Continual, false, []int{2, 2, 1, 2, 2, 2, 1}, []int{0}, []string{"gaussian_noise", "fog", "jpeg"}},
		{"mixed", online.Mixed, false, []int{2, 2, 2, 2, 2, 2}, []int{0}, []string{"mixed"}},
	}
	snap := m.Vision.Snapshot()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A Method takes the model's current LayerNorms as its source:
			// undo the previous subtest's adaptation first.
			if err := m.Vision.Restore(snap); err != nil {
				t.Fatal(err)
			}
			s, err := tta.NewSubTTA(m, head, tta.SubTTAConfig{
				Subspace: feature.SubspaceOptions{Rank: 3}, Alpha: 0.5, Loss: tta.LossMint,
				Optimizer: optim.AdamW(1e-2, 0.01), ResetCovariance: tc.resetCov,
			})
			if err != nil {
				t.Fatal(err)
			}
			// Start from a covariance that differs from Σ_T, as after an
			// earlier run: it must survive a Reset unless ResetCovariance.
			pre := s.Aligner().Covariance()
			for i := range pre.SymmetricDim() {
				pre.SetSym(i, i, pre.At(i, i)+1)
			}
			if err := s.Aligner().SetCovariance(pre); err != nil {
				t.Fatal(err)
			}
			p := &probe{SubTTA: s}
			var log bytes.Buffer
			r := online.Runner{Method: p, Config: online.RunnerConfig{Protocol: tc.protocol, BatchSize: 2, Shuffle: true, Seed: 1,
				Log: &log, Text: s.Text, Head: head}}
			rep, err := r.Run(domains)
			if err != nil {
				t.Fatal(err)
			}
			sizes := make([]int, len(p.steps))
			for i, st := range p.steps {
				sizes[i] = st.n
			}
			if !slices.Equal(sizes, tc.wantSizes) {
				t.Errorf("batch sizes %v, want %v", sizes, tc.wantSizes)
			}
			for i, st := range p.steps {
				fresh := slices.Contains(tc.freshAt, i)
				atSource := fmt.Sprint(st.values) == fmt.Sprint(source)
				if atSource != fresh || (st.adamStep == 0) != fresh {
					t.Errorf("step %d: at source weights %v, optimizer step %d; want fresh=%v", i, atSource, st.adamStep, fresh)
				}
			}
			// The covariance at the first step is the preset one, not Σ_T,
			// unless the reset clears it.
			sigT := s.Text.Cov
			if got := mat.EqualApprox(p.steps[0].sigma, sigT, 1e-12); got != tc.resetCov {
				t.Errorf("first step: Σ_old == Σ_T is %v, want %v", got, tc.resetCov)
			}
			for _, i := range tc.freshAt[1:] {
				if got := mat.EqualApprox(p.steps[i].sigma, sigT, 1e-12); got != tc.resetCov {
					t.Errorf("step %d (new domain): Σ_old == Σ_T is %v, want %v", i, got, tc.resetCov)
				}
			}
			// Report: every sample counted once, per domain.
			for i, d := range rep.Domains {
				if d.Name != domains[i].Name() || d.Samples != domains[i].Len() {
					t.Errorf("domain %d: %+v, want %s with %d samples", i, d, domains[i].Name(), domains[i].Len())
				}
			}
			var meanAcc float64
			for _, d := range rep.Domains {
				meanAcc += d.Accuracy / 3
			}
			if rep.Mean != meanAcc {
				t.Errorf("mean accuracy %v, want %v", rep.Mean, meanAcc)
			}
			// JSONL: one record per batch with the diagnostics.
			sc := bufio.NewScanner(&log)
			sc.Buffer(nil, 1<<20)
			var recs []online.BatchRecord
			for sc.Scan() {
				var rec online.BatchRecord
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					t.Fatalf("log line %d: %v", len(recs), err)
				}
				recs = append(recs, rec)
			}
			if len(recs) != len(tc.wantSizes) {
				t.Fatalf("%d log records, want %d", len(recs), len(tc.wantSizes))
			}
			var streams []string
			for i, rec := range recs {
				if len(streams) == 0 || streams[len(streams)-1] != rec.Stream {
					streams = append(streams, rec.Stream)
				}
				if rec.Size != tc.wantSizes[i] || rec.Steps != 2 || len(rec.PrincipalCosines) != s.Text.Rank() ||
					rec.SemanticConcentration == nil || *rec.SemanticConcentration < 0 || *rec.SemanticConcentration > 1+1e-12 ||
					rec.PredictedClassCosine == nil || rec.Losses["align"] >= 0 {
					t.Errorf("log record %d: %+v", i, rec)
				}
			}
			if !slices.Equal(streams, tc.streams) {
				t.Errorf("streams %v, want %v", streams, tc.streams)
			}
		})
	}
}
