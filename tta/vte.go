package tta

import (
	"fmt"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// CIFARTemplates are the 18 prompt templates of CLIP's CIFAR-10 and
// CIFAR-100 ensembles, in the order of the harness' datasets/prompts.py
// (cifar10_templates, OpenAI's prompt engineering; MIT licence), which
// tta2.json lists.
var CIFARTemplates = []string{
	"a photo of a {}.", "a blurry photo of a {}.", "a black and white photo of a {}.", "a low contrast photo of a {}.",
	"a high contrast photo of a {}.", "a bad photo of a {}.", "a good photo of a {}.", "a photo of a small {}.",
	"a photo of a big {}.", "a photo of the {}.", "a blurry photo of the {}.", "a black and white photo of the {}.",
	"a low contrast photo of the {}.", "a high contrast photo of the {}.", "a bad photo of the {}.",
	"a good photo of the {}.", "a photo of the small {}.", "a photo of the big {}.",
}

// VTEConfig configures VTE.
type VTEConfig struct {
	// Rho is the share of views kept, the lowest-entropy int(V·ρ).
	Rho float64
}

// vteMethod registers VTE ([H] classification/methods/vte.py,
// cfgs/imagenet_c/vte.yaml; spec §1): 64 views (the base view and 63 random
// resized crops with flips), ρ 0.1, on every dataset; the head is CLIP's
// prompt ensemble of the dataset, the 18 CIFAR templates on CIFAR-10-C and
// CIFAR-100-C and the 80 ImageNet templates on ImageNet-C (and the
// datasets that take its preset), as in the harness.
var vteMethod = Registration{
	Name:  "vte",
	About: "training-free ensemble of the most confident of 64 views (VTE)",
	Cost:  viewsCost(CostForward),
	Preset: func(p *Preset) error {
		multiViewPreset(p, 64, 0.1)
		p.Templates, p.Config = CIFARTemplates, VTEConfig{Rho: 0.1}
		if p.Dataset == "imagenet-c" {
			p.Templates = ImageNetTemplates
		}
		return nil
	},
	Options: []Option{viewsOption,
		rhoOption("rho", "share of views kept, the lowest-entropy int(V·ρ)", inConfig(func(c *VTEConfig) *float64 { return &c.Rho })),
	},
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[VTEConfig](p)
		if err != nil {
			return nil, err
		}
		return NewVTE(m, h.Head, p.Views, cfg)
	},
}

// VTE is Vision Test-time Ensemble on a CLIP model: training free and
// stateless. Per image it encodes the views in one batch without a tape,
// keeps the int(V·ρ) lowest-entropy views and predicts from the mean of
// their normalised features (feature.VTEPredict).
type VTE struct {
	base
	viewCount
	cfg VTEConfig
}

// NewVTE returns VTE with v views per image over the head (C×d, unit rows).
func NewVTE(m Model, head mat.Matrix, v int, cfg VTEConfig) (*VTE, error) {
	vc, err := newViewCount("vte", v)
	if err != nil {
		return nil, err
	}
	if _, err := feature.KeepCount(v, cfg.Rho); err != nil {
		return nil, fmt.Errorf("tta: vte: %w", err)
	}
	b, err := newBase("vte", m, head, optim.Config{Adam: optim.DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	return &VTE{base: b, viewCount: vc, cfg: cfg}, nil
}

// StepViews classifies n images from their v views each.
func (t *VTE) StepViews(views []float32, n, v int) (*Result, error) {
	d := newDiagnostics()
	return t.eachImage(t.viewCount, views, n, v, &d, func(_ int, fv *mat.Dense) ([]float64, int, error) {
		res, err := feature.VTEPredict(fv, t.text, t.scale, t.cfg.Rho)
		if err != nil {
			return nil, 0, err
		}
		return res.Logits, res.Pred, nil
	})
}
