package corrupt_test

import (
	"fmt"

	"github.com/subtta/subtta/data/corrupt"
)

func Example() {
	// A 32×32 grey ramp stands in for a CIFAR image.
	img := corrupt.NewImage(32, 32)
	for i := range img.Pix {
		img.Pix[i] = uint8(i / 3 % 32 * 8)
	}

	// Deterministic corruptions need no Source.
	low, err := corrupt.Apply(img, "contrast", 5, corrupt.Config{Preset: corrupt.CIFAR}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("contrast s5, first row:", low.Pix[0], low.Pix[3*31])

	// Random ones draw from a Source; NewSource gives image 7 of a data
	// set generated with seed 1 its own reproducible stream.
	src, err := corrupt.NewSource(1, 7, "gaussian_noise", 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	noisy, err := corrupt.Apply(img, "gaussian_noise", 3, corrupt.Config{Preset: corrupt.CIFAR}, src)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("noisy:", noisy.H, "×", noisy.W)

	inf, _ := corrupt.Lookup("fog")
	fmt.Println("fog is", inf.Group)

	_, err = corrupt.Apply(img, "speckle_noise", 1, corrupt.Config{}, src)
	fmt.Println(err != nil)
	// Output:
	// contrast s5, first row: 105 142
	// noisy: 32 × 32
	// fog is weather
	// true
}
