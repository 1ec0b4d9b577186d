package tta

import (
	"fmt"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// MEMOConfig configures MEMO.
type MEMOConfig struct {
	// Optimizer steps the visual LayerNorms; a preset leaves it zero and
	// Preset.New sets it from Preset.Optimizer.
	Optimizer optim.Config
}

// memoMethod registers MEMO ([MEMO] zhangmarvin/memo, the harness'
// methods/memo.py and cfgs; spec §4): per image, 32 AugMix views on CIFAR
// (64 on ImageNet-C) besides the base view, one step of SGD with momentum
// 0.9 and Nesterov (the harness' default) at lr 5e-3 on CIFAR and 2.5e-4 on
// ImageNet-C on the marginal entropy over all of them, then the base view
// classified with the updated weights. The visual LayerNorms train (the
// paper's convention; the harness trains every visual weight and bias).
var memoMethod = Registration{
	Name:  "memo",
	About: "marginal entropy over AugMix views, one step per image (MEMO)",
	// MEMO back-propagates every view.
	Cost: viewsCost(CostForwardBackward),
	Preset: func(p *Preset) error {
		views, lr := 32, 5e-3
		if p.Dataset == "imagenet-c" {
			views, lr = 64, 2.5e-4
		}
		multiViewPreset(p, views+1, 0)
		p.Optimizer = optim.Config{SGD: &optim.SGDConfig{LR: lr, Momentum: 0.9, Nesterov: true}}
		p.Config = MEMOConfig{}
		return nil
	},
	Options: withOptimizer(viewsOption),
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[MEMOConfig](p)
		if err != nil {
			return nil, err
		}
		cfg.Optimizer = p.Optimizer
		return NewMEMO(m, h.Head, p.Views, cfg)
	},
}

// MEMO is MEMO on a CLIP model. For every image, from the source weights
// and a fresh optimizer: its AugMix views (views 1…V−1; the base view is
// not among them) are encoded on a tape, the marginal entropy of their
// mean prediction (feature.MarginalEntropyLoss) is back-propagated to the
// visual LayerNorms, the optimizer steps once, and the base view is
// classified with the updated weights.
type MEMO struct {
	base
	viewCount
}

// NewMEMO returns MEMO with v views per image (the base view and v−1
// AugMix views) over the head (C×d, unit rows).
func NewMEMO(m Model, head mat.Matrix, v int, cfg MEMOConfig) (*MEMO, error) {
	vc, err := newViewCount("memo", v)
	if err != nil {
		return nil, err
	}
	vc.kind = AugMix
	b, err := newBase("memo", m, head, cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	return &MEMO{base: b, viewCount: vc}, nil
}

// StepViews adapts to each of the n images in turn, from the source
// weights, and classifies it.
func (t *MEMO) StepViews(views []float32, n, v int) (*Result, error) {
	if err := t.checkViews(views, n, v); err != nil {
		return nil, err
	}
	d := newDiagnostics()
	c, _ := t.text.Dims()
	logits := mat.NewDense(n, c, nil)
	preds := make([]int, n)
	baseViews := mat.NewDense(n, t.model.EmbedDim(), nil)
	per := len(views) / n
	one := per / v
	var loss float64
	for i := range n {
		img := views[i*per : (i+1)*per]
		l, f0, err := t.image(img, one, v, &d)
		if err != nil {
			return nil, err
		}
		loss += l / float64(n)
		row, pred := t.classify(f0)
		logits.SetRow(i, row.RawRowView(0))
		preds[i] = pred[0]
		baseViews.SetRow(i, f0.RawRowView(0))
	}
	d.Losses["memo"] = loss
	return &Result{Logits: logits, Preds: preds, Features: baseViews, Diag: d}, nil
}

// image adapts the source weights to one image's v views img (one values
// each; the first the unaugmented one), returning the marginal entropy and
// the features of the first view with the adapted weights. On a device
// that runs Adam (kernel.AdamDevice) the optimizer runs there
// (lnTrainer.attach): the source values restored for the image go up once,
// the gradients are not downloaded, and the prediction's pass reads the
// values the step left there.
func (t *MEMO) image(img []float32, one, v int, d *Diagnostics) (float64, *mat.Dense, error) {
	t0 := time.Now()
	t.reset()
	release, err := t.tr.attach()
	if err != nil {
		return 0, nil, err
	}
	defer release()
	node, f, err := t.forward(img[one:], v-1, true)
	if err != nil {
		return 0, nil, err
	}
	res, err := feature.MarginalEntropyLoss(f, t.text, t.scale, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("tta: memo: %w", err)
	}
	if err := t.backward(node, res.DLdF); err != nil {
		return 0, nil, err
	}
	if err := t.update(d); err != nil {
		return 0, nil, err
	}
	d.since("adapt", t0)
	t0 = time.Now()
	_, f0, err := t.forward(img[:one], 1, false)
	if err != nil {
		return 0, nil, err
	}
	d.since("predict", t0)
	return res.Marginal.Loss, f0, nil
}
