package tta

import (
	"fmt"
	"sort"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/clip"
)

// Preset is a named configuration from the paper's experiments
// (docs/subtta-spec.md §1.5 and §2): the batch size, the prompt templates of
// the head, and the method's settings.
type Preset struct {
	Dataset   string // "imagenet-c", "cifar10-c", "cifar100-c"
	Method    string // see PresetMethods
	BatchSize int
	// Templates build the head ("{}" is the class name). Single-template
	// presets use the raw class names; MINTTemplates expects underscores
	// replaced by spaces.
	Templates []string
	Optimizer OptimizerConfig
	SubTTA    SubTTAConfig // SubTTA variants
	MINT      MINTConfig   // MINT variants
}

// PresetDatasets and PresetMethods list the names Lookup accepts.
var (
	PresetDatasets = []string{"imagenet-c", "cifar10-c", "cifar100-c"}
	PresetMethods  = []string{"source", "tent", "batclip", "mint", "mint-official",
		"subtta-s", "subtta-t", "subtta-b", "subtta-m"}
)

type datasetHyper struct {
	batch    int
	subtta   OptimizerConfig // [S] cfgs/*/subtta.yaml
	rank     int
	alpha    float64
	entScale float64
	tent     OptimizerConfig
	batclip  OptimizerConfig
	// mintOfficialLR is [M]'s Adam lr; 0 where [M] gives none.
	mintOfficialLR float64
}

var datasetHypers = map[string]datasetHyper{
	"imagenet-c": {
		batch: 64, subtta: AdamW(5e-4, 0.01), rank: 256, alpha: 0.5, entScale: 3,
		tent:    OptimizerConfig{SGD: &SGDConfig{LR: 2.5e-4, Momentum: 0.9, Nesterov: true}},
		batclip: AdamW(5e-4, 0.01), mintOfficialLR: 0.015,
	},
	"cifar10-c": {
		batch: 200, subtta: AdamW(1e-3, 0.01), rank: 256, alpha: 0.1, entScale: 0.05,
		tent: AdamL2(1e-3, 0), batclip: AdamW(1e-3, 0.01),
	},
	"cifar100-c": {
		batch: 200, subtta: AdamL2(5e-4, 0.01), rank: 64, alpha: 0.5, entScale: 0.05,
		tent: AdamL2(1e-3, 0), batclip: AdamL2(5e-4, 0.01), mintOfficialLR: 0.007,
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
//   - source: zero-shot, batches as SubTTA.
func Lookup(dataset, method string) (Preset, error) {
	h, ok := datasetHypers[dataset]
	if !ok {
		return Preset{}, fmt.Errorf("tta: preset: unknown dataset %q (want one of %v)", dataset, PresetDatasets)
	}
	p := Preset{Dataset: dataset, Method: method, BatchSize: h.batch, Templates: []string{"a photo of a {}."}}
	mint := MINTConfig{Optimizer: AdamL2(1e-2, 0.01), Scale: 100, PriorN: 10000}
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
		mint.Optimizer = AdamL2(h.mintOfficialLR, 0)
		p.Optimizer, p.MINT, p.BatchSize = mint.Optimizer, mint, 20
		p.Templates = MINTTemplates
	case "subtta-s", "subtta-t", "subtta-b", "subtta-m":
		loss := map[string]SubTTALoss{"subtta-s": LossSource, "subtta-t": LossTent, "subtta-b": LossBATCLIP, "subtta-m": LossMint}[method]
		p.Optimizer = h.subtta
		p.SubTTA = SubTTAConfig{Subspace: SubspaceOptions{Rank: h.rank}, Alpha: h.alpha, Loss: loss,
			EntropyScale: h.entScale, Optimizer: h.subtta}
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
// built from p.Templates.
func (p Preset) New(m *clip.Model, head mat.Matrix) (Method, error) {
	switch p.Method {
	case "source":
		return NewSource(m, head)
	case "tent":
		return NewTENT(m, head, p.Optimizer)
	case "batclip":
		return NewBATCLIP(m, head, p.Optimizer)
	case "mint", "mint-official":
		return NewMINTMethod(m, head, p.MINT)
	case "subtta-s", "subtta-t", "subtta-b", "subtta-m":
		return NewSubTTA(m, head, p.SubTTA)
	}
	return nil, fmt.Errorf("tta: preset: unknown method %q", p.Method)
}
