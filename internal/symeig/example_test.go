package symeig_test

import (
	"fmt"

	"github.com/subtta/subtta/internal/symeig"
	"gonum.org/v1/gonum/mat"
)

// The eigenvalues of [[2, 1], [1, 2]] are 1 and 3, with eigenvectors along
// (1, −1) and (1, 1); each row of Vectors is one eigenvector.
func ExampleFactorize() {
	a := mat.NewSymDense(2, []float64{2, 1, 1, 2})
	dec, err := symeig.Factorize(a)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, v := range dec.Values {
		row := dec.Vectors.RawRowView(i)
		if row[0] < 0 { // an eigenvector's sign is arbitrary
			row[0], row[1] = -row[0], -row[1]
		}
		fmt.Printf("λ = %.3f, v = [%.3f %.3f]\n", v, row[0], row[1])
	}
	// Output:
	// λ = 1.000, v = [0.707 -0.707]
	// λ = 3.000, v = [0.707 0.707]
}
