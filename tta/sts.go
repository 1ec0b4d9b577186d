package tta

import (
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// STSConfig configures STS.
type STSConfig struct {
	// Directions is k_t, the top singular directions of the head the
	// shift lives in.
	Directions int
	// Rho is the share of views the loss averages over (TPT's selection).
	Rho float64
	// Optimizer trains the method; a preset leaves it zero and Preset.New
	// sets it from Preset.Optimizer.
	Optimizer optim.Config
	// Steps is the number of optimizer steps per image.
	Steps int
}

// stsMethod registers STS, Spectrum-aware Test-time Steering (Dafnis &
// Metaxas, NeurIPS 2025; spec §8). Its code is not available: this is the
// reading of docs/method.md ("STS: what is assumed"): 64 views with TPT's
// confidence selection (ρ 0.1), k_t = 16 directions (cut to the head's
// rank), one shift δ = V_k·(S_k ⊙ γ) of every class prototype, renormalised,
// γ from zero, one AdamW(5e-3, no decay) step per image, batch 1.
var stsMethod = Registration{
	Name:  "sts",
	About: "spectrum-aware steering of the text prototypes per image from the confident views' marginal entropy (STS, reading of the paper)",
	Cost:  viewsCost(CostForward),
	Preset: func(p *Preset) error {
		multiViewPreset(p, 64, 0.1)
		p.Optimizer = optim.AdamW(5e-3, 0)
		p.Config = STSConfig{Directions: 16, Rho: 0.1, Steps: 1}
		return nil
	},
	Options: withOptimizer(viewsOption,
		intOption("directions", "k_t, the head's top singular directions the shift lives in", 1, math.MaxInt, inConfig(func(c *STSConfig) *int { return &c.Directions })),
		rhoOption("rho", "share of views the loss averages over", inConfig(func(c *STSConfig) *float64 { return &c.Rho })),
		intOption("steps", "optimizer steps per image", 1, math.MaxInt, inConfig(func(c *STSConfig) *int { return &c.Steps })),
	),
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[STSConfig](p)
		if err != nil {
			return nil, err
		}
		cfg.Optimizer = p.Optimizer
		return NewSTS(m, h.Head, p.Views, cfg)
	},
}

// STS steers CLIP's text prototypes per image in the span of their top
// singular directions: from γ = 0, the views are encoded once without a
// tape, the int(V·ρ) most confident are chosen, and the marginal entropy
// of their predictions against the steered prototypes
// (feature.Spectrum.SteeringLoss) gives γ's optimizer steps; the base view
// is classified with the steered prototypes. No encoder changes, and
// nothing is kept from one image to the next.
type STS struct {
	base
	viewCount
	cfg      STSConfig
	spectrum *feature.Spectrum
	gamma    []float64
	opt      optim.Optimizer[float64]
}

// NewSTS returns STS with v views per image over the head (C×d, unit
// rows).
func NewSTS(m Model, head mat.Matrix, v int, cfg STSConfig) (*STS, error) {
	vc, err := newViewCount("sts", v)
	if err != nil {
		return nil, err
	}
	if _, err := feature.KeepCount(v, cfg.Rho); err != nil {
		return nil, fmt.Errorf("tta: sts: %w", err)
	}
	if cfg.Steps < 1 {
		return nil, fmt.Errorf("tta: sts: %d steps per image, want at least 1", cfg.Steps)
	}
	if err := checkOptimizer("sts", cfg.Optimizer); err != nil {
		return nil, err
	}
	b, err := newBase("sts", m, head, optim.Config{Adam: optim.DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	sp, err := feature.NewSpectrum(b.text, cfg.Directions)
	if err != nil {
		return nil, err
	}
	opt, err := optim.New[float64](cfg.Optimizer)
	if err != nil {
		return nil, fmt.Errorf("tta: sts: %w", err)
	}
	return &STS{base: b, viewCount: vc, cfg: cfg, spectrum: sp, gamma: make([]float64, len(sp.Values)), opt: opt}, nil
}

// StepViews steers the prototypes for each of the n images in turn, from
// γ = 0 and a fresh optimizer, and classifies its base view.
func (s *STS) StepViews(views []float32, n, v int) (*Result, error) {
	d := newDiagnostics()
	var loss float64
	res, err := s.eachImage(s.viewCount, views, n, v, &d, func(_ int, f *mat.Dense) ([]float64, int, error) {
		t0 := time.Now()
		defer d.since("adapt", t0)
		fv, _ := feature.NormalizeRows(f)
		clear(s.gamma)
		s.opt.Reset()
		sel, err := feature.SelectConfident(feature.Logits(fv, s.text, s.scale), s.cfg.Rho)
		if err != nil {
			return nil, 0, fmt.Errorf("tta: sts: %w", err)
		}
		for step := range s.cfg.Steps {
			res, err := s.spectrum.SteeringLoss(fv, s.text, s.gamma, s.scale, sel.Kept)
			if err != nil {
				return nil, 0, err
			}
			if step == 0 {
				loss += res.Marginal.Loss / float64(n)
			}
			stepped, err := s.opt.Step([]optim.Param[float64]{{Name: "gamma", Value: s.gamma, Grad: res.DLdGamma}})
			if err != nil {
				return nil, 0, fmt.Errorf("tta: sts: %w", err)
			}
			s.count(&d, stepped)
		}
		steered, _, err := s.spectrum.Steer(s.text, s.gamma)
		if err != nil {
			return nil, 0, err
		}
		_, dim := fv.Dims()
		row := feature.Logits(fv.Slice(0, 1, 0, dim), steered, s.scale)
		return row.RawRowView(0), feature.Argmax(row)[0], nil
	})
	if res != nil {
		res.Diag.Losses["sts"] = loss
	}
	return res, err
}
