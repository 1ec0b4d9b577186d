package kernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// vitB32Shapes are the four linear layers of ViT-B/32 at batch 64
// (64 images × 50 tokens = 3200 rows): qkv, out_proj, c_fc, c_proj.
var vitB32Shapes = []struct{ m, k, n int }{
	{3200, 768, 2304},
	{3200, 768, 768},
	{3200, 768, 3072},
	{3200, 3072, 768},
}

// BenchmarkPeakFMA measures the machine's fp32 FMA throughput on all
// threads with register-only code: the ceiling for every GEMM figure below.
func BenchmarkPeakFMA(b *testing.B) {
	if fmaPeak(1) == 0 {
		b.Skip("no AVX2+FMA on this CPU")
	}
	const iters = 1 << 20
	reportGFLOPS(b, float64(Threads()*fmaPeak(1))*iters, func() { fmaPeakAll(iters) })
}

// BenchmarkGemm: C = A·Wᵀ with W packed once, as a frozen Linear layer runs,
// on every micro-kernel this CPU has.
func BenchmarkGemm(b *testing.B) {
	for _, name := range Kernels() {
		for _, s := range vitB32Shapes {
			b.Run(fmt.Sprintf("%s/M%d_K%d_N%d", name, s.m, s.k, s.n), func(b *testing.B) {
				prev, _ := SetKernel(name)
				defer SetKernel(prev)
				if name == "go" && testing.Short() {
					b.Skip("slow")
				}
				r := rand.New(rand.NewPCG(1, 1))
				a := randSlice(r, s.m*s.k)
				w := randSlice(r, s.n*s.k)
				c := make([]float32, s.m*s.n)
				p := PackB(true, s.k, s.n, w, s.k)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					GemmPacked(false, s.m, 1, a, s.k, p, 0, c, s.n)
				}
				b.ReportMetric(2*float64(s.m)*float64(s.k)*float64(s.n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkGemmLayouts covers the unpacked layouts backward passes use:
// dX = dY·W (NN) and dW = dYᵀ·X (TN), on the qkv shape.
func BenchmarkGemmLayouts(b *testing.B) {
	const m, k, n = 3200, 768, 2304
	r := rand.New(rand.NewPCG(1, 1))
	for _, tc := range []struct {
		name   string
		tA, tB bool
	}{{"NN", false, false}, {"NT", false, true}, {"TN", true, false}} {
		b.Run(tc.name, func(b *testing.B) {
			a := randSlice(r, m*k)
			bb := randSlice(r, k*n)
			c := make([]float32, m*n)
			lda, ldb := k, n
			if tc.tA {
				lda = m
			}
			if tc.tB {
				ldb = k
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Gemm(tc.tA, tc.tB, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
			}
			b.ReportMetric(2*float64(m*k*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGemmAttention: the batched products of attention at ViT-B/32,
// batch 64 (768 = 64 images × 12 heads of 50×64 · 64×50).
func BenchmarkGemmAttention(b *testing.B) {
	const batch, t, hd = 768, 50, 64
	r := rand.New(rand.NewPCG(1, 1))
	q := randSlice(r, batch*t*hd)
	k := randSlice(r, batch*t*hd)
	s := make([]float32, batch*t*t)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		GemmBatched(false, true, batch, t, t, hd, 1, q, hd, t*hd, k, hd, t*hd, 0, s, t, t*t)
	}
	b.ReportMetric(2*float64(batch*t*t*hd)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
