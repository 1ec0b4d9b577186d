package kernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// vitPassShapes are the products of one ViT-B/32 pass at a batch of b
// images (50 tokens each, 49 patches): the patch embedding, the four linear
// layers of a block forward (C = A·Wᵀ, W packed once), and the products of
// the input gradient backward (dX = dY·W, W packed untransposed).
func vitPassShapes(b int) []struct {
	name    string
	m, k, n int
	trans   bool
} {
	t := 50 * b
	return []struct {
		name    string
		m, k, n int
		trans   bool
	}{
		{"patch", 49 * b, 3072, 768, true},
		{"qkv", t, 768, 2304, true},
		{"out", t, 768, 768, true},
		{"fc", t, 768, 3072, true},
		{"proj", t, 3072, 768, true},
		{"dqkv", t, 2304, 768, false},
		{"dfc", t, 3072, 768, false},
		{"dproj", t, 768, 3072, false},
	}
}

// BenchmarkGemmViT times every product of a ViT-B/32 pass at batch 16 and
// 64 with the micro-kernel in use, as the model calls it (GemmPacked on a
// weight packed once), and the attention products of one layer (Q·Kᵀ and
// P·V per image and head, on the calling goroutine, heads split over the
// threads): the shapes where a pass can lose against the kernel's rate.
func BenchmarkGemmViT(b *testing.B) {
	for _, batch := range []int{16, 64} {
		for _, s := range vitPassShapes(batch) {
			b.Run(fmt.Sprintf("b%d/%s/M%d_K%d_N%d", batch, s.name, s.m, s.k, s.n), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 1))
				a := randSlice(r, s.m*s.k)
				w := randSlice(r, s.n*s.k)
				c := make([]float32, s.m*s.n)
				ldw := s.k
				if !s.trans {
					ldw = s.n
				}
				p := PackBToKeep(s.trans, s.k, s.n, w, ldw)
				GemmPacked(false, s.m, 1, a, s.k, p, 0, c, s.n)
				reportGFLOPS(b, 2*float64(s.m)*float64(s.k)*float64(s.n), func() { GemmPacked(false, s.m, 1, a, s.k, p, 0, c, s.n) })
			})
		}
		b.Run(fmt.Sprintf("b%d/attention", batch), func(b *testing.B) {
			const t, w, h = 50, 768, 12
			d := w / h
			r := rand.New(rand.NewPCG(1, 1))
			qkv := randSlice(r, batch*t*3*w)
			out := make([]float32, batch*t*w)
			run := func() {
				ParallelFor(batch*h, func(lo, hi int) {
					p := make([]float32, t*t)
					for i := lo; i < hi; i++ {
						im, hd := i/h, i%h
						base := im*t*3*w + hd*d
						GemmBatched(false, true, 1, t, t, d, 0.125, qkv[base:], 3*w, 0, qkv[base+w:], 3*w, 0, 0, p, t, 0)
						GemmBatched(false, false, 1, t, d, t, 1, p, t, 0, qkv[base+2*w:], 3*w, 0, 0, out[im*t*w+hd*d:], w, 0)
					}
				})
			}
			run()
			reportGFLOPS(b, 4*float64(batch*h*t*t*d), run)
		})
	}
}

// reportGFLOPS times b.N runs of fn, which does flops floating-point
// operations, and reports GFLOP/s of wall time and, where the process's CPU
// time can be read, GFLOP per CPU second divided by the threads
// (GFLOP/cpu-s): the rate of a core while it runs the product, which time
// slices lent to other processes on a shared machine do not lower (idle
// waits at the end of a parallel product, which wall time counts, it does
// not either). Compare it with BenchmarkPeakFMA's.
func reportGFLOPS(b *testing.B, flops float64, fn func()) {
	b.ResetTimer()
	cpu0 := processCPUSeconds()
	for i := 0; i < b.N; i++ {
		fn()
	}
	cpu := processCPUSeconds() - cpu0
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu0 >= 0 && cpu > 0 {
		b.ReportMetric(flops*float64(b.N)/cpu/1e9*float64(Threads()), "GFLOP/cpu-s")
	}
}
