package kernel_test

import (
	"fmt"

	"github.com/subtta/subtta/autograd/kernel"
)

// C = A·B for a 2×3 A and a 3×2 B, all row-major: the leading dimension of
// each matrix is its number of columns.
func ExampleGemm() {
	a := []float32{
		1, 2, 3,
		4, 5, 6,
	}
	b := []float32{
		7, 8,
		9, 10,
		11, 12,
	}
	c := make([]float32, 2*2)
	kernel.Gemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2)
	fmt.Println(c[0:2])
	fmt.Println(c[2:4])
	// Output:
	// [58 64]
	// [139 154]
}

// A linear layer y = x·Wᵀ + b: the weight W, stored [out, in] as PyTorch
// stores it, is packed once and then applied to batch after batch.
func ExampleGemmPackedBias() {
	const in, out = 3, 2
	w := []float32{
		1, 0, -1, // first output: x0 − x2
		1, 1, 1, // second output: x0 + x1 + x2
	}
	bias := []float32{0.5, -1}
	packed := kernel.PackBToKeep(true, in, out, w, in)

	for _, x := range [][]float32{
		{1, 2, 3},
		{4, 5, 6, 1, 1, 1}, // two rows
	} {
		rows := len(x) / in
		y := make([]float32, rows*out)
		kernel.GemmPackedBias(false, rows, 1, x, in, packed, bias, y, out)
		fmt.Println(y)
	}
	// Output:
	// [-1.5 5]
	// [-1.5 14 0.5 2]
}
