package vit_test

import (
	"fmt"
	"log"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/vit"
)

// Example runs a small vision tower with random weights on one 32×32
// image. Its input is a matrix of preprocessed pixels, one row of 3·H·W
// values (NCHW) per image; its output one unnormalised feature row per
// image, EmbedDim wide. Its LayerNorms (γ and β of ln_pre, of each block's
// ln_1 and ln_2, and of ln_post) are what test-time adaptation trains.
func Example() {
	cfg := vit.ViTB32()
	cfg.EmbedDim = 16
	cfg.Vision.Width, cfg.Vision.Layers, cfg.Vision.Heads, cfg.Vision.MLPWidth = 64, 2, 2, 256
	cfg.Vision.ImageSize, cfg.Vision.PatchSize = 32, 16
	m, err := vit.Random(cfg, 1, vit.Options{})
	if err != nil {
		log.Fatal(err)
	}
	px := make([]float32, 3*32*32) // a grey image, already normalised
	f := m.Forward(smat.NewDense[float32](smat.WithShape(1, len(px)), smat.WithBacking(px)), nil)
	fmt.Println("features:", f.Value().Shape())
	fmt.Println("LayerNorm tensors adaptation trains:", len(m.LayerNormNames()))
	// Output:
	// features: [1 16]
	// LayerNorm tensors adaptation trains: 12
}
