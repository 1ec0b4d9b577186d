package tta

import (
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// tentMethod registers TENT: SGD(2.5e-4, momentum 0.9, Nesterov), batch
// 64 on ImageNet-C; Adam(1e-3), batch 200 on CIFAR ([S] cfgs).
var tentMethod = Registration{
	Name:  "tent",
	About: "entropy minimisation of the zero-shot softmax (TENT)",
	Cost:  fixedCost(CostForwardBackward),
	Preset: func(p *Preset) error {
		p.Optimizer = optim.AdamL2(1e-3, 0)
		if p.Dataset == "imagenet-c" {
			p.Optimizer = optim.Config{SGD: &optim.SGDConfig{LR: 2.5e-4, Momentum: 0.9, Nesterov: true}}
		}
		return nil
	},
	Options: withOptimizer(),
	New: func(m Model, p Preset, h Heads) (Method, error) {
		return NewTENT(m, h.Head, p.Optimizer)
	},
}

// TENT is the TENT method: it minimises the mean class entropy of CLIP's
// zero-shot softmax, exp(logit_scale)·cos(f, t) (TentLoss), one step per
// batch, and predicts with the pre-update logits ([S] methods/tent.py, spec
// §2.1).
type TENT struct{ base }

// NewTENT returns TENT with the given optimizer over the visual LayerNorms.
func NewTENT(m Model, head mat.Matrix, opt optim.Config) (*TENT, error) {
	b, err := newBase("tent", m, head, opt)
	if err != nil {
		return nil, err
	}
	return &TENT{b}, nil
}

// Step runs one entropy-minimisation step on the batch.
//
// On a device that runs Adam (kernel.AdamDevice) the optimizer runs there
// (lnTrainer.attach): the LayerNorm gradients are not downloaded nor the
// values uploaded; the step downloads the new values.
func (t *TENT) Step(pixels []float32, n int) (*Result, error) {
	release, err := t.tr.attach()
	if err != nil {
		return nil, err
	}
	defer release()
	d := newDiagnostics()
	t0 := time.Now()
	node, f, err := t.forward(pixels, n, true)
	if err != nil {
		return nil, err
	}
	res, err := feature.TentLoss(f, t.text, t.scale)
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
