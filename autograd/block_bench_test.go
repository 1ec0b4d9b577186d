package autograd

import (
	"math/rand/v2"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
)

// ViT-B/32 at 224×224: one residual block over a batch of 64 images.
const (
	benchWidth  = 768
	benchHeads  = 12
	benchTokens = 50
	benchBatch  = 64
	benchMLP    = 3072
)

func benchMatrix(rng *rand.Rand, rows, cols int, center, spread float32) *smat.Dense[float32] {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = center + spread*float32(rng.NormFloat64())
	}
	return newMatrix(v, rows, cols)
}

// benchBlock builds the block with frozen float32 Linear weights and
// trainable LayerNorms, and its input (which needs no gradient).
func benchBlock() (*transformerBlock, *smat.Dense[float32]) {
	rng := rand.New(rand.NewPCG(1, 1))
	w := benchWidth
	linear := func(out, in int) *LinearParams {
		return NewLinearParams(benchMatrix(rng, out, in, 0, 0.02), benchMatrix(rng, 1, out, 0, 0.02))
	}
	layerNorm := func() *LayerNormParams {
		p := NewLayerNormParams(benchMatrix(rng, 1, w, 1, 0.1), benchMatrix(rng, 1, w, 0, 0.1), 1e-5)
		p.SetTrainable(true)
		return p
	}
	b := &transformerBlock{
		ln1: layerNorm(), inProj: linear(3*w, w), outProj: linear(w, w),
		ln2: layerNorm(), fc: linear(benchMLP, w), proj: linear(w, benchMLP),
		batch: benchBatch, heads: benchHeads,
	}
	return b, benchMatrix(rng, benchBatch*benchTokens, w, 0, 1)
}

// benchFlops counts the multiply-adds of the GEMMs (×2) of one block:
// the four linears, and q·kᵀ and p·v in every head. The backward pass
// (input gradients only) repeats the linears and runs four attention GEMMs.
func benchFlops() (forward, backward float64) {
	rows := float64(benchBatch * benchTokens)
	w, m := float64(benchWidth), float64(benchMLP)
	linears := 2 * rows * (w*3*w + w*w + w*m + m*w)
	n, d := float64(benchTokens), float64(benchWidth/benchHeads)
	attention := 2 * 2 * n * n * d * benchHeads * benchBatch
	return linears + attention, linears + 2*attention
}

// BenchmarkBlockForward and BenchmarkBlockForwardBackward run the block as
// the fused TransformerBlock (what the models use) and as separate ops.
func BenchmarkBlockForward(b *testing.B) {
	for _, fused := range []bool{true, false} {
		b.Run(benchName(fused), func(b *testing.B) {
			blk, x := benchBlock()
			blk.fused = fused
			blk.forward(x) // warm-up: fills the buffer pools
			fwd, _ := benchFlops()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				blk.forward(x)
			}
			b.ReportMetric(fwd*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkBlockForwardBackward(b *testing.B) {
	for _, fused := range []bool{true, false} {
		b.Run(benchName(fused), func(b *testing.B) {
			blk, x := benchBlock()
			blk.fused = fused
			params := append(blk.ln1.Parameters(), blk.ln2.Parameters()...)
			step := func() {
				if err := ag.Backward(Mean(blk.forward(x))); err != nil {
					b.Fatal(err)
				}
				for _, p := range params {
					p.ZeroGrad()
				}
			}
			step() // warm-up: fills the buffer pools
			fwd, bwd := benchFlops()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
			b.ReportMetric((fwd+bwd)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func benchName(fused bool) string {
	if fused {
		return "fused"
	}
	return "ops"
}
