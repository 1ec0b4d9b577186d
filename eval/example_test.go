package eval_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/report"
)

// A CIFAR-10-C run of zero-shot CLIP, TENT and SubTTA-M on the official
// .npy files, printing each corruption as it finishes. Running it again with
// the same Out resumes where it stopped.
func ExampleRun() {
	cfg := eval.Config{
		Model:   "clip-vit-base-patch32/",
		Vocab:   "bpe_simple_vocab_16e6.txt.gz",
		Dataset: "cifar10-c",
		Data:    "CIFAR-10-C/",
		Methods: []string{"source", "tent", "subtta-m"},
		Seed:    1, CorruptSeed: 1,
		Out:  "results-cifar10c",
		Plot: true,
	}
	sum, err := eval.Run(context.Background(), cfg, eval.Options{
		AfterDomain: func(r report.Record) { fmt.Printf("%s %s %.2f%%\n", r.Method, r.Domain, r.Accuracy) },
		Log:         os.Stderr,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sum.Computed, "domains computed; tables in", cfg.Out)
}

// A run that needs no files: the built-in model on a few of its embedded
// CIFAR-10 test images, corrupted with Gaussian noise on the fly, printing
// each domain as it is stored. Run a second time with the same Out, it
// finds both domains done and computes nothing.
func Example_builtin() {
	dir, err := os.MkdirTemp("", "eval-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	subset, _, err := builtin.Extract(dir)
	if err != nil {
		log.Fatal(err)
	}
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		log.Fatal(err)
	}
	cfg := eval.Config{
		Model:       builtin.ModelName,
		Dataset:     "cifar10-c",
		Data:        subset,
		Methods:     []string{"source", "subtta-m"},
		Corruptions: []string{"gaussian_noise"},
		Limit:       16,
		Seed:        1, CorruptSeed: 1,
		Out: filepath.Join(dir, "results"),
	}
	opt := eval.Options{
		Model:       m,
		ModelID:     "built-in " + builtin.ModelSHA256(),
		Tokenizer:   builtin.Tokenizer(),
		AfterDomain: func(r report.Record) { fmt.Printf("%s %s: %d images\n", r.Method, r.Domain, r.Samples) },
	}
	for range 2 {
		sum, err := eval.Run(context.Background(), cfg, opt)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("computed %d, resumed %d\n", sum.Computed, sum.Resumed)
	}
	// Output:
	// source gaussian_noise/5: 16 images
	// subtta-m gaussian_noise/5: 16 images
	// computed 2, resumed 0
	// computed 0, resumed 2
}
