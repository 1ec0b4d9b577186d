package tta

import (
	"fmt"
	"sort"

	smat "github.com/nlpodyssey/spago/mat"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/textenc"
)

// Preset is a named configuration from the paper's experiments
// (docs/method.md, "Presets and protocol"): the batch size, the prompt templates of
// the head, and the method's settings.
type Preset struct {
	Dataset   string // "imagenet-c", "cifar10-c", "cifar100-c"
	Method    string // see PresetMethods
	BatchSize int
	// Templates build the head ("{}" is the class name). Single-template
	// presets use the raw class names; MINTTemplates expects underscores
	// replaced by spaces.
	Templates []string
	// PerTemplateHeads says the method also trains against one head per
	// template (WATT): build one head from each entry of Templates alone,
	// in order, and pass them to New after the ensemble head (Heads does
	// both).
	PerTemplateHeads bool
	Optimizer        optim.Config
	SubTTA           SubTTAConfig // SubTTA variants
	MINT             MINTConfig   // MINT variants
	WATT             WATTConfig   // WATT variants
	TDA              TDAConfig    // TDA
}

// PresetDatasets and PresetMethods list the names Lookup accepts.
var (
	PresetDatasets = []string{"imagenet-c", "cifar10-c", "cifar100-c"}
	PresetMethods  = []string{"source", "tent", "batclip", "mint", "mint-official",
		"subtta-s", "subtta-t", "subtta-b", "subtta-m", "watt-s", "watt-lite", "tda"}
)

type datasetHyper struct {
	batch    int
	subtta   optim.Config // [S] cfgs/*/subtta.yaml
	rank     int
	alpha    float64
	entScale float64
	tent     optim.Config
	batclip  optim.Config
	// mintOfficialLR is [M]'s Adam lr; 0 where [M] gives none.
	mintOfficialLR float64
}

var datasetHypers = map[string]datasetHyper{
	"imagenet-c": {
		batch: 64, subtta: optim.AdamW(5e-4, 0.01), rank: 256, alpha: 0.5, entScale: 3,
		tent:    optim.Config{SGD: &optim.SGDConfig{LR: 2.5e-4, Momentum: 0.9, Nesterov: true}},
		batclip: optim.AdamW(5e-4, 0.01), mintOfficialLR: 0.015,
	},
	"cifar10-c": {
		batch: 200, subtta: optim.AdamW(1e-3, 0.01), rank: 256, alpha: 0.1, entScale: 0.05,
		tent: optim.AdamL2(1e-3, 0), batclip: optim.AdamW(1e-3, 0.01),
	},
	"cifar100-c": {
		batch: 200, subtta: optim.AdamL2(5e-4, 0.01), rank: 64, alpha: 0.5, entScale: 0.05,
		tent: optim.AdamL2(1e-3, 0), batclip: optim.AdamL2(5e-4, 0.01), mintOfficialLR: 0.007,
	},
}

// Lookup returns the preset for a dataset and method:
//
//   - subtta-{s,t,b,m}: SubTTA with the Source/TENT/BATCLIP/MINT second
//     step; ImageNet-C AdamW(5e-4, wd 0.01), batch 64, R 256, α 0.5;
//     CIFAR-10-C AdamW(1e-3, 0.01), 200, R 256 (r = 9; see
//     SubspaceOptions.KeepNullDirections), α 0.1; CIFAR-100-C Adam(5e-4, L2
//     0.01), 200, R 64, α 0.5. ENT_SCALE 3 (ImageNet) or 0.05 (CIFAR).
//   - tent: SGD(2.5e-4, momentum 0.9, Nesterov), batch 64 on ImageNet-C;
//     Adam(1e-3), batch 200 on CIFAR.
//   - batclip: the official BATCLIP optimizers (as for SubTTA but
//     CIFAR-100-C Adam with L2 0.01), batches as SubTTA.
//   - mint: the SubTTA repo's MINT: Adam(1e-2, L2 0.01), batches as SubTTA,
//     one template, scale 100, N0 10000.
//   - mint-official: [M]: Adam(0.015 on ImageNet-C, 0.007 on CIFAR-100-C, no
//     weight decay), batch 20, the seven MINTTemplates. [M] gives no
//     CIFAR-10-C setting, so there is none.
//   - watt-s: WATT-S ([W] README and bash/watt_s): Adam(1e-3), batch 128,
//     the eight WATTTemplates (one training head each; the evaluation head
//     is their ensemble), L = 2 steps per template, M = 5 rounds. [W] has
//     no ImageNet-C setting; the same one is used.
//   - watt-lite: WATT-S with L = 1, M = 2 (our choice, docs/method.md): 16 steps
//     per batch instead of 80.
//   - tda: DefaultTDAConfig ([T] configs/imagenet.yaml, the only
//     ImageNet-family setting; [T] has none for CIFAR), scale 100, batch 1
//     as in the official code. TDA gives the same predictions at any
//     batch size, so a larger one only saves time. Head "a photo of a {}."
//     like the other SubTTA-repo presets; [T]'s own ImageNet head is the
//     MINTTemplates ensemble.
//   - source: zero-shot, batches as SubTTA.
func Lookup(dataset, method string) (Preset, error) {
	h, ok := datasetHypers[dataset]
	if !ok {
		return Preset{}, fmt.Errorf("tta: preset: unknown dataset %q (want one of %v)", dataset, PresetDatasets)
	}
	p := Preset{Dataset: dataset, Method: method, BatchSize: h.batch, Templates: []string{"a photo of a {}."}}
	mint := MINTConfig{Optimizer: optim.AdamL2(1e-2, 0.01), Scale: 100, PriorN: 10000}
	switch method {
	case "source":
	case "tent":
		p.Optimizer = h.tent
	case "batclip":
		p.Optimizer = h.batclip
	case "mint":
		p.Optimizer, p.MINT = mint.Optimizer, mint
	case "mint-official":
		if h.mintOfficialLR == 0 {
			return Preset{}, fmt.Errorf("tta: preset: the official MINT code has no %s setting", dataset)
		}
		mint.Optimizer = optim.AdamL2(h.mintOfficialLR, 0)
		p.Optimizer, p.MINT, p.BatchSize = mint.Optimizer, mint, 20
		p.Templates = MINTTemplates
	case "subtta-s", "subtta-t", "subtta-b", "subtta-m":
		loss := map[string]SubTTALoss{"subtta-s": LossSource, "subtta-t": LossTent, "subtta-b": LossBATCLIP, "subtta-m": LossMint}[method]
		p.Optimizer = h.subtta
		p.SubTTA = SubTTAConfig{Subspace: SubspaceOptions{Rank: h.rank}, Alpha: h.alpha, Loss: loss,
			EntropyScale: h.entScale, Optimizer: h.subtta}
	case "watt-s", "watt-lite":
		p.Optimizer, p.BatchSize = optim.AdamL2(1e-3, 0), 128
		p.Templates, p.PerTemplateHeads = WATTTemplates, true
		p.WATT = WATTConfig{Optimizer: p.Optimizer, Steps: 2, Rounds: 5, Name: method}
		if method == "watt-lite" {
			p.WATT.Steps, p.WATT.Rounds = 1, 2
		}
	case "tda":
		p.BatchSize, p.TDA = 1, DefaultTDAConfig()
	default:
		return Preset{}, fmt.Errorf("tta: preset: unknown method %q (want one of %v)", method, PresetMethods)
	}
	return p, nil
}

// Presets lists every dataset/method pair Lookup accepts, sorted.
func Presets() []Preset {
	var out []Preset
	for _, d := range PresetDatasets {
		for _, m := range PresetMethods {
			if p, err := Lookup(d, m); err == nil {
				out = append(out, p)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Dataset < out[j].Dataset })
	return out
}

// New builds the preset's Method on a model with a head (C×d, unit rows)
// built from p.Templates. With PerTemplateHeads, templateHeads are the
// heads of each template alone, in the order of p.Templates.
func (p Preset) New(m Model, head mat.Matrix, templateHeads ...mat.Matrix) (Method, error) {
	if p.PerTemplateHeads && len(templateHeads) != len(p.Templates) {
		return nil, fmt.Errorf("tta: preset %s: %d template heads for %d templates", p.Method, len(templateHeads), len(p.Templates))
	}
	switch p.Method {
	case "source":
		return NewSource(m, head)
	case "tent":
		return NewTENT(m, head, p.Optimizer)
	case "batclip":
		return NewBATCLIP(m, head, p.Optimizer)
	case "mint", "mint-official":
		return NewMINT(m, head, p.MINT)
	case "subtta-s", "subtta-t", "subtta-b", "subtta-m":
		return NewSubTTA(m, head, p.SubTTA)
	case "watt-s", "watt-lite":
		return NewWATT(m, head, templateHeads, p.WATT)
	case "tda":
		return NewTDA(m, head, p.TDA)
	}
	return nil, fmt.Errorf("tta: preset: unknown method %q", p.Method)
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
// them to New. Class names are used as given; replace underscores first
// where the preset asks for it (MINTTemplates).
func (p Preset) Heads(m HeadEncoder, tok textenc.Tokenizer, classes []string) (head *mat.Dense, templateHeads []mat.Matrix, err error) {
	w, err := m.ZeroShotWeights(tok, classes, p.Templates)
	if err != nil {
		return nil, nil, fmt.Errorf("tta: preset %s: %w", p.Method, err)
	}
	head = HeadMatrix(w)
	if !p.PerTemplateHeads {
		return head, nil, nil
	}
	for _, tmpl := range p.Templates {
		w, err := m.ZeroShotWeights(tok, classes, []string{tmpl})
		if err != nil {
			return nil, nil, fmt.Errorf("tta: preset %s: %w", p.Method, err)
		}
		templateHeads = append(templateHeads, HeadMatrix(w))
	}
	return head, templateHeads, nil
}
