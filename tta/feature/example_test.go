package feature_test

import (
	"fmt"
	"log"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta/feature"
)

// One SubTTA batch at the level of features: align the visual covariance
// with the text subspace (the model would back-propagate al.DLdF and step the
// optimizer), then project and take the MINT loss.
func Example() {
	// Four classes in three dimensions, and a batch of five features.
	text, _ := feature.NormalizeRows(mat.NewDense(4, 3, []float64{
		1, 0.2, 0,
		0.1, 1, 0.3,
		0, 0.2, 1,
		0.7, 0.7, 0.1,
	}))
	feats := mat.NewDense(5, 3, []float64{
		0.9, 0.1, 0.2,
		0.8, 0.3, 0.1,
		0.1, 0.9, 0.4,
		0.2, 0.8, 0.3,
		0.3, 0.2, 0.9,
	})

	sub, err := feature.NewTextSubspace(text, feature.SubspaceOptions{Rank: 2})
	if err != nil {
		log.Fatal(err)
	}
	aligner := feature.NewAligner(sub, feature.AlignOptions{Alpha: 0.5})
	al, err := aligner.Update(feats)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("rank %d, L_align %.4f\n", sub.Rank(), al.Loss)

	proj, _ := feature.Project(feats, sub.Projector, 0)
	labels := feature.Argmax(feature.Logits(proj.Z, text, 100))
	loss, dz, _ := feature.BetweenClassScatterLoss(proj.Z, labels)
	dF, _ := proj.Backward(dz)
	r, c := dF.Dims()
	fmt.Printf("pseudo-labels %v, L_mint %.4f, dL/dF %d×%d\n", labels, loss, r, c)
	// Output:
	// rank 2, L_align -1.9101
	// pseudo-labels [2 3 1 1 2], L_mint -0.1918, dL/dF 5×3
}
