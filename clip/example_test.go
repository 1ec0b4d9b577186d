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

	pre, err := m.Preprocessor() // Pillow-exact resize and crop
	if err != nil {
		log.Fatal(err)
	}
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

// ExampleCreate builds a model, its tokenizer and its preprocessor in one
// call, as open_clip's create_model_and_transforms and get_tokenizer do,
// and classifies an image zero-shot. builtin.ModelName ("default") names
// the built-in model, which package builtin registers; for an OpenAI
// checkpoint, give its path, with Arch ("ViT-B-32") when it stores no
// architecture and Vocab when its folder holds no vocabulary.
func ExampleCreate() {
	b, err := clip.Create(clip.Spec{Model: builtin.ModelName})
	if err != nil {
		log.Fatal(err)
	}
	tok, err := b.Tokenizer() // the byte-level one: the built-in model's vocabulary
	if err != nil {
		log.Fatal(err)
	}
	head, err := b.Model.ZeroShotHead(tok, data.CIFAR10Classes, data.CIFAR10Templates)
	if err != nil {
		log.Fatal(err)
	}
	jpegs, err := builtin.JPEGs(1) // the first embedded test image, an airplane
	if err != nil {
		log.Fatal(err)
	}
	img, err := data.DecodeRGB("airplane.jpg", jpegs[0])
	if err != nil {
		log.Fatal(err)
	}
	px, err := b.Preprocessor.Transform(nil, img) // Pillow-exact resize and crop
	if err != nil {
		log.Fatal(err)
	}
	f, err := b.Model.EncodeImage(px, 1)
	if err != nil {
		log.Fatal(err)
	}
	probs := clip.Softmax(b.Model.Classify(head, f))[0]
	best := 0
	for i, p := range probs {
		if p > probs[best] {
			best = i
		}
	}
	fmt.Printf("%T, %d×%d images: %s\n", tok, b.Model.Config.Vision.ImageSize, b.Model.Config.Vision.ImageSize, head.Classes[best])
	// Output: textenc.ByteTokenizer, 32×32 images: airplane
}
