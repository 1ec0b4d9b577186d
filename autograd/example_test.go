package autograd_test

import (
	"fmt"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
)

func matrix(rows, cols int, v ...float32) *smat.Dense[float32] {
	return smat.NewDense[float32](smat.WithShape(rows, cols), smat.WithBacking(v))
}

// A LayerNorm with trainable parameters, a frozen linear classifier and the
// mean entropy of its predictions: one step of entropy minimisation.
func Example() {
	x := matrix(2, 3, 1, 2, 4, -1, 0, 3) // two samples, three features
	norm := autograd.NewLayerNormParams(matrix(1, 3, 1, 1, 1), matrix(1, 3, 0, 0, 0), 1e-5)
	norm.SetTrainable(true)
	head := autograd.NewLinearParams(matrix(2, 3, 1, 0, -1, 0.5, 0.5, 0), nil) // frozen

	logits := autograd.Linear(autograd.LayerNorm(x, norm), head)
	loss := autograd.MeanEntropy(logits)
	if err := ag.Backward(loss); err != nil {
		panic(err)
	}
	fmt.Printf("loss %.4f\n", loss.Value().Item().F64())
	fmt.Printf("dγ %.4f\n", norm.Gamma.Grad().Data().F32())
	fmt.Println("x has a gradient:", x.HasGrad())
	// Output:
	// loss 0.4299
	// dγ [-0.1137 0.0366 -0.3006]
	// x has a gradient: false
}
