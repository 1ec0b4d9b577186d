package tta

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// MINTConfig configures MINT.
type MINTConfig struct {
	// Optimizer trains the method; a preset leaves it zero and Preset.New
	// sets it from Preset.Optimizer.
	Optimizer optim.Config
	// Scale multiplies the cosine logits: a literal 100 in both codes.
	Scale float64
	// PriorN is N0 in the mixing ratio n/(N0+n): 10000.
	PriorN float64
	// Name is what Name reports; "" means "mint".
	Name string
}

// mintMethod registers the SubTTA repo's MINT: Adam(1e-2, L2 0.01),
// batches as SubTTA's, one template, scale 100, N0 10000.
var mintMethod = Registration{
	Name:  "mint",
	About: "MINT as in the SubTTA repo: one template, Adam(1e-2, L2 0.01)",
	// A pass to adapt, one to predict.
	Cost: fixedCost(CostForwardBackward + CostForward),
	Preset: func(p *Preset) error {
		p.Optimizer = optim.AdamL2(1e-2, 0.01)
		p.Config = MINTConfig{Scale: 100, PriorN: 10000}
		return nil
	},
	Options: mintOptions,
	New:     newMINTFromPreset,
}

// mintOfficialMethod registers the official MINT code's setting ([M]):
// Adam(0.015 on ImageNet-C, 0.007 on CIFAR-100-C, no weight decay), batch
// 20, the seven MINTTemplates with underscores in class names replaced by
// spaces. [M] gives no CIFAR-10-C setting, so there is none.
var mintOfficialMethod = Registration{
	Name:  "mint-official",
	About: "MINT as in its official code: seven templates, batch 20",
	// A pass to adapt, one to predict.
	Cost: fixedCost(CostForwardBackward + CostForward),
	Preset: func(p *Preset) error {
		lr := map[string]float64{"imagenet-c": 0.015, "cifar100-c": 0.007}[p.Dataset]
		if lr == 0 {
			return noSetting(p.Method, p.Dataset, "the official MINT code gives none")
		}
		p.Optimizer, p.BatchSize = optim.AdamL2(lr, 0), 20
		p.Templates, p.SpacedClassNames = MINTTemplates, true
		p.Config = MINTConfig{Scale: 100, PriorN: 10000, Name: p.Method}
		return nil
	},
	Options: mintOptions,
	New:     newMINTFromPreset,
}

func newMINTFromPreset(m Model, p Preset, h Heads) (Method, error) {
	cfg, err := configOf[MINTConfig](p)
	if err != nil {
		return nil, err
	}
	cfg.Optimizer = p.Optimizer
	return NewMINT(m, h.Head, cfg)
}

// MINTTemplates are the official MINT code's seven prompt templates
// ([M], spec §2.2); build the official head from them with underscores in
// class names replaced by spaces.
var MINTTemplates = []string{
	"itap of a {}.", "a bad photo of the {}.", "a origami {}.", "a photo of the large {}.",
	"a {} in a video game.", "art of the {}.", "a photo of the small {}.",
}

// MINT is the MINT method. Every batch starts from the source weights and a
// fresh optimizer; the batch's loss gradient joins the running mean of all batch
// gradients of the domain, one optimizer step is taken with that mean, the
// batch is re-encoded and classified with text weights mixed towards the
// post-adaptation class means; then the source weights are restored.
//
// The SubTTA repo's variant ([S] methods/mint.py, the fixtures) uses one
// template and Adam(lr 1e-2, L2 weight decay 0.01); the official code ([M])
// uses the MINTTemplates head and Adam(lr 0.015 on ImageNet-C, 0.007 on
// CIFAR-100-C, no weight decay). Both are this type with another head and
// optimizer (see the presets). Not reproduced from [M]: its optimizer also
// updates the unused text ln_final, which has no effect on predictions.
type MINT struct {
	base
	state *feature.MINTState
	agg   optim.GradMean
}

// NewMINT returns MINT with the head (C×d, unit rows).
func NewMINT(m Model, head mat.Matrix, cfg MINTConfig) (*MINT, error) {
	name := cfg.Name
	if name == "" {
		name = "mint"
	}
	b, err := newBase(name, m, head, cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	c, d := head.Dims()
	st, err := feature.NewMINTState(c, d, cfg.Scale, cfg.PriorN)
	if err != nil {
		return nil, err
	}
	mt := &MINT{base: b, state: st}
	mt.own = mt
	return mt, nil
}

// Reset restores the source weights and clears the class sums and the
// aggregated gradient.
func (m *MINT) Reset() error {
	m.reset()
	m.state.Reset()
	m.agg.Reset()
	return nil
}

// Step runs MINT on the batch.
//
// The batch is wrapped once and held on the device (autograd.HoldOnDevice)
// for the step's two passes, the adaptation's and the prediction's: with a
// device set the images go up once rather than twice.
func (m *MINT) Step(pixels []float32, n int) (*Result, error) {
	d := newDiagnostics()
	t0 := time.Now()
	m.reset() // source weights and a fresh optimizer for every batch
	x, err := m.images(pixels, n)
	if err != nil {
		return nil, err
	}
	hold := autograd.HoldOnDevice(x)
	defer hold.Release()
	node, f := m.encode(x, true)
	loss, err := m.state.Loss(f, m.text)
	if err != nil {
		return nil, err
	}
	d.Losses["mint"] = loss.Loss
	d.PseudoLabels = loss.Preds
	if err := m.backward(node, loss.DLdF); err != nil {
		return nil, err
	}
	if err := m.tr.addGrads(&m.agg); err != nil {
		return nil, err
	}
	stepped, err := m.tr.stepMean(&m.agg)
	if err != nil {
		return nil, err
	}
	m.count(&d, stepped)
	d.since("adapt", t0)

	t0 = time.Now()
	_, fPost := m.encode(x, false)
	pred, err := m.state.Predict(fPost, m.text)
	if err != nil {
		return nil, err
	}
	m.tr.restoreSource()
	d.since("predict", t0)
	return &Result{Logits: pred.Logits, Preds: pred.Preds, Features: fPost, Diag: d}, nil
}

// mintOwn is MINT's own memory in a saved state: the class sums and the
// aggregated gradient.
type mintOwn struct {
	Sums      feature.MINTSums
	GradCount int
	GradNames []string // sorted
	GradSums  [][]float64
}

func (m *MINT) saveOwn() ([]byte, error) {
	count, sums := m.agg.Sums()
	o := mintOwn{Sums: m.state.Sums(), GradCount: count}
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		o.GradNames, o.GradSums = append(o.GradNames, k), append(o.GradSums, sums[k])
	}
	return gobBytes(&o)
}

func (m *MINT) loadOwn(p []byte) (func(), error) {
	var o mintOwn
	if err := ungob(p, &o); err != nil {
		return nil, err
	}
	if len(o.GradNames) != len(o.GradSums) {
		return nil, fmt.Errorf("saved gradient sums are malformed")
	}
	check := *m.state
	if err := check.SetSums(o.Sums); err != nil {
		return nil, err
	}
	sums := map[string][]float64{}
	for i, k := range o.GradNames {
		sums[k] = o.GradSums[i]
	}
	var agg optim.GradMean
	if err := agg.SetSums(o.GradCount, sums); err != nil {
		return nil, err
	}
	return func() { *m.state = check; m.agg = agg }, nil
}

// mintOptions are both MINT settings' options.
var mintOptions = withOptimizer(
	floatOption("prior_n", "N0 in the mixing ratio n/(N0+n)", nonNeg, inConfig(func(c *MINTConfig) *float64 { return &c.PriorN })),
	floatOption("scale", "factor of the cosine logits", positive, inConfig(func(c *MINTConfig) *float64 { return &c.Scale })),
)
