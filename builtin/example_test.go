package builtin_test

import (
	"fmt"
	"log"
	"os"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
)

// The built-in model and its tokenizer: the architecture comes with the
// weights, and a prompt is one token per byte between the start and end
// tokens, padded to the text tower's context.
func Example() {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		log.Fatal(err)
	}
	v, t := m.Config.Vision, m.Config.Text
	fmt.Printf("vision: %d×%d images in %d×%d patches, width %d, %d layers\n",
		v.ImageSize, v.ImageSize, v.PatchSize, v.PatchSize, v.Width, v.Layers)
	fmt.Printf("text: width %d, %d layers, context %d\n", t.Width, t.Layers, t.ContextLength)
	fmt.Println("joint embedding:", m.Config.EmbedDim)

	ids, err := builtin.Tokenizer().Tokenize("a ship.", t.ContextLength, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids[:10]) // the start token, "a ship." byte by byte, the end token, padding
	// Output:
	// vision: 32×32 images in 4×4 patches, width 128, 6 layers
	// text: width 128, 2 layers, context 64
	// joint embedding: 128
	// [256 97 32 115 104 105 112 46 258 257]
}

// Extract writes the embedded CIFAR-10 images and frost overlays to disk,
// where `subtta eval` and the data package read them.
func ExampleExtract() {
	dir, err := os.MkdirTemp("", "builtin-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	subset, _, err := builtin.Extract(dir)
	if err != nil {
		log.Fatal(err)
	}
	ds, err := data.OpenFolder(subset, data.FolderOptions{Classes: data.CIFAR10Classes})
	if err != nil {
		log.Fatal(err)
	}
	defer ds.Close()
	fmt.Println(ds.Len(), "images of", ds.Classes())
	// Output: 2000 images of [airplane automobile bird cat deer dog frog horse ship truck]
}
