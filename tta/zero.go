package tta

import (
	"fmt"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// ZeroConfig configures ZERO.
type ZeroConfig struct {
	// Gamma is the share of views that vote, the lowest-entropy int(V·γ):
	// 0.3 in the code (the paper's text says 0.1).
	Gamma float64
	// Fallback settles a tie that no discarded view breaks.
	Fallback feature.ZeroFallback
}

// zeroMethod registers ZERO ([Z] FarinaMatteo/zero ttas/zero.py,
// scripts/zero.sh; spec §2): 64 views, γ 0.3, the head "a photo of a {}.",
// the fallback tie-break as the code computes it; the same on every
// dataset.
var zeroMethod = Registration{
	Name:  "zero",
	About: "training-free vote of the most confident of 64 views (ZERO)",
	Cost:  viewsCost(CostForward),
	Preset: func(p *Preset) error {
		multiViewPreset(p, 64, 0.3)
		p.Config = ZeroConfig{Gamma: 0.3, Fallback: feature.ZeroFallbackAsCoded}
		return nil
	},
	Options: []Option{viewsOption,
		rhoOption("gamma", "share of views that vote, the lowest-entropy int(V·γ)", inConfig(func(c *ZeroConfig) *float64 { return &c.Gamma })),
		choiceOption("fallback", "how a tie no discarded view breaks is settled", []string{"as_coded", "tied"},
			[]feature.ZeroFallback{feature.ZeroFallbackAsCoded, feature.ZeroFallbackTied}, inConfig(func(c *ZeroConfig) *feature.ZeroFallback { return &c.Fallback })),
	},
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[ZeroConfig](p)
		if err != nil {
			return nil, err
		}
		return NewZero(m, h.Head, p.Views, cfg)
	},
}

// Zero is ZERO on a CLIP model: training free and stateless. Per image it
// encodes the views in one batch without a tape; the int(V·γ)
// lowest-entropy views vote for their argmax class (feature.ZeroVote).
type Zero struct {
	base
	viewCount
	cfg ZeroConfig
}

// NewZero returns ZERO with v views per image over the head (C×d, unit
// rows).
func NewZero(m Model, head mat.Matrix, v int, cfg ZeroConfig) (*Zero, error) {
	vc, err := newViewCount("zero", v)
	if err != nil {
		return nil, err
	}
	if _, err := feature.KeepCount(v, cfg.Gamma); err != nil {
		return nil, fmt.Errorf("tta: zero: %w", err)
	}
	b, err := newBase("zero", m, head, optim.Config{Adam: optim.DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	return &Zero{base: b, viewCount: vc, cfg: cfg}, nil
}

// StepViews classifies n images from their v views each. The logits are
// the vote counts (ZeroResult.Output).
func (z *Zero) StepViews(views []float32, n, v int) (*Result, error) {
	d := newDiagnostics()
	return z.eachImage(z.viewCount, views, n, v, &d, func(_ int, fv *mat.Dense) ([]float64, int, error) {
		fn, _ := feature.NormalizeRows(fv)
		var cos mat.Dense
		cos.Mul(fn, z.text.T())
		res, err := feature.ZeroVote(&cos, z.scale, z.cfg.Gamma, z.cfg.Fallback)
		if err != nil {
			return nil, 0, err
		}
		return res.Output, res.Pred, nil
	})
}
