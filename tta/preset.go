package tta

import (
	"fmt"
	"strings"

	smat "github.com/nlpodyssey/spago/mat"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/textenc"
)

// Preset is a method's configuration for a dataset as the paper runs it
// (docs/method.md, "Presets and protocol"): the batch size, the prompt
// templates of the head, the class-name rule and the method's own settings.
// Lookup returns it from the registry; New builds the Method.
type Preset struct {
	Dataset   string // one of PresetDatasets
	Method    string // a registered method's name
	BatchSize int
	// Templates build the head ("{}" is the class name).
	Templates []string
	// SpacedClassNames says the templates expect class names with
	// underscores replaced by spaces (the official MINT code); the others
	// take the names as given. ClassNames applies it.
	SpacedClassNames bool
	// PerTemplateHeads says the method also trains against one head per
	// template (WATT): build one head from each entry of Templates alone,
	// in order, and pass them to New after the ensemble head (Heads does
	// both).
	PerTemplateHeads bool
	// Views is the number of views per image of a multi-view method
	// (MultiView; the paper's count by default, SetViews changes it), 0
	// for a method that sees one view. MinViews is the fewest it works
	// with (a method that keeps the int(V·ρ) most confident views needs
	// V·ρ ≥ 1).
	Views, MinViews int
	// Optimizer updates the visual LayerNorms (unused by methods that train
	// nothing).
	Optimizer optim.Config
	// Config is the method's own configuration (SubTTAConfig, MINTConfig,
	// WATTConfig, TDAConfig), nil for methods that have none beyond
	// Optimizer. A config's own Optimizer field is left zero: New fills
	// it in from Optimizer, the one place a preset keeps it.
	Config any

	// reg is the registration Lookup found for Method.
	reg *Registration
}

// registration returns the registration of the preset's method: the one
// Lookup found, or, for a preset written by hand or whose Method was
// changed, the registry's entry of that name.
func (p Preset) registration() (*Registration, error) {
	if p.reg != nil && p.reg.Name == p.Method {
		return p.reg, nil
	}
	return registered(p.Method)
}

// Cost is the expected cost per image of the preset's method, in forward
// passes of the vision tower (Registration.Cost); 0 for an unknown method.
func (p Preset) Cost() float64 {
	r, err := p.registration()
	if err != nil {
		return 0
	}
	return r.Cost(p)
}

// Carries reports whether the preset's method keeps state through Reset,
// so that its domains depend on the domains before them
// (Registration.Carries).
func (p Preset) Carries() bool {
	r, err := p.registration()
	if err != nil || r.Carries == nil {
		return false
	}
	return r.Carries(p)
}

// Heads are what a preset's method classifies and trains with, built from
// class names by Preset.Heads (or given directly, as a custom head).
type Heads struct {
	// Head is the zero-shot head of p.Templates (C×d, unit rows).
	Head *mat.Dense
	// PerTemplate are the heads of each template alone, in the order of
	// p.Templates, when the preset has PerTemplateHeads (WATT).
	PerTemplate []mat.Matrix
	// Classes (after ClassNames) and Tokenizer made them: a method that
	// encodes prompts of its own (TPT's learnable context) reads them.
	Classes   []string
	Tokenizer textenc.Tokenizer
}

// New builds the preset's Method on a model with its heads.
func (p Preset) New(m Model, h Heads) (Method, error) {
	r, err := p.registration()
	if err != nil {
		return nil, err
	}
	if h.Head == nil {
		return nil, fmt.Errorf("tta: preset %s: no head", p.Method)
	}
	if p.PerTemplateHeads && len(h.PerTemplate) != len(p.Templates) {
		return nil, fmt.Errorf("tta: preset %s: %d template heads for %d templates", p.Method, len(h.PerTemplate), len(p.Templates))
	}
	return r.New(m, p, h)
}

// ForEpisodic returns the preset for the episodic protocol
// (online.Episodic): batch size 1, and whatever else the method changes
// there (Registration.Episodic).
func (p Preset) ForEpisodic() (Preset, error) {
	r, err := p.registration()
	if err != nil {
		return Preset{}, err
	}
	p.BatchSize = 1
	if r.Episodic != nil {
		r.Episodic(&p)
	}
	return p, nil
}

// MinClasses is the fewest classes (labels) the preset's method adapts
// with, and why when more than 2 (Registration.MinClasses).
func (p Preset) MinClasses() (int, string) {
	r, err := p.registration()
	if err != nil || r.MinClasses == nil {
		return 2, ""
	}
	return r.MinClasses(p)
}

// ClassNames returns the class names as the preset's templates expect
// them (see SpacedClassNames).
func (p Preset) ClassNames(classes []string) []string {
	if !p.SpacedClassNames {
		return classes
	}
	out := make([]string, len(classes))
	for i, c := range classes {
		out[i] = strings.ReplaceAll(c, "_", " ")
	}
	return out
}

// HeadKey identifies the heads a preset builds from a set of class names:
// presets with equal keys share them.
func (p Preset) HeadKey() string {
	return fmt.Sprint(p.SpacedClassNames, p.PerTemplateHeads, p.Templates)
}

// HeadEncoder builds zero-shot heads: ZeroShotWeights embeds every class
// name in every template and returns one unit row per class (C×d), the
// normalised mean of the normalised prompt embeddings. *clip.Model
// implements it.
type HeadEncoder interface {
	ZeroShotWeights(tok textenc.Tokenizer, classes, templates []string) (smat.Matrix, error)
}

// Heads builds the preset's heads from the class names: the ensemble head
// of p.Templates and, with PerTemplateHeads, one head per template. Pass
// them to New. The class names are given raw: Heads applies ClassNames.
func (p Preset) Heads(m HeadEncoder, tok textenc.Tokenizer, classes []string) (Heads, error) {
	if m == nil || tok == nil {
		return Heads{}, fmt.Errorf("tta: preset %s: heads need a model and a tokenizer", p.Method)
	}
	classes = p.ClassNames(classes)
	w, err := m.ZeroShotWeights(tok, classes, p.Templates)
	if err != nil {
		return Heads{}, fmt.Errorf("tta: preset %s: %w", p.Method, err)
	}
	h := Heads{Head: HeadMatrix(w), Classes: classes, Tokenizer: tok}
	if !p.PerTemplateHeads {
		return h, nil
	}
	for _, tmpl := range p.Templates {
		w, err := m.ZeroShotWeights(tok, classes, []string{tmpl})
		if err != nil {
			return Heads{}, fmt.Errorf("tta: preset %s: %w", p.Method, err)
		}
		h.PerTemplate = append(h.PerTemplate, HeadMatrix(w))
	}
	return h, nil
}

// configOf returns the preset's method configuration as a C, the type its
// registration fills in.
func configOf[C any](p Preset) (C, error) {
	c, ok := p.Config.(C)
	if !ok {
		return c, fmt.Errorf("tta: preset %s: config %T, want %T", p.Method, p.Config, c)
	}
	return c, nil
}
