package optim_test

import (
	"fmt"
	"log"
	"math"

	"github.com/subtta/subtta/optim"
)

// A Config chooses the optimizer; New builds it for float32 parameters. Each
// Step updates the named vectors in place from their gradients, here those
// of ½‖w − target‖², and State is what a checkpoint saves.
func Example() {
	cfg := optim.AdamW(0.1, 0.01)
	opt, err := optim.New[float32](cfg)
	if err != nil {
		log.Fatal(err)
	}
	target := []float32{0.5, 1.5, 2}
	w := optim.Param[float32]{Name: "ln.weight", Value: []float32{1, 1, 1}, Grad: make([]float32, 3)}
	for range 3 {
		for i, v := range w.Value {
			w.Grad[i] = v - target[i]
		}
		if _, err := opt.Step([]optim.Param[float32]{w}); err != nil {
			log.Fatal(err)
		}
	}
	st := opt.State()[w.Name]
	fmt.Println(cfg)
	// Adam moves each element by about lr a step, whatever the size of its
	// gradient.
	fmt.Println(w.Value, st.Step, len(st.Buffers[optim.BufExpAvg]))
	// Output:
	// AdamW(lr=0.1, wd=0.01)
	// [0.7022583 1.2919238 1.2951412] 3 3
}

// An AdamW step on one named LayerNorm vector; a non-finite gradient skips
// the step.
func ExampleAdam() {
	cfg := optim.DefaultAdamConfig(1e-3)
	cfg.WeightDecay, cfg.Decoupled = 0.01, true
	opt, err := optim.NewAdam[float32](cfg)
	if err != nil {
		log.Fatal(err)
	}
	w := optim.Param[float32]{Name: "visual.ln_post.weight", Value: []float32{1, 1}, Grad: []float32{0.5, -2}}
	stepped, _ := opt.Step([]optim.Param[float32]{w})
	fmt.Println(stepped, w.Value, opt.State()[w.Name].Step)

	w.Grad[0] = float32(math.NaN())
	stepped, _ = opt.Step([]optim.Param[float32]{w})
	fmt.Println(stepped, w.Value, opt.Skipped())
	// Output:
	// true [0.99899 1.00099] 1
	// false [0.99899 1.00099] 1
}
