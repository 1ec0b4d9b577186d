package tta

import (
	"errors"
	"fmt"
	"math"
	"time"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/nlpodyssey/spago/mat/float"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// WATTTemplates are WATT's eight prompt templates ([W] templates.yaml), in
// the order the sequential variant visits them. The first two have no final
// period, as in the file. WATT fills them with the dataset's class names
// unchanged (no underscore replacement).
var WATTTemplates = []string{
	"a photo of a {}", "itap of a {}", "a bad photo of the {}.", "a origami {}.",
	"a photo of the large {}.", "a {} in a video game.", "art of the {}.", "a photo of the small {}.",
}

// WATTConfig configures WATT.
type WATTConfig struct {
	// Optimizer is Adam with lr 1e-3 in the README and the bash scripts
	// (main.py's default is 1e-4), betas (0.9, 0.999), no weight decay;
	// a preset leaves it zero and Preset.New sets it from
	// Preset.Optimizer.
	Optimizer optim.Config
	// Steps (L) is the number of optimizer steps per template, Rounds (M)
	// the number of weight-averaging rounds: 2 and 5 for WATT-S.
	Steps, Rounds int
	// Temperature of the soft targets; 0 means WATTTemperature.
	Temperature float64
	// Name is what Name reports; "" means "watt-s".
	Name string
}

// wattMethod registers WATT-S with L steps per template and M rounds:
// ([W] README and bash/watt_s) Adam(1e-3), batch 128, the eight
// WATTTemplates (one training head each; the evaluation head is their
// ensemble), L = 2, M = 5 for "watt-s"; "watt-lite" is L = 1, M = 2 (our
// choice, docs/method.md: 16 steps per batch instead of 80). [W] has no
// ImageNet-C setting; the same one is used.
func wattMethod(name string, steps, rounds int) Registration {
	return Registration{
		Name:  name,
		About: fmt.Sprintf("WATT-S, weight averaging over 8 templates, %d steps × %d rounds", steps, rounds),
		// Steps passes per template, Rounds times, and a last forward.
		Cost: func(p Preset) float64 {
			c, ok := p.Config.(WATTConfig)
			if !ok {
				return CostForwardBackward
			}
			return float64(c.Steps*c.Rounds*max(len(p.Templates), 1))*CostForwardBackward + CostForward
		},
		Preset: func(p *Preset) error {
			p.Optimizer, p.BatchSize = optim.AdamL2(1e-3, 0), 128
			p.Templates, p.PerTemplateHeads = WATTTemplates, true
			p.Config = WATTConfig{Steps: steps, Rounds: rounds, Name: name}
			return nil
		},
		Options: withOptimizer(
			intOption("steps", "L, optimizer steps per template", 1, math.MaxInt, inConfig(func(c *WATTConfig) *int { return &c.Steps })),
			intOption("rounds", "M, weight-averaging rounds", 1, math.MaxInt, inConfig(func(c *WATTConfig) *int { return &c.Rounds })),
			floatOption("temperature", "temperature of the soft targets (0: WATTTemperature)", nonNeg, inConfig(func(c *WATTConfig) *float64 { return &c.Temperature })),
		),
		New: func(m Model, p Preset, h Heads) (Method, error) {
			cfg, err := configOf[WATTConfig](p)
			if err != nil {
				return nil, err
			}
			cfg.Optimizer = p.Optimizer
			return NewWATT(m, h.Head, h.PerTemplate, cfg)
		},
	}
}

// WATT is WATT-S, the sequential variant of WATT ([W] adapt/watt.py
// with type "sequential", spec §2.4). Every batch starts from the source
// weights and a fresh Adam. In each of Rounds rounds the method visits the
// template heads in order, each continuing from the previous template's
// weights, and takes Steps steps of WATTLoss against that head; after each
// template it takes a snapshot of the visual LayerNorm weights, and at the
// end of the round it loads the mean of the snapshots, from which the next
// round starts. Adam's state is never reset within a batch: it carries
// across templates and rounds, as in the code, where only the weights are
// reloaded after the first round. The batch is then classified with the
// averaged weights and the evaluation head (the normalised mean of the
// templates' normalised embeddings, [W]'s evaluate without ref_eval).
//
// Each step encodes the batch once: the code's no-grad pass for the
// pseudo-labels and its pass with gradient use the same weights, so the
// pseudo-labels come from the features of the pass with gradient. The
// snapshots are averaged in the model's element type, summed in template
// order and divided by their number, as the code's sum(...)/K does on
// float32 tensors. The prediction's logits use the model's logit scale (the
// code writes 100, which only scales the logits).
//
// Divergences from [W]: the code keeps the CLIP model in fp16 on CUDA
// (clip.load), this port computes in the model's precision (float32); and a
// step with a NaN or ±Inf gradient is skipped and counted, where torch's
// Adam would apply it.
type WATT struct {
	base
	heads []*mat.Dense
	cfg   WATTConfig
}

// NewWATT returns WATT-S on the model. head (C×d, unit rows) is the
// evaluation head; heads are the per-template training heads (C×d each,
// unit rows), one per template in visiting order (WATTTemplates, each alone).
func NewWATT(m Model, head mat.Matrix, heads []mat.Matrix, cfg WATTConfig) (*WATT, error) {
	if len(heads) == 0 {
		return nil, errors.New("tta: watt: no template heads")
	}
	if cfg.Steps < 1 || cfg.Rounds < 1 {
		return nil, fmt.Errorf("tta: watt: steps per template %d and rounds %d must be positive", cfg.Steps, cfg.Rounds)
	}
	if cfg.Temperature < 0 {
		return nil, fmt.Errorf("tta: watt: negative temperature %g", cfg.Temperature)
	}
	if cfg.Temperature == 0 {
		cfg.Temperature = feature.WATTTemperature
	}
	name := cfg.Name
	if name == "" {
		name = "watt-s"
	}
	b, err := newBase(name, m, head, cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	w := &WATT{base: b, cfg: cfg}
	c, d := head.Dims()
	for i, h := range heads {
		if hc, hd := h.Dims(); hc != c || hd != d {
			return nil, fmt.Errorf("tta: watt: template head %d is %d×%d, evaluation head %d×%d", i, hc, hd, c, d)
		}
		w.heads = append(w.heads, mat.DenseCopyOf(h))
	}
	return w, nil
}

// Step adapts on the batch from the source weights and classifies it with
// the averaged weights. Diag.Losses["watt"] is the mean WATTLoss over the
// batch's Rounds·len(heads)·Steps steps, "watt_first" that of the first step
// (source weights, first template).
//
// The batch is wrapped once and held on the device (autograd.HoldOnDevice)
// for the step's Rounds·len(heads)·Steps + 1 passes: with a device set the
// images go up once rather than once per pass.
func (w *WATT) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	w.reset()
	x, err := w.images(pixels, n)
	if err != nil {
		return nil, err
	}
	hold := autograd.HoldOnDevice(x)
	defer hold.Release()
	avg := newWeightAverager(w.tr)
	var sum float64
	steps := 0
	for r := range w.cfg.Rounds {
		if r > 0 {
			avg.load()
		}
		avg.clear()
		if err := w.round(x, avg, &d, &sum, &steps); err != nil {
			return nil, err
		}
	}
	avg.load()
	w.tr.zeroGrad()
	d.Losses["watt"] = sum / float64(steps)
	d.since("adapt", t0)

	t0 = time.Now()
	_, f := w.encode(x, false)
	logits, preds := w.classify(f)
	d.since("predict", t0)
	return &Result{Logits: logits, Preds: preds, Features: f, Diag: d}, nil
}

// round runs one round's Steps steps from every template's head on the
// images x, snapshotting the values after each head's, and adds the losses
// to sum and their count to steps. On a device that runs Adam
// (kernel.AdamDevice) the optimizer runs there for the round
// (lnTrainer.attach): the averaged values loaded on the host between
// rounds go up once, at the round's start.
func (w *WATT) round(x smat.Tensor, avg weightAverager, d *Diagnostics, sum *float64, steps *int) error {
	release, err := w.tr.attach()
	if err != nil {
		return err
	}
	defer release()
	for _, head := range w.heads {
		for range w.cfg.Steps {
			node, f := w.encode(x, true)
			res, err := feature.WATTLoss(f, head, w.scale, w.cfg.Temperature)
			if err != nil {
				return err
			}
			if *steps == 0 {
				d.Losses["watt_first"] = res.Loss
			}
			*sum += res.Loss
			*steps++
			if err := w.backward(node, res.DLdF); err != nil {
				return err
			}
			if err := w.update(d); err != nil {
				return err
			}
		}
		avg.add()
	}
	return nil
}

// weightAverager keeps snapshots of a trainer's parameters and loads their
// mean, in the trainer's element type.
type weightAverager interface {
	add()   // snapshot the current values
	load()  // overwrite the values with the mean of the snapshots
	clear() // forget the snapshots
}

func newWeightAverager(tr trainer) weightAverager {
	switch tr := tr.(type) {
	case *lnTrainer[float32]:
		return &lnAverager[float32]{tr: tr}
	case *lnTrainer[float64]:
		return &lnAverager[float64]{tr: tr}
	}
	panic(fmt.Sprintf("tta: watt: trainer %T", tr))
}

type lnAverager[T float.DType] struct {
	tr    *lnTrainer[T]
	snaps [][][]T // snapshot, parameter, element
}

func (a *lnAverager[T]) add() {
	s := make([][]T, len(a.tr.params))
	for i, p := range a.tr.params {
		s[i] = append([]T(nil), p.Value...)
	}
	a.snaps = append(a.snaps, s)
}

func (a *lnAverager[T]) load() {
	if len(a.snaps) == 0 {
		return
	}
	k := T(len(a.snaps))
	for i, p := range a.tr.params {
		for j := range p.Value {
			var s T
			for _, snap := range a.snaps {
				s += snap[i][j]
			}
			p.Value[j] = s / k
		}
	}
}

func (a *lnAverager[T]) clear() { a.snaps = a.snaps[:0] }
