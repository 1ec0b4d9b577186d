package eval_test

import (
	"context"
	"fmt"
	"log"
	"os"

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
