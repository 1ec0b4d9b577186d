package eval_test

import (
	"fmt"
	"log"

	"github.com/subtta/subtta/eval"
)

// The split of a run over three shards: SubTTA-M carries its covariance
// from one corruption to the next, so its five domains stay together in
// one shard (4.94 forward passes per image each); Source's (1) and TENT's
// (2.03) domains spread over the other two by cost.
func ExampleSplitShards() {
	cfg := eval.Config{
		Dataset:     "cifar10-c",
		Methods:     []string{"source", "tent", "subtta-m"},
		Corruptions: []string{"gaussian_noise", "shot_noise", "fog", "contrast", "jpeg_compression"},
	}
	parts, err := eval.SplitShards(cfg, 3)
	if err != nil {
		log.Fatal(err)
	}
	for i, p := range parts {
		fmt.Printf("shard %d/3: cost %.2f, %d units in %d chains:", i, p.Cost, len(p.Units), p.Chains)
		for _, u := range p.Units {
			fmt.Printf(" %s/%s", u.Method, u.Domain[:3])
		}
		fmt.Println()
	}
	// Output:
	// shard 0/3: cost 24.70, 5 units in 1 chains: subtta-m/gau subtta-m/sho subtta-m/fog subtta-m/con subtta-m/jpe
	// shard 1/3: cost 7.09, 4 units in 4 chains: source/con tent/gau tent/fog tent/jpe
	// shard 2/3: cost 8.06, 6 units in 6 chains: source/gau source/sho source/fog source/jpe tent/sho tent/con
}
