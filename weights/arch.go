package weights

import (
	"fmt"
	"slices"
	"strings"
)

// openCLIPArch is one of open_clip's published model configurations, in the
// numbers it states (its JSON's embed_dim, vision_cfg, text_cfg and
// quick_gelu); every one of them uses a 77-token context and the 49,408-token
// vocabulary.
type openCLIPArch struct {
	embed                                int
	imageSize, visionLayers, visionWidth int
	headWidth                            int     // 0: 64
	mlpRatio                             float64 // vision MLP ratio; 0: 4
	patchSize                            int
	textWidth, textHeads, textLayers     int
	quickGELU                            bool
}

// openCLIPArchs are the pure ViT architectures of open_clip (towers a
// checkpoint in OpenAI's layout can have), by open_clip's model name.
// The "-quickgelu" variants are the same towers with OpenAI's activation.
var openCLIPArchs = map[string]openCLIPArch{
	"ViT-M-32":     {embed: 512, imageSize: 224, visionLayers: 12, visionWidth: 512, patchSize: 32, textWidth: 512, textHeads: 8, textLayers: 12},
	"ViT-B-32":     {embed: 512, imageSize: 224, visionLayers: 12, visionWidth: 768, patchSize: 32, textWidth: 512, textHeads: 8, textLayers: 12},
	"ViT-B-32-256": {embed: 512, imageSize: 256, visionLayers: 12, visionWidth: 768, patchSize: 32, textWidth: 512, textHeads: 8, textLayers: 12},
	"ViT-B-16":     {embed: 512, imageSize: 224, visionLayers: 12, visionWidth: 768, patchSize: 16, textWidth: 512, textHeads: 8, textLayers: 12},
	"ViT-L-14":     {embed: 768, imageSize: 224, visionLayers: 24, visionWidth: 1024, patchSize: 14, textWidth: 768, textHeads: 12, textLayers: 12},
	"ViT-L-14-336": {embed: 768, imageSize: 336, visionLayers: 24, visionWidth: 1024, patchSize: 14, textWidth: 768, textHeads: 12, textLayers: 12},
	"ViT-H-14":     {embed: 1024, imageSize: 224, visionLayers: 32, visionWidth: 1280, headWidth: 80, patchSize: 14, textWidth: 1024, textHeads: 16, textLayers: 12},
	"ViT-g-14":     {embed: 1024, imageSize: 224, visionLayers: 40, visionWidth: 1408, headWidth: 88, mlpRatio: 4.3637, patchSize: 14, textWidth: 1024, textHeads: 16, textLayers: 12},
	"ViT-bigG-14":  {embed: 1280, imageSize: 224, visionLayers: 48, visionWidth: 1664, headWidth: 104, mlpRatio: 4.9231, patchSize: 14, textWidth: 1280, textHeads: 20, textLayers: 32},
}

func init() {
	for _, name := range []string{"ViT-B-32", "ViT-B-16", "ViT-L-14", "ViT-L-14-336", "ViT-H-14"} {
		a := openCLIPArchs[name]
		a.quickGELU = true
		openCLIPArchs[name+"-quickgelu"] = a
	}
}

// ArchNames lists the architecture names Arch knows, sorted.
func ArchNames() []string {
	names := make([]string, 0, len(openCLIPArchs))
	for n := range openCLIPArchs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Arch returns the configuration of an open_clip architecture by its model
// name ("ViT-B-16", "ViT-L-14-336-quickgelu", ...), as open_clip's model
// configs state it: for checkpoints that store no configuration and whose
// heads do not follow OpenAI's width/64 rule (ViT-H-14's vision tower has
// 80-wide heads, for instance). HasLogitScale is set, as in every CLIP.
func Arch(name string) (*CLIPConfig, error) {
	a, ok := openCLIPArchs[name]
	if !ok {
		return nil, fmt.Errorf("weights: unknown architecture %q (known: %s)", name, strings.Join(ArchNames(), ", "))
	}
	headWidth, ratio := a.headWidth, a.mlpRatio
	if headWidth == 0 {
		headWidth = DefaultHeadWidth
	}
	if ratio == 0 {
		ratio = 4
	}
	act := GELU
	if a.quickGELU {
		act = QuickGELU
	}
	return &CLIPConfig{
		EmbedDim: a.embed,
		Vision: VisionConfig{Width: a.visionWidth, Layers: a.visionLayers, Heads: a.visionWidth / headWidth,
			MLPWidth: int(float64(a.visionWidth) * ratio), PatchSize: a.patchSize, ImageSize: a.imageSize},
		Text: TextConfig{Width: a.textWidth, Layers: a.textLayers, Heads: a.textHeads,
			MLPWidth: 4 * a.textWidth, ContextLength: 77, VocabSize: 49408},
		HasLogitScale: true,
		LayerNormEps:  DefaultLayerNormEps,
		Activation:    act,
	}, nil
}
