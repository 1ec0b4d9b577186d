package pretrain

import (
	"math/rand/v2"
	"testing"
)

// syntheticImages returns n random size×size images of k classes.
func syntheticImages(n, size, k int, seed uint64) *Images {
	r := rand.New(rand.NewPCG(seed, 3))
	s := &Images{Size: size, Pix: make([]uint8, n*3*size*size), Labels: make([]int, n)}
	for i := range s.Pix {
		s.Pix[i] = uint8(r.IntN(256))
	}
	for i := range s.Labels {
		s.Labels[i] = r.IntN(k)
	}
	for i := range k {
		s.Classes = append(s.Classes, string(rune('a'+i))+"class")
	}
	return s
}

// BenchmarkTrainStep times one training step of the default model's
// architecture at its batch size (images/s is reported).
func BenchmarkTrainStep(b *testing.B) {
	classes := syntheticImages(1, 32, 10, 1).Classes
	cfg := DefaultConfig(classes, []string{"a photo of a {}.", "a blurry photo of the {}."})
	set := syntheticImages(4*cfg.BatchSize, 32, 10, 2)
	tr, err := NewTrainer(cfg, set)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tr.TrainStep(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := tr.TrainStep(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*cfg.BatchSize)/b.Elapsed().Seconds(), "images/s")
}

// BenchmarkDataIdentity times Images.Identity on a set of CIFAR-10's
// training size (50,000 images of 32×32): the cost a resume or the first
// checkpoint adds once.
func BenchmarkDataIdentity(b *testing.B) {
	const n, size = 50000, 32
	s := &Images{Size: size, Classes: make([]string, 10), Pix: make([]uint8, n*3*size*size), Labels: make([]int, n)}
	b.SetBytes(int64(len(s.Pix)))
	for b.Loop() {
		s.Identity()
	}
}
