//go:build unix

package vit

import (
	"math/rand/v2"
	"syscall"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// processCPU is the CPU time the process has used, in seconds, all threads.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkForwardPrecision times the ViT-B/32 forward pass (random
// weights, batch 64) in each precision this CPU has kernels for, and fp32
// and int8 on the AVX2 kernels alone (avx2/…), as on a CPU without
// AVX-512, int8 on the AVX-VNNI kernel where the CPU has it (avxvnni/int8,
// fp32 on AVX2 beside it), and on the AVX512-VNNI kernel where a better
// one (AMX) is the default (avx512vnni/int8), and bf16 on the AVX512_BF16
// kernel where AMX's is the default (avx512bf16/bf16). Besides
// wall time it reports the process's CPU seconds per pass (cpu-s/op),
// which neighbours on a shared machine disturb far less: compare those
// across precisions when the machine is busy.
func BenchmarkForwardPrecision(b *testing.B) {
	cfg := ViTB32()
	m, err := Random(cfg, 1, Options{})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 64
	size := 3 * cfg.Vision.ImageSize * cfg.Vision.ImageSize
	r := rand.New(rand.NewPCG(2, 2))
	px := make([]float32, batch*size)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	images := smat.NewDense[float32](smat.WithShape(batch, size), smat.WithBacking(px))
	type run struct {
		name string
		prec kernel.Precision
		avx2 bool   // the AVX2 kernels (fp32 and int8), as on a CPU without AVX-512
		int8 string // the int8 kernel, when not the best one (with avx2: avx2 unless named)
		bf16 string // the bf16 kernel, when not the best one
	}
	runs := []run{{"fp32", kernel.FP32, false, "", ""}, {"bf16", kernel.BF16, false, "", ""}, {"int8", kernel.Int8, false, "", ""},
		{"avx512vnni/int8", kernel.Int8, false, "avx512vnni", ""}, {"avx512bf16/bf16", kernel.BF16, false, "", "avx512bf16"},
		{"avx2/fp32", kernel.FP32, true, "", ""}, {"avx2/int8", kernel.Int8, true, "avx2", ""}, {"avxvnni/int8", kernel.Int8, true, "avxvnni", ""}}
	for _, c := range runs {
		prec := c.prec
		b.Run(c.name, func(b *testing.B) {
			if err := kernel.CheckPrecision(prec); err != nil {
				b.Skip(err)
			}
			if c.avx2 {
				prev, err := kernel.SetKernel("avx2")
				if err != nil {
					b.Skip(err)
				}
				defer kernel.SetKernel(prev)
				if c.int8 == "" {
					c.int8 = "avx2"
				}
			}
			if c.int8 != "" {
				if c.int8 == kernel.LowKernel(kernel.Int8) && !c.avx2 {
					b.Skip("the best int8 kernel: see int8")
				}
				prev8, err := kernel.SetInt8Kernel(c.int8)
				if err != nil {
					b.Skip(err)
				}
				defer kernel.SetInt8Kernel(prev8)
			}
			if c.bf16 != "" {
				if c.bf16 == kernel.LowKernel(kernel.BF16) {
					b.Skip("the best bf16 kernel: see bf16")
				}
				prev, err := kernel.SetBF16Kernel(c.bf16)
				if err != nil {
					b.Skip(err)
				}
				defer kernel.SetBF16Kernel(prev)
			}
			if err := m.SetPrecision(prec); err != nil {
				b.Fatal(err)
			}
			defer m.SetPrecision(kernel.FP32)
			m.Forward(images, nil) // packs the fp32 weights, fills the pools
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				m.Forward(images, nil)
			}
			b.ReportMetric((processCPU()-cpu0)/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "images/s")
		})
	}
}
