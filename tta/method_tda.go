package tta

import (
	"math"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/clip"
)

// TDAMethod is TDA ([T] kdiAAA/TDA, spec §2.5) on a CLIP model: training
// free, the weights never change. The official code runs at batch size 1;
// TDAMethod encodes a whole batch in one forward pass and then runs TDA
// over its samples one at a time, in order, so any batch size gives the
// predictions of batch size 1 (up to the rounding of the forward pass).
// Reset empties the caches (per domain).
type TDAMethod struct {
	base
	tda *TDA
}

// NewTDAMethod returns TDA over the head (C×d, unit rows). A zero cfg.Scale
// takes the model's logit scale.
func NewTDAMethod(m *clip.Model, head mat.Matrix, cfg TDAConfig) (*TDAMethod, error) {
	b, err := newBase(m, head, OptimizerConfig{Adam: DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	if cfg.Scale == 0 {
		cfg.Scale = b.scale
	}
	t, err := NewTDA(head, cfg)
	if err != nil {
		return nil, err
	}
	return &TDAMethod{base: b, tda: t}, nil
}

// Name returns "tda".
func (t *TDAMethod) Name() string { return "tda" }

// Reset empties the caches (and restores the source weights, which TDA never
// changes).
func (t *TDAMethod) Reset() error {
	t.reset()
	t.tda.Reset()
	return nil
}

// Step classifies the batch sample by sample, updating the caches.
// Diag.PseudoLabels are the zero-shot predictions the caches were updated
// with; Diag.Losses["entropy"] is the batch mean of their softmax entropy
// in nats (as BATCLIP's), and "tda_entropy" the mean of the normalised
// entropy H/log₂(C) that the negative cache's band tests.
func (t *TDAMethod) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	// No gradient is needed: encode without recording a tape.
	_, f, err := t.forward(pixels, n, false)
	if err != nil {
		return nil, err
	}
	res, err := t.tda.Step(f)
	if err != nil {
		return nil, err
	}
	var ent float64
	for _, e := range res.Entropy {
		ent += e
	}
	ent /= float64(len(res.Entropy))
	_, c := res.Logits.Dims()
	d.Losses["tda_entropy"] = ent
	d.Losses["entropy"] = ent * math.Log2(float64(c))
	d.PseudoLabels = res.ZeroShotPreds
	d.since("predict", t0)
	return &Result{Logits: res.Logits, Preds: res.Preds, Features: f, Diag: d}, nil
}
