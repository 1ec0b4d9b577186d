package feature_test

import (
	"fmt"
	"log"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta/feature"
)

// TPT's loss at the level of logits: keep the confident views of one image
// (int(5·0.4) = 2 of them) and take the marginal entropy of those. The two
// disagree (classes 0 and 1), so H(p̄) is near log 2; the gradient has zero
// rows for the other views.
func ExampleSelectConfident() {
	logits := mat.NewDense(5, 3, []float64{
		2.0, 1.0, 0.0, // view 0, the base view
		4.0, 0.0, 0.0,
		0.5, 0.4, 0.3,
		0.0, 3.0, 0.0,
		1.0, 1.0, 1.0,
	})
	sel, err := feature.SelectConfident(logits, 0.4)
	if err != nil {
		log.Fatal(err)
	}
	m, err := feature.MarginalEntropy(logits, sel.Kept)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("kept %v, discarded %v\n", sel.Kept, sel.Discarded)
	fmt.Printf("H(p̄) %.4f, ∂H/∂z of view 2: %v\n", m.Loss, m.DLdLogits.RawRowView(2))
	// Output:
	// kept [1 3], discarded [0 2 4]
	// H(p̄) 0.8103, ∂H/∂z of view 2: [0 0 0]
}

// ZERO on one image: the kept views vote for their argmax; a 1–1 tie is
// broken by the most confident discarded view that votes a tied class.
func ExampleZeroVote() {
	cos := mat.NewDense(4, 3, []float64{ // cosines with three class embeddings
		0.30, 0.20, 0.10,
		0.10, 0.31, 0.10,
		0.15, 0.22, 0.14,
		0.10, 0.12, 0.11,
	})
	r, err := feature.ZeroVote(cos, 100, 0.5, feature.ZeroFallbackAsCoded)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("kept %v, votes %v, ties %v\n", r.Selection.Kept, r.Votes, r.Ties)
	fmt.Printf("broken by %v %d → class %d, prediction %d\n", r.TieBreak, r.TieView, r.TieClass, r.Pred)
	// Output:
	// kept [1 0], votes [1 1 0], ties [0 1]
	// broken by discarded view 2 → class 1, prediction 1
}
