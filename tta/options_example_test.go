package tta_test

import (
	"fmt"
	"log"

	"github.com/subtta/subtta/tta"
)

// Options change a preset by name, as `subtta eval --set` does; a value
// out of range is refused with the range.
func ExamplePreset_Set() {
	p, err := tta.Lookup("cifar10-c", "subtta-m")
	if err != nil {
		log.Fatal(err)
	}
	for _, kv := range [][2]string{{"rank", "4"}, {"ema", "false"}, {"lr", "5e-4"}} {
		if err := p.Set(kv[0], kv[1]); err != nil {
			log.Fatal(err)
		}
	}
	cfg := p.Config.(tta.SubTTAConfig)
	fmt.Println(cfg.Subspace.Rank, cfg.NoEMA, p.Optimizer)
	fmt.Println(p.Set("alpha", "2"))
	// Output:
	// 4 true AdamW(lr=0.0005, wd=0.01)
	// tta: bad option value: subtta-m.alpha=2: out of range (want a number in [0, 1])
}
