package feature_test

import (
	"fmt"
	"log"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta/feature"
)

// ECALP on a stream of three images over three classes: each Step adds one
// image to the graph and predicts it by label propagation.
func ExampleECALPGraph() {
	text, _ := feature.NormalizeRows(mat.NewDense(3, 3, []float64{
		1, 0.1, 0,
		0, 1, 0.1,
		0.1, 0, 1,
	}))
	g, err := feature.NewECALPGraph(text, feature.DefaultECALPConfig())
	if err != nil {
		log.Fatal(err)
	}
	stream, _ := feature.NormalizeRows(mat.NewDense(3, 3, []float64{
		0.9, 0.2, 0.1,
		0.1, 0.8, 0.3,
		0.8, 0.3, 0.2,
	}))
	for i := range 3 {
		res, err := g.Step(stream.RawRowView(i))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("image", i, "class", res.Pred)
	}
	// Output:
	// image 0 class 0
	// image 1 class 1
	// image 2 class 0
}

// RoTTA's memory holds a balanced set of recent, confident samples; its
// items' ages set their weights in the update's loss.
func ExampleRoTTAMemory() {
	mem, err := feature.NewRoTTAMemory[string](feature.RoTTAMemoryConfig{Capacity: 2, Classes: 2, LambdaT: 1, LambdaU: 1})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range []struct {
		name  string
		class int
		u     float64
	}{{"a", 0, 0.6}, {"b", 1, 0.3}, {"c", 0, 0.1}} {
		kept, err := mem.Add(s.name, s.class, s.u)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(s.name, "kept:", kept)
	}
	for i, it := range mem.Items() {
		fmt.Printf("%s class %d age %d weight %.4f\n", it.Data, it.Class, it.Age, feature.TimelinessWeights(mem.Ages())[i])
	}
	// Output:
	// a kept: true
	// b kept: true
	// c kept: true
	// c class 0 age 1 weight 0.3775
	// b class 1 age 2 weight 0.2689
}
