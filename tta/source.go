package tta

import (
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
)

// SourceName is Source's name: the frozen model, the baseline that
// comparisons measure the other methods against.
const SourceName = "source"

// sourceMethod registers Source: zero-shot, batches as SubTTA's.
var sourceMethod = Registration{
	Name:   SourceName,
	About:  "zero-shot CLIP, no adaptation",
	Cost:   fixedCost(CostForward),
	Preset: func(*Preset) error { return nil },
	New: func(m Model, _ Preset, h Heads) (Method, error) {
		return NewSource(m, h.Head)
	},
}

// Source is zero-shot CLIP: no adaptation.
type Source struct{ base }

// NewSource returns the zero-shot method with the head (C×d, unit rows).
func NewSource(m Model, head mat.Matrix) (*Source, error) {
	b, err := newBase(SourceName, m, head, optim.Config{Adam: optim.DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	return &Source{b}, nil
}

// Step classifies the batch with the plain head.
func (s *Source) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	_, f, err := s.forward(pixels, n, false)
	if err != nil {
		return nil, err
	}
	logits, preds := s.classify(f)
	d.since("predict", t0)
	return &Result{Logits: logits, Preds: preds, Features: f, Diag: d}, nil
}
