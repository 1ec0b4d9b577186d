package clip_test

import (
	"fmt"
	"log"
	"os"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
)

// Example classifies an image zero-shot with the built-in model. For an
// OpenAI checkpoint, load it with clip.Load("clip-vit-base-patch32/",
// clip.Options{}) and take the CLIP BPE tokenizer,
// textenc.LoadBPETokenizer("bpe_simple_vocab_16e6.txt.gz").
func Example() {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		log.Fatal(err)
	}
	head, err := m.ZeroShotHead(builtin.Tokenizer(), data.CIFAR10Classes, data.CIFAR10Templates)
	if err != nil {
		log.Fatal(err)
	}

	// An image: the first ship of the embedded CIFAR-10 test images.
	dir, err := os.MkdirTemp("", "clip-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	subset, _, err := builtin.Extract(dir)
	if err != nil {
		log.Fatal(err)
	}
	ds, err := data.OpenFolder(subset, data.FolderOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer ds.Close()
	img, _, err := ds.Item(8 * 200) // 200 images per class, ship is class 8
	if err != nil {
		log.Fatal(err)
	}

	pre := data.NewCLIPPreprocessor(m.Config.Vision.ImageSize) // Pillow-exact resize and crop
	px, err := pre.Transform(nil, img)
	if err != nil {
		log.Fatal(err)
	}
	f, err := m.EncodeImage(px, 1)
	if err != nil {
		log.Fatal(err)
	}
	probs := clip.Softmax(m.Classify(head, f))[0]
	best := 0
	for i, p := range probs {
		if p > probs[best] {
			best = i
		}
	}
	fmt.Println(head.Classes[best])
	// Output: ship
}
