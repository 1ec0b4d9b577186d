package tta

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestResetSampleKeepsMemory: ResetSample (the episodic protocol's reset
// before every sample) restores the source weights and a fresh optimizer
// but keeps SubTTA's feature bank and TDA's caches; Reset (a new domain)
// empties them.
func TestResetSampleKeepsMemory(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	rng := rand.New(rand.NewPCG(5, 6))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 6, m.Config.EmbedDim, 1))
	p, err := Lookup("cifar10-c", "subtta-s")
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.ForEpisodic(); err != nil {
		t.Fatal(err)
	}
	cfg := p.Config.(SubTTAConfig)
	if p.BatchSize != 1 || cfg.BankSize < 2 {
		t.Fatalf("episodic preset: batch %d, bank %d; want 1 and a bank", p.BatchSize, cfg.BankSize)
	}
	cfg.Subspace.Rank = 3
	cfg.Optimizer = p.Optimizer
	s, err := NewSubTTA(m, head, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A Method owns its model's LayerNorms: TDA gets a model of its own.
	tda, err := NewTDA(fxtmodel.TinyModel(t, false), head, feature.DefaultTDAConfig())
	if err != nil {
		t.Fatal(err)
	}
	source := fmt.Sprint(TrainerValues(s))
	for i := range 3 {
		px := randPixels(rng, 1, m.Config.Vision.ImageSize)
		if err := s.ResetSample(); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(TrainerValues(s)); got != source {
			t.Fatalf("sample %d: ResetSample left adapted weights", i)
		}
		res, err := s.Step(px, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Diag.Steps != 1 {
			t.Fatalf("sample %d: %d optimizer steps, want 1", i, res.Diag.Steps)
		}
		if len(s.bank) != i+1 {
			t.Fatalf("sample %d: bank of %d rows, want %d", i, len(s.bank), i+1)
		}
		if err := tda.ResetSample(); err != nil {
			t.Fatal(err)
		}
		if _, err := tda.Step(px, 1); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(TrainerValues(s)) == source {
		t.Fatal("the last step did not adapt: the test shows nothing")
	}
	if pos, _ := tda.cache.CacheSizes(); pos == 0 {
		t.Error("TDA's caches are empty after three samples")
	}
	s.Reset()
	tda.Reset()
	if pos, neg := tda.cache.CacheSizes(); len(s.bank) != 0 || pos+neg != 0 {
		t.Errorf("Reset kept %d bank rows and %d cache entries", len(s.bank), pos+neg)
	}
}
