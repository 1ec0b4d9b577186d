package data_test

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log"
	"os"
	"path/filepath"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
)

// Make a small CIFAR-10-C-style folder from a clean image folder (here
// three grey 32×32 images written on the fly), read one domain back, and
// compare it with the same domain corrupted on the fly.
func ExampleWriteCIFARC() {
	dir, err := os.MkdirTemp("", "cifar-c-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for k, name := range []string{"airplane/0000.png", "airplane/0001.png", "cat/0000.png"} {
		img := image.NewGray(image.Rect(0, 0, 32, 32))
		for i := range img.Pix {
			img.Pix[i] = uint8(40*k + i%64)
		}
		img.Set(0, 0, color.Gray{Y: 255})
		var buf bytes.Buffer
		png.Encode(&buf, img)
		p := filepath.Join(dir, "clean", filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, buf.Bytes(), 0o644)
	}
	clean, err := data.OpenFolder(filepath.Join(dir, "clean"), data.FolderOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer clean.Close()

	out := filepath.Join(dir, "clean-c")
	opts := data.WriteOptions{Seed: 1, Progress: func(done, total int) {
		if done == total {
			fmt.Printf("wrote %d images\n", done)
		}
	}}
	if err := data.WriteCIFARC(out, clean, []string{"gaussian_noise", "contrast"}, opts); err != nil {
		log.Fatal(err)
	}

	stored, err := data.OpenCIFARC(out, "gaussian_noise", 5, clean.Classes())
	if err != nil {
		log.Fatal(err)
	}
	defer stored.Close()
	onTheFly, err := data.NewCorrupted(clean, "gaussian_noise", 5, corrupt.Config{Preset: corrupt.CIFAR}, 1)
	if err != nil {
		log.Fatal(err)
	}
	for i := range stored.Len() {
		a, label, _ := stored.Item(i)
		b, _, _ := onTheFly.Item(i)
		fmt.Printf("%s image %d: %dx%d, %s, same as on the fly: %v\n", stored.Name(), i, a.W, a.H, stored.Classes()[label], bytes.Equal(a.Pix, b.Pix))
	}
	// Output:
	// wrote 30 images
	// gaussian_noise/5 image 0: 32x32, airplane, same as on the fly: true
	// gaussian_noise/5 image 1: 32x32, airplane, same as on the fly: true
	// gaussian_noise/5 image 2: 32x32, cat, same as on the fly: true
}
