package tta

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// dmnMethod registers DMN in zero-shot mode ([D] YBZh/DMN dmn_main.py,
// scripts/run.sh; spec §5): 32 views, memory of 50 per class, β 5.5,
// selection 0.1, a fixed mixing weight of 1 (the code searches it post hoc
// with the test labels, which this port does not do), the model's logit
// scale; the head "a photo of a {}." (DMN's ImageNet head of TIP templates
// and CuPL sentences is not shipped, and DMN has none for CIFAR).
var dmnMethod = Registration{
	Name:  "dmn",
	About: "training-free dual memory of the domain's confident images (DMN, zero-shot)",
	Cost:  viewsCost(CostForward),
	Preset: func(p *Preset) error {
		cfg := feature.DefaultDMNConfig()
		multiViewPreset(p, 32, cfg.SelectionP)
		cfg.Scale = 0 // the model's
		p.Config = cfg
		return nil
	},
	Options: []Option{viewsOption,
		intOption("memory", "entries per class of the memory", 1, math.MaxInt, inConfig(func(c *feature.DMNConfig) *int { return &c.Capacity })),
		floatOption("beta", "sharpness β of the memory attention", nonNeg, inConfig(func(c *feature.DMNConfig) *float64 { return &c.Beta })),
		rhoOption("selection", "share of views averaged into the pseudo-label", inConfig(func(c *feature.DMNConfig) *float64 { return &c.SelectionP })),
		floatOption("weight", "weight of the memory probabilities in the score", nonNeg, inConfig(func(c *feature.DMNConfig) *float64 { return &c.Weight })),
	},
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[feature.DMNConfig](p)
		if err != nil {
			return nil, err
		}
		return NewDMN(m, h.Head, p.Views, cfg)
	},
}

// DMN is DMN's zero-shot mode on a CLIP model: training free; its memory
// of the domain's most confident base-view features (feature.DMNMemory)
// grows through the domain and is emptied by Reset, not by ResetSample.
type DMN struct {
	base
	viewCount
	mem *feature.DMNMemory
}

// NewDMN returns DMN with v views per image over the head (C×d, unit
// rows). A zero cfg.Scale takes the model's logit scale.
func NewDMN(m Model, head mat.Matrix, v int, cfg feature.DMNConfig) (*DMN, error) {
	vc, err := newViewCount("dmn", v)
	if err != nil {
		return nil, err
	}
	if _, err := feature.KeepCount(v, cfg.SelectionP); err != nil {
		return nil, fmt.Errorf("tta: dmn: %w", err)
	}
	b, err := newBase("dmn", m, head, optim.Config{Adam: optim.DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	if cfg.Scale == 0 {
		cfg.Scale = b.scale
	}
	mem, err := feature.NewDMNMemory(head, cfg)
	if err != nil {
		return nil, err
	}
	t := &DMN{base: b, viewCount: vc, mem: mem}
	t.own = t
	return t, nil
}

// Reset empties the memory.
func (t *DMN) Reset() error {
	t.reset()
	t.mem.Reset()
	return nil
}

// StepViews classifies n images from their v views each, one at a time in
// order: each joins the memory before it is predicted, as in the code.
// The logits are the final scores p_txt + w·p_mem.
func (t *DMN) StepViews(views []float32, n, v int) (*Result, error) {
	d := newDiagnostics()
	pseudo := make([]int, n)
	res, err := t.eachImage(t.viewCount, views, n, v, &d, func(i int, fv *mat.Dense) ([]float64, int, error) {
		r, err := t.mem.Step(fv)
		if err != nil {
			return nil, 0, err
		}
		pseudo[i] = r.PseudoLabel
		return r.Final, r.Pred, nil
	})
	if res != nil {
		res.Diag.PseudoLabels = pseudo
	}
	return res, err
}

func (t *DMN) saveOwn() ([]byte, error) {
	e := t.mem.Entries()
	return gobBytes(&e)
}

func (t *DMN) loadOwn(p []byte) (func(), error) {
	var e [][]feature.DMNEntry
	if err := ungob(p, &e); err != nil {
		return nil, err
	}
	check := *t.mem
	if err := check.SetEntries(e); err != nil {
		return nil, err
	}
	return func() { *t.mem = check }, nil
}
