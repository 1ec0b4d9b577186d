package weights_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/subtta/subtta/weights"
)

// Example writes two tensors to an in-memory safetensors file, one of them
// stored as float16, and reads them back.
func Example() {
	var buf bytes.Buffer
	err := weights.Write(&buf, []weights.Tensor{
		{Name: "w", DType: weights.F16, Shape: []int{2, 2}, Data: []float32{1, 0.1, -2, 3}},
		{Name: "step", Shape: []int{}, Data: []int64{7}},
	}, map[string]string{"note": "example"})
	if err != nil {
		log.Fatal(err)
	}
	f, err := weights.Parse("example.safetensors", buf.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	w, shape, err := f.Float32("w")
	if err != nil {
		log.Fatal(err)
	}
	step, _, _ := f.Int64("step")
	info, _ := f.Info("w")
	fmt.Println(f.Names(), f.Metadata["note"])
	fmt.Println(info.DType, shape, w) // 0.1 is rounded to the nearest float16
	fmt.Println(step)
	_, _, err = f.Float32("bias")
	fmt.Println(err)
	// Output:
	// [w step] example
	// F16 [2 2] [1 0.099975586 -2 3]
	// [7]
	// weights: example.safetensors: tensor "bias": tensor not found
}
