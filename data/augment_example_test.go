package data_test

import (
	"fmt"
	"log"

	"github.com/subtta/subtta/data"
)

// MEMO's AugMix views of an image, and RoTTA's strong augmentation of a
// batch of [0, 1] images recovered from the model's normalised input.
func ExamplePreprocessor_AugMixViews() {
	img := data.NewRGB(32, 32)
	for i := range img.Pix {
		img.Pix[i] = uint8(i % 251)
	}
	p := data.NewCLIPPreprocessor(64)
	rng := data.ViewRNG(1, "gaussian_noise/5", 0) // seed, domain, image
	views, err := p.AugMixViews(nil, img, 4, rng)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d views of 3x64x64\n", len(views)/p.OutputLen())

	unit, err := p.Unnormalize(nil, views) // back to [0, 1]
	if err != nil {
		log.Fatal(err)
	}
	strong, err := data.StrongAugment(nil, unit, 4, 64, rng)
	if err != nil {
		log.Fatal(err)
	}
	input, err := p.Normalize(nil, strong) // the model's input again
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("strong batch: %d values\n", len(input))
	// Output:
	// 4 views of 3x64x64
	// strong batch: 49152 values
}
