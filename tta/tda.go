package tta

import (
	"math"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// tdaMethod registers TDA with feature.DefaultTDAConfig ([T]
// configs/imagenet.yaml, the only ImageNet-family setting; [T] has none for
// CIFAR), scale 100, batch 1 as in the official code. TDA gives the same
// predictions at any batch size, so a larger one only saves time. Head "a
// photo of a {}." like the other SubTTA-repo presets; [T]'s own ImageNet
// head is the MINTTemplates ensemble.
var tdaMethod = Registration{
	Name:  "tda",
	About: "training-free positive and negative caches (TDA)",
	Cost:  fixedCost(CostForward),
	Preset: func(p *Preset) error {
		p.BatchSize, p.Config = 1, feature.DefaultTDAConfig()
		return nil
	},
	Options: []Option{
		intOption("pos_shots", "capacity per class of the positive cache", 0, math.MaxInt, inConfig(func(c *feature.TDAConfig) *int { return &c.Positive.Shots })),
		floatOption("pos_alpha", "weight α of the positive cache", anyReal, inConfig(func(c *feature.TDAConfig) *float64 { return &c.Positive.Alpha })),
		floatOption("pos_beta", "sharpness β of the positive cache", nonNeg, inConfig(func(c *feature.TDAConfig) *float64 { return &c.Positive.Beta })),
		boolOption("positive", "the positive cache on", true, inConfig(func(c *feature.TDAConfig) *bool { return &c.Positive.Disabled })),
		intOption("neg_shots", "capacity per class of the negative cache", 0, math.MaxInt, inConfig(func(c *feature.TDAConfig) *int { return &c.Negative.Shots })),
		floatOption("neg_alpha", "weight α of the negative cache", anyReal, inConfig(func(c *feature.TDAConfig) *float64 { return &c.Negative.Alpha })),
		floatOption("neg_beta", "sharpness β of the negative cache", nonNeg, inConfig(func(c *feature.TDAConfig) *float64 { return &c.Negative.Beta })),
		boolOption("negative", "the negative cache on", true, inConfig(func(c *feature.TDAConfig) *bool { return &c.Negative.Disabled })),
		floatOption("entropy_lower", "lower bound of the normalised entropy admitted to the negative cache", unitClose, inConfig(func(c *feature.TDAConfig) *float64 { return &c.EntropyLower })),
		floatOption("entropy_upper", "upper bound of the normalised entropy admitted to the negative cache", unitClose, inConfig(func(c *feature.TDAConfig) *float64 { return &c.EntropyUpper })),
		floatOption("mask_lower", "lower bound of the probabilities a negative entry keeps", unitClose, inConfig(func(c *feature.TDAConfig) *float64 { return &c.MaskLower })),
		floatOption("mask_upper", "upper bound of the probabilities a negative entry keeps", unitClose, inConfig(func(c *feature.TDAConfig) *float64 { return &c.MaskUpper })),
		boolOption("predict_before_update", "predict from the caches as they were before the sample arrived", false, inConfig(func(c *feature.TDAConfig) *bool { return &c.PredictBeforeUpdate })),
	},
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[feature.TDAConfig](p)
		if err != nil {
			return nil, err
		}
		return NewTDA(m, h.Head, cfg)
	},
}

// TDA is the TDA method ([T] kdiAAA/TDA, spec §2.5) on a CLIP model:
// training free, the weights never change. The official code runs at batch
// size 1; TDA encodes a whole batch in one forward pass and then runs its
// TDACache over the samples one at a time, in order, so any batch size
// gives the predictions of batch size 1 (up to the rounding of the forward
// pass). Reset empties the caches (per domain).
type TDA struct {
	base
	cache *feature.TDACache
}

// NewTDA returns TDA over the head (C×d, unit rows). A zero cfg.Scale
// takes the model's logit scale.
func NewTDA(m Model, head mat.Matrix, cfg feature.TDAConfig) (*TDA, error) {
	b, err := newBase("tda", m, head, optim.Config{Adam: optim.DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	if cfg.Scale == 0 {
		cfg.Scale = b.scale
	}
	t, err := feature.NewTDACache(head, cfg)
	if err != nil {
		return nil, err
	}
	td := &TDA{base: b, cache: t}
	td.own = td
	return td, nil
}

// Reset empties the caches (and restores the source weights, which TDA never
// changes).
func (t *TDA) Reset() error {
	t.reset()
	t.cache.Reset()
	return nil
}

// Step classifies the batch sample by sample, updating the caches.
// Diag.PseudoLabels are the zero-shot predictions the caches were updated
// with; Diag.Losses["entropy"] is the batch mean of their softmax entropy
// in nats (as BATCLIP's), and "tda_entropy" the mean of the normalised
// entropy H/log₂(C) that the negative cache's band tests.
func (t *TDA) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	// No gradient is needed: encode without recording a tape.
	_, f, err := t.forward(pixels, n, false)
	if err != nil {
		return nil, err
	}
	res, err := t.cache.Update(f)
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

// tdaOwn is TDA's own memory in a saved state: its caches.
type tdaOwn struct {
	Positive, Negative [][]feature.TDAEntry
}

func (t *TDA) saveOwn() ([]byte, error) {
	var o tdaOwn
	o.Positive, o.Negative = t.cache.Entries()
	return gobBytes(&o)
}

func (t *TDA) loadOwn(p []byte) (func(), error) {
	var o tdaOwn
	if err := ungob(p, &o); err != nil {
		return nil, err
	}
	check := *t.cache
	if err := check.SetEntries(o.Positive, o.Negative); err != nil {
		return nil, err
	}
	return func() { *t.cache = check }, nil
}
