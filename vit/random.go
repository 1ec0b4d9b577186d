package vit

import (
	"math/rand/v2"
	"strings"

	"github.com/subtta/subtta/weights"
)

// ViTB32 is the configuration of CLIP ViT-B/32 (OpenAI's shapes).
func ViTB32() *weights.CLIPConfig {
	return &weights.CLIPConfig{
		EmbedDim:      512,
		Vision:        weights.VisionConfig{Width: 768, Layers: 12, Heads: 12, MLPWidth: 3072, PatchSize: 32, ImageSize: 224},
		Text:          weights.TextConfig{Width: 512, Layers: 12, Heads: 8, MLPWidth: 2048, ContextLength: 77, VocabSize: 49408},
		HasLogitScale: true,
		LayerNormEps:  weights.DefaultLayerNormEps,
		Activation:    "quick_gelu",
	}
}

// Random builds a vision tower of the given configuration with random
// weights (normal, std 0.02; LayerNorms at γ=1, β=0): the real shapes and
// cost without a checkpoint, for benchmarks.
func Random(cfg *weights.CLIPConfig, seed uint64, opt Options) (*Model, error) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := weights.NewState("random")
	n := cfg.TensorNames().Vision
	norms := map[string]float32{} // LayerNorm tensors: γ 1, β 0
	for _, ln := range []weights.LayerNormNames{n.LNPre, n.LNPost} {
		norms[ln.Weight], norms[ln.Bias] = 1, 0
	}
	for _, b := range n.Blocks {
		for _, ln := range []weights.LayerNormNames{b.LN1, b.LN2} {
			norms[ln.Weight], norms[ln.Bias] = 1, 0
		}
	}
	for _, name := range cfg.Names() {
		if !strings.HasPrefix(name, "visual.") {
			continue
		}
		shape, _ := cfg.Shape(name)
		p := &weights.Param{Name: name, Shape: shape, DType: weights.F32}
		n := 1
		for _, d := range shape {
			n *= d
		}
		p.Data = make([]float32, n)
		if v, ok := norms[name]; ok {
			for i := range p.Data {
				p.Data[i] = v
			}
		} else {
			for i := range p.Data {
				p.Data[i] = float32(0.02 * r.NormFloat64())
			}
		}
		s.Set(p)
	}
	return New(s, cfg, opt)
}
