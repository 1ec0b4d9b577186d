package data_test

import (
	"fmt"
	"log"

	"github.com/subtta/subtta/data"
)

// Preprocess an image built in memory for a model with 64-pixel inputs.
func ExamplePreprocessor() {
	img := data.NewRGB(120, 80) // 120 wide, 80 high: a horizontal gradient
	for y := 0; y < img.H; y++ {
		for x := 0; x < img.W; x++ {
			i := 3 * (y*img.W + x)
			img.Pix[i], img.Pix[i+1], img.Pix[i+2] = uint8(2*x), 128, 255
		}
	}

	p := data.NewCLIPPreprocessor(64)
	w, h := p.ResizedSize(img.W, img.H)
	fmt.Printf("resized to %dx%d, then cropped to %dx%d\n", w, h, p.Size(), p.Size())

	x, err := p.Transform(nil, img) // CHW float32
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("output: %d values = 3x%dx%d\n", len(x), p.Size(), p.Size())
	fmt.Printf("blue channel: %.4f (= (1-0.40821073)/0.27577711)\n", x[2*64*64])

	batch, err := p.Batch(nil, []*data.RGB{img, img})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("batch: %d values = 2x3x64x64\n", len(batch))
	// Output:
	// resized to 96x64, then cropped to 64x64
	// output: 12288 values = 3x64x64
	// blue channel: 2.1459 (= (1-0.40821073)/0.27577711)
	// batch: 24576 values = 2x3x64x64
}
