package tta

import (
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
)

// TENT is the TENT method: it minimises the mean class entropy of CLIP's
// zero-shot softmax, exp(logit_scale)·cos(f, t) (TentLoss), one step per
// batch, and predicts with the pre-update logits ([S] methods/tent.py, spec
// §2.1).
type TENT struct{ base }

// NewTENT returns TENT with the given optimizer over the visual LayerNorms.
func NewTENT(m Model, head mat.Matrix, opt optim.Config) (*TENT, error) {
	b, err := newBase(m, head, opt)
	if err != nil {
		return nil, err
	}
	return &TENT{b}, nil
}

// Name returns "tent".
func (t *TENT) Name() string { return "tent" }

// Reset restores the source weights and a fresh optimizer.
func (t *TENT) Reset() error { t.reset(); return nil }

// Step runs one entropy-minimisation step on the batch.
func (t *TENT) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	node, f, err := t.forward(pixels, n, true)
	if err != nil {
		return nil, err
	}
	res, err := TentLoss(f, t.text, t.scale)
	if err != nil {
		return nil, err
	}
	d.Losses["tent"] = res.Loss
	if err := t.backward(node, res.DLdF); err != nil {
		return nil, err
	}
	if err := t.update(&d); err != nil {
		return nil, err
	}
	d.since("adapt", t0)
	return &Result{Logits: res.Logits, Preds: res.Preds, Features: f, Diag: d}, nil
}

// TentResult is TentLoss's result on one batch.
type TentResult struct {
	Logits *mat.Dense // scale·normalize(F)·Tᵀ, the (pre-update) prediction
	Preds  []int
	Loss   float64    // mean entropy of softmax(Logits)
	DLdF   *mat.Dense // ∂Loss/∂F (B×d)
}

// TentLoss computes TENT's loss (mean class entropy of CLIP's zero-shot
// softmax) on the unnormalised image features f (B×d) with text features t
// (C×d), scale = exp(logit_scale).
func TentLoss(f, t mat.Matrix, scale float64) (*TentResult, error) {
	if err := checkFeatures(f, t, "tent"); err != nil {
		return nil, err
	}
	fn, norms := NormalizeRows(f)
	logits := Logits(fn, t, scale)
	loss, dlogits := EntropyLoss(logits)
	var dfn mat.Dense
	dfn.Mul(dlogits, t)
	dfn.Scale(scale, &dfn)
	return &TentResult{
		Logits: logits,
		Preds:  Argmax(logits),
		Loss:   loss,
		DLdF:   normalizeRowsBackward(fn, norms, &dfn),
	}, nil
}
