package pretrain_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/subtta/subtta/pretrain"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// Example trains a very small CLIP for two epochs on random images and
// reads its log. A real run gives pretrain.LoadImages a dataset (see
// `subtta train`).
func Example() {
	classes := []string{"cat", "dog"}
	cfg := pretrain.DefaultConfig(classes, []string{"a photo of a {}."})
	cfg.Model = weights.CLIPConfig{
		EmbedDim:      8,
		Vision:        weights.VisionConfig{Width: 8, Layers: 1, Heads: 2, MLPWidth: 16, PatchSize: 4, ImageSize: 8},
		Text:          weights.TextConfig{Width: 8, Layers: 1, Heads: 2, MLPWidth: 16, ContextLength: 24, VocabSize: textenc.ByteVocabSize},
		HasLogitScale: true,
		LayerNormEps:  weights.DefaultLayerNormEps,
		Activation:    weights.QuickGELU,
	}
	cfg.Epochs, cfg.BatchSize, cfg.WarmupSteps = 2, 4, 1

	r := rand.New(rand.NewPCG(1, 1))
	images := &pretrain.Images{Size: 8, Classes: classes, Pix: make([]uint8, 16*3*8*8), Labels: make([]int, 16)}
	for i := range images.Pix {
		images.Pix[i] = uint8(r.IntN(256))
	}
	for i := range images.Labels {
		images.Labels[i] = i % 2
	}

	dir, _ := os.MkdirTemp("", "pretrain-example")
	defer os.RemoveAll(dir)
	t, err := pretrain.Run(context.Background(), cfg, images, pretrain.RunOptions{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	log, _ := pretrain.ReadLog(dir + "/" + pretrain.LogFile)
	fmt.Printf("%d steps, %d epochs logged; the model is in %s\n", t.Step, len(log), pretrain.ModelFile)
	// Output: 8 steps, 2 epochs logged; the model is in model.safetensors
}
