package pretrain

import (
	"fmt"
	"math"

	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// Config is a training run: the model's architecture and every setting that
// changes the result. Its JSON form is stored in each checkpoint, and a
// resumed run must have the same one.
type Config struct {
	Model weights.CLIPConfig `json:"model"`

	Epochs    int    `json:"epochs"`
	BatchSize int    `json:"batch_size"`
	Seed      uint64 `json:"seed"`

	// AdamW: LR is the peak learning rate, reached after WarmupSteps of
	// linear warm-up and followed by a cosine decay to MinLR at the last
	// step. WeightDecay applies to linear and projection weights only.
	LR          float64 `json:"lr"`
	MinLR       float64 `json:"min_lr"`
	WarmupSteps int     `json:"warmup_steps"`
	WeightDecay float64 `json:"weight_decay"`
	Beta2       float64 `json:"beta2"`
	// ClipNorm > 0 scales the gradient down to this global L2 norm.
	ClipNorm float64 `json:"clip_norm"`
	// LabelSmoothing mixes the one-hot targets with the uniform
	// distribution (0: plain cross-entropy).
	LabelSmoothing float64 `json:"label_smoothing"`

	// Augmentation: a random crop with Pad pixels of zero padding, and a
	// horizontal flip.
	Pad  int  `json:"pad"`
	Flip bool `json:"flip"`

	// Classes name the labels; every training step pairs each class with one
	// of Templates ("a photo of a {}.") drawn at random.
	Classes   []string `json:"classes"`
	Templates []string `json:"templates"`
}

// SmallCIFAR returns the architecture of the default model: a ViT on 32×32
// images in 4×4 patches (64 tokens and a class token) and a text tower on
// byte-level tokens (6 and 2 blocks of width 128, 4 heads of 32), joined in
// a 128-wide embedding space.
func SmallCIFAR() weights.CLIPConfig {
	return weights.CLIPConfig{
		EmbedDim:      128,
		Vision:        weights.VisionConfig{Width: 128, Layers: 6, Heads: 4, MLPWidth: 512, PatchSize: 4, ImageSize: 32},
		Text:          weights.TextConfig{Width: 128, Layers: 2, Heads: 4, MLPWidth: 512, ContextLength: 64, VocabSize: textenc.ByteVocabSize},
		HasLogitScale: true,
		LayerNormEps:  weights.DefaultLayerNormEps,
		Activation:    weights.QuickGELU,
	}
}

// DefaultConfig returns the settings the default model was trained with,
// for the given classes and templates.
func DefaultConfig(classes, templates []string) Config {
	return Config{
		Model:          SmallCIFAR(),
		Epochs:         16,
		BatchSize:      128,
		Seed:           1,
		LR:             1e-3,
		MinLR:          1e-5,
		WarmupSteps:    300,
		WeightDecay:    0.05,
		Beta2:          0.99,
		ClipNorm:       1,
		LabelSmoothing: 0.1,
		Pad:            4,
		Flip:           true,
		Classes:        classes,
		Templates:      templates,
	}
}

// Validate reports the first setting that cannot be trained with.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("pretrain: "+format, a...) }
	switch {
	case c.Epochs <= 0:
		return bad("epochs %d: want at least 1", c.Epochs)
	case c.BatchSize <= 0:
		return bad("batch size %d: want at least 1", c.BatchSize)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return bad("learning rate %v: want a positive number", c.LR)
	case !(c.MinLR >= 0 && c.MinLR <= c.LR):
		return bad("minimum learning rate %v: want 0 ≤ min ≤ %v", c.MinLR, c.LR)
	case c.WarmupSteps < 0:
		return bad("warm-up steps %d: want ≥ 0", c.WarmupSteps)
	case !(c.WeightDecay >= 0):
		return bad("weight decay %v: want ≥ 0", c.WeightDecay)
	case !(c.Beta2 > 0 && c.Beta2 < 1):
		return bad("beta2 %v: want 0 < beta2 < 1", c.Beta2)
	case !(c.ClipNorm >= 0):
		return bad("gradient clip norm %v: want ≥ 0", c.ClipNorm)
	case !(c.LabelSmoothing >= 0 && c.LabelSmoothing < 1):
		return bad("label smoothing %v: want 0 ≤ ε < 1", c.LabelSmoothing)
	case c.Pad < 0 || c.Pad >= c.Model.Vision.ImageSize:
		return bad("crop padding %d: want 0 ≤ pad < %d", c.Pad, c.Model.Vision.ImageSize)
	case len(c.Classes) < 2:
		return bad("%d classes: want at least 2", len(c.Classes))
	case len(c.Templates) == 0:
		return bad("no caption templates")
	}
	return checkConfig(&c.Model)
}

// LearningRate returns the learning rate at a step (counted from 0) of a
// run of total steps: linear warm-up to LR, then a cosine to MinLR.
func (c *Config) LearningRate(step, total int) float64 {
	if step < c.WarmupSteps {
		return c.LR * float64(step+1) / float64(c.WarmupSteps)
	}
	span := max(total-c.WarmupSteps, 1)
	t := min(float64(step-c.WarmupSteps)/float64(span), 1)
	return c.MinLR + (c.LR-c.MinLR)*0.5*(1+math.Cos(math.Pi*t))
}
