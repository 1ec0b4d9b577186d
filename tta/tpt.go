package tta

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/nlpodyssey/spago/mat/float"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// TextModel is what a method that learns on the text side needs (TPT):
// the vision tower of Model, and the text tower with learnable context
// vectors in place of a prompt's first token embeddings. *clip.Model
// implements it.
type TextModel interface {
	Model
	// PromptFeatures encodes tokenized prompts with ctx [n, text width] in
	// place of the token embeddings at positions 1…n of every prompt,
	// returning the unnormalised features [prompts, EmbedDim] on the tape.
	PromptFeatures(tokens [][]int, ctx smat.Tensor) (smat.Tensor, error)
	// TokenEmbeddings returns a copy of the token embeddings of ids, in
	// the model's precision.
	TokenEmbeddings(ids []int) (smat.Matrix, error)
	// TextContextLength is the text tower's context length.
	TextContextLength() int
}

// TPTConfig configures TPT.
type TPTConfig struct {
	// Rho is the share of views the loss averages over, the
	// lowest-entropy int(V·ρ), chosen once before the first step.
	Rho float64
	// Template is the class prompt; the words before "{}" are the
	// context that the learned vectors start from and replace ("a photo
	// of a {}.": four vectors with CLIP's BPE).
	Template string
	// Optimizer trains the method; a preset leaves it zero and Preset.New
	// sets it from Preset.Optimizer.
	Optimizer optim.Config
	// Steps is the number of optimizer steps per image.
	Steps int
}

// tptMethod registers TPT ([TPT] azshue/TPT tpt_classification.py,
// clip/custom_clip.py, and the harness' cfgs; spec §3): 64 views (the base
// view and 63 random resized crops with flips), ρ 0.1, the context "a photo
// of a" at the front of every class prompt, AdamW(5e-3, weight decay 0.01),
// one step, batch 1; the same on every dataset. The official code runs in
// fp16 with a gradient scaler; this port in the model's precision.
var tptMethod = Registration{
	Name:  "tpt",
	About: "test-time prompt tuning: context vectors learned per image from the confident views' marginal entropy (TPT)",
	Cost:  viewsCost(CostForward),
	Preset: func(p *Preset) error {
		multiViewPreset(p, 64, 0.1)
		p.Optimizer = optim.AdamW(5e-3, 0.01)
		p.Config = TPTConfig{Rho: 0.1, Template: "a photo of a {}.", Steps: 1}
		return nil
	},
	Options: withOptimizer(viewsOption,
		rhoOption("rho", "share of views the loss averages over", inConfig(func(c *TPTConfig) *float64 { return &c.Rho })),
		intOption("steps", "optimizer steps per image", 1, math.MaxInt, inConfig(func(c *TPTConfig) *int { return &c.Steps })),
	),
	New: func(m Model, p Preset, h Heads) (Method, error) {
		cfg, err := configOf[TPTConfig](p)
		if err != nil {
			return nil, err
		}
		cfg.Optimizer = p.Optimizer
		tm, ok := m.(TextModel)
		if !ok {
			return nil, fmt.Errorf("tta: tpt: the model (%T) has no text tower to learn a prompt on", m)
		}
		return NewTPT(tm, h, p.Views, cfg)
	},
}

// TPT is test-time prompt tuning on a CLIP model. For every image, from
// the initial context and a fresh optimizer: the views are encoded once
// without a tape; the class prompts are encoded with the context vectors
// in place of the template's first words; the int(V·ρ) views of lowest
// entropy are chosen, and the marginal entropy of their mean prediction
// (feature.MarginalEntropy) is back-propagated through the text tower to
// the context, which the optimizer steps; the image is then classified
// from its base view with the new prompts. The vision tower never changes.
type TPT struct {
	base
	viewCount
	tm      TextModel
	cfg     TPTConfig
	prompts [][]int
	init    smat.Matrix // the context's initial value [n, width]
	ctx     smat.Matrix // the learned context
	opt     contextOptimizer
}

// NewTPT returns TPT with v views per image; h gives the class names and
// the tokenizer that the prompts are made with (h.Head is the zero-shot
// head of the template, for diagnostics).
func NewTPT(m TextModel, h Heads, v int, cfg TPTConfig) (*TPT, error) {
	vc, err := newViewCount("tpt", v)
	if err != nil {
		return nil, err
	}
	if _, err := feature.KeepCount(v, cfg.Rho); err != nil {
		return nil, fmt.Errorf("tta: tpt: %w", err)
	}
	if cfg.Steps < 1 {
		return nil, fmt.Errorf("tta: tpt: %d steps per image, want at least 1", cfg.Steps)
	}
	if h.Tokenizer == nil || len(h.Classes) == 0 {
		return nil, errors.New("tta: tpt: the heads carry no class names and tokenizer to build prompts from")
	}
	b, err := newBase("tpt", m, h.Head, optim.Config{Adam: optim.DefaultAdamConfig(0)})
	if err != nil {
		return nil, err
	}
	prefix, _, ok := strings.Cut(cfg.Template, "{}")
	prefix = strings.TrimSpace(prefix)
	if !ok || prefix == "" {
		return nil, fmt.Errorf("tta: tpt: template %q has no words before {} to learn", cfg.Template)
	}
	ids := h.Tokenizer.Encode(prefix)
	t := &TPT{base: b, viewCount: vc, tm: m, cfg: cfg}
	for _, c := range h.Classes {
		toks, err := h.Tokenizer.Tokenize(strings.ReplaceAll(cfg.Template, "{}", c), m.TextContextLength(), true)
		if err != nil {
			return nil, fmt.Errorf("tta: tpt: %w", err)
		}
		if len(toks) < len(ids)+3 || !slices.Equal(toks[1:1+len(ids)], ids) {
			return nil, fmt.Errorf("tta: tpt: the prompt of %q does not start with the context %q's tokens", c, prefix)
		}
		t.prompts = append(t.prompts, toks)
	}
	if t.init, err = m.TokenEmbeddings(ids); err != nil {
		return nil, fmt.Errorf("tta: tpt: %w", err)
	}
	t.ctx = t.init.Clone()
	t.ctx.SetRequiresGrad(true)
	if err := checkOptimizer("tpt", cfg.Optimizer); err != nil {
		return nil, err
	}
	if t.opt, err = newContextOptimizer(t.ctx, cfg.Optimizer); err != nil {
		return nil, fmt.Errorf("tta: tpt: %w", err)
	}
	return t, nil
}

// Reset restores the source weights (TPT never changes them) and the
// initial context.
func (t *TPT) Reset() error {
	t.reset()
	t.resetContext()
	return nil
}

// ResetSample restores the initial context and a fresh optimizer.
func (t *TPT) ResetSample() error {
	t.reset()
	t.resetContext()
	return nil
}

func (t *TPT) resetContext() { t.opt.reset(t.init) }

// StepViews tunes the context on each of the n images in turn (from the
// initial context every time) and classifies it from its base view.
func (t *TPT) StepViews(views []float32, n, v int) (*Result, error) {
	d := newDiagnostics()
	var loss float64
	res, err := t.eachImage(t.viewCount, views, n, v, &d, func(_ int, f *mat.Dense) ([]float64, int, error) {
		t0 := time.Now()
		fv, _ := feature.NormalizeRows(f)
		r, err := t.tune(fv)
		if err != nil {
			return nil, 0, err
		}
		t.count(&d, r.stepped)
		loss += r.loss / float64(n)
		d.since("adapt", t0)
		t0 = time.Now()
		defer d.since("predict", t0)
		text, err := t.textFeatures()
		if err != nil {
			return nil, 0, err
		}
		row, pred := feature.Classify(fv.Slice(0, 1, 0, t.model.EmbedDim()), text, t.scale)
		return row.RawRowView(0), pred[0], nil
	})
	if res != nil {
		res.Diag.Losses["tpt"] = loss
	}
	return res, err
}

// tuned is the outcome of tune on one image.
type tuned struct {
	loss    float64 // the marginal entropy of the first step
	stepped bool    // whether the last step was taken (false: skipped)
}

// tune resets the context and the optimizer and takes cfg.Steps steps of
// the marginal entropy over the confident views of fv (V×d, normalised).
func (t *TPT) tune(fv *mat.Dense) (tuned, error) {
	t.resetContext()
	var out tuned
	var kept []int
	for step := range t.cfg.Steps {
		node, text, err := t.textNode()
		if err != nil {
			return tuned{}, err
		}
		logits := feature.Logits(fv, text, t.scale)
		if kept == nil { // chosen once, with the initial context
			sel, err := feature.SelectConfident(logits, t.cfg.Rho)
			if err != nil {
				return tuned{}, fmt.Errorf("tta: tpt: %w", err)
			}
			kept = sel.Kept
		}
		me, err := feature.MarginalEntropy(logits, kept)
		if err != nil {
			return tuned{}, fmt.Errorf("tta: tpt: %w", err)
		}
		if step == 0 {
			out.loss = me.Loss
		}
		// ∂L/∂T̂ = scale·(∂L/∂logits)ᵀ·F̂, injected on the normalised text
		// features and carried through the text tower to the context.
		var g mat.Dense
		g.Mul(me.DLdLogits.T(), fv)
		g.Scale(t.scale, &g)
		if err := t.backwardText(node, &g); err != nil {
			return tuned{}, err
		}
		if out.stepped, err = t.opt.step(t.ctx); err != nil {
			return tuned{}, fmt.Errorf("tta: tpt: %w", err)
		}
	}
	return out, nil
}

// textNode encodes the class prompts with the current context on a tape
// and returns the normalised features' node and value (C×d).
func (t *TPT) textNode() (smat.Tensor, *mat.Dense, error) {
	t.ctx.ZeroGrad()
	raw, err := t.tm.PromptFeatures(t.prompts, t.ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tta: tpt: %w", err)
	}
	node := autograd.L2Normalize(raw)
	s := node.Value().Shape()
	return node, mat.NewDense(s[0], s[1], append([]float64(nil), node.Value().Data().F64()...)), nil
}

// textFeatures returns the normalised class features of the current
// context (C×d), without keeping a tape.
func (t *TPT) textFeatures() (*mat.Dense, error) {
	t.ctx.SetRequiresGrad(false)
	defer t.ctx.SetRequiresGrad(true)
	_, text, err := t.textNode()
	return text, err
}

// backwardText injects g (∂L/∂T̂, C×d) on the normalised text node and runs
// the tape backward to the context.
func (t *TPT) backwardText(node smat.Tensor, g *mat.Dense) error {
	if err := injectGrad(node, g, t.f64); err != nil {
		return fmt.Errorf("tta: tpt: backward: %w", err)
	}
	return nil
}

// contextOptimizer steps a context matrix in place with an optimizer of
// package optim in the matrix's element type.
type contextOptimizer interface {
	step(ctx smat.Matrix) (bool, error)
	reset(init smat.Matrix) // the initial values and a fresh state
}

func newContextOptimizer(ctx smat.Matrix, cfg optim.Config) (contextOptimizer, error) {
	switch ctx.(type) {
	case *smat.Dense[float32]:
		return newCtxOpt[float32](ctx, cfg)
	case *smat.Dense[float64]:
		return newCtxOpt[float64](ctx, cfg)
	}
	return nil, fmt.Errorf("context of type %T", ctx)
}

type ctxOpt[T float.DType] struct {
	param optim.Param[T]
	opt   optim.Optimizer[T]
}

func newCtxOpt[T float.DType](ctx smat.Matrix, cfg optim.Config) (*ctxOpt[T], error) {
	opt, err := optim.New[T](cfg)
	if err != nil {
		return nil, err
	}
	// Data of a Dense of the same element type shares its backing array:
	// the optimizer writes the context in place.
	return &ctxOpt[T]{param: optim.Param[T]{Name: "ctx", Value: float.SliceValueOf[T](ctx.Data())}, opt: opt}, nil
}

func (o *ctxOpt[T]) step(ctx smat.Matrix) (bool, error) {
	o.param.Grad = nil
	if ctx.HasGrad() {
		o.param.Grad = float.SliceValueOf[T](ctx.Grad().Value().Data())
	}
	return o.opt.Step([]optim.Param[T]{o.param})
}

func (o *ctxOpt[T]) reset(init smat.Matrix) {
	copy(o.param.Value, float.SliceValueOf[T](init.Data()))
	o.opt.Reset()
}
