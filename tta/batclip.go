package tta

import (
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// batclipMethod registers BATCLIP with the official optimizers: AdamW(5e-4,
// wd 0.01) on ImageNet-C, AdamW(1e-3, 0.01) on CIFAR-10-C, Adam(5e-4, L2
// 0.01) on CIFAR-100-C; batches as SubTTA's.
var batclipMethod = Registration{
	Name:  "batclip",
	About: "entropy, image-to-text and inter-class-mean terms (BATCLIP, text frozen)",
	Cost:  fixedCost(CostForwardBackward),
	Preset: func(p *Preset) error {
		p.Optimizer = map[string]optim.Config{
			"imagenet-c": optim.AdamW(5e-4, 0.01), "cifar10-c": optim.AdamW(1e-3, 0.01), "cifar100-c": optim.AdamL2(5e-4, 0.01),
		}[p.Dataset]
		return nil
	},
	Options: withOptimizer(),
	New: func(m Model, p Preset, h Heads) (Method, error) {
		return NewBATCLIP(m, h.Head, p.Optimizer)
	},
}

// BATCLIP is the BATCLIP method as in the SubTTA repo (text encoder
// frozen): one step per batch on BATCLIPLoss = mean entropy − I2T −
// InterMean, predictions from the pre-update logits (spec §2.3).
type BATCLIP struct{ base }

// NewBATCLIP returns BATCLIP with the given optimizer.
func NewBATCLIP(m Model, head mat.Matrix, opt optim.Config) (*BATCLIP, error) {
	b, err := newBase("batclip", m, head, opt)
	if err != nil {
		return nil, err
	}
	return &BATCLIP{b}, nil
}

// Step runs one BATCLIP step on the batch.
//
// On a device that runs Adam (kernel.AdamDevice) the optimizer runs there
// (lnTrainer.attach), as TENT's does.
func (m *BATCLIP) Step(pixels []float32, n int) (*Result, error) {
	release, err := m.tr.attach()
	if err != nil {
		return nil, err
	}
	defer release()
	d := newDiagnostics()
	t0 := time.Now()
	node, f, err := m.forward(pixels, n, true)
	if err != nil {
		return nil, err
	}
	res, err := feature.BATCLIPLoss(f, m.text, m.scale)
	if err != nil {
		return nil, err
	}
	d.Losses["batclip"] = res.Loss
	d.Losses["entropy"] = res.Entropy
	d.Losses["i2t"] = res.I2T
	d.Losses["intermean"] = res.InterMean
	d.PseudoLabels = res.Preds
	if err := m.backward(node, res.DLdF); err != nil {
		return nil, err
	}
	if err := m.update(&d); err != nil {
		return nil, err
	}
	d.since("adapt", t0)
	return &Result{Logits: res.Logits, Preds: res.Preds, Features: f, Diag: d}, nil
}
