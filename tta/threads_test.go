package tta_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/tta"
)

// TestStepsIndependentOfThreads steps methods that train the LayerNorms on
// the built-in model with 1, 2 and 3 threads, and with each vector GEMM
// kernel this CPU has (AVX-512, AVX2), and requires the same logits bit for
// bit: an eval on one x86-64 machine with AVX2 reproduces the numbers of
// another, whatever their core counts. The batch is large enough that the
// LayerNorms' backward splits its rows (the reduction that once followed
// the thread count). The pure-Go kernel, without FMA, rounds differently.
func TestStepsIndependentOfThreads(t *testing.T) {
	if testing.Short() {
		t.Skip("steps the built-in model several times")
	}
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	rng := rand.New(rand.NewPCG(3, 4))
	size := m.Config.Vision.ImageSize
	var batches [][]float32
	for range 2 {
		px := make([]float32, n*3*size*size)
		for i := range px {
			px[i] = float32(rng.NormFloat64())
		}
		batches = append(batches, px)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, name := range []string{"tent", "batclip", "subtta-m"} {
		t.Run(name, func(t *testing.T) {
			p, err := tta.Lookup("cifar10-c", name)
			if err != nil {
				t.Fatal(err)
			}
			heads, err := p.Heads(m, builtin.Tokenizer(), data.CIFAR10Classes)
			if err != nil {
				t.Fatal(err)
			}
			run := func(threads int) []float64 {
				runtime.GOMAXPROCS(threads)
				meth, err := p.New(m, heads)
				if err != nil {
					t.Fatal(err)
				}
				defer meth.Reset()
				var logits []float64
				for _, px := range batches {
					res, err := meth.Step(px, n)
					if err != nil {
						t.Fatal(err)
					}
					logits = append(logits, res.Logits.RawMatrix().Data...)
				}
				return logits
			}
			same := func(a, b []float64) bool {
				return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
			}
			want := run(1)
			for _, threads := range []int{2, 3} {
				if !same(run(threads), want) {
					t.Errorf("%d threads: logits differ from one thread's", threads)
				}
			}
			defer kernel.SetKernel(kernel.Kernel())
			for _, k := range kernel.Kernels() {
				if k == "go" {
					continue
				}
				if _, err := kernel.SetKernel(k); err != nil {
					t.Fatal(err)
				}
				if !same(run(2), want) {
					t.Errorf("GEMM kernel %s: logits differ from %s's", k, kernel.Kernels()[0])
				}
			}
		})
	}
}
