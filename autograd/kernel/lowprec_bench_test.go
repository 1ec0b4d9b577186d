package kernel

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkGemmLowPrecision: the ViT-B/32 linear layers at batch 64 in
// each precision (fp32 with the weight packed once, as a frozen layer
// runs), activations quantised or rounded in every call; GFLOP/s counts
// the products' 2·M·N·K whatever their arithmetic.
func BenchmarkGemmLowPrecision(b *testing.B) {
	for _, prec := range []Precision{FP32, BF16, Int8} {
		if err := CheckPrecision(prec); err != nil {
			b.Logf("%v: %v", prec, err)
			continue
		}
		kernels := []string{""}
		switch prec {
		case Int8:
			kernels = slices.DeleteFunc(Int8Kernels(), func(n string) bool { return n == "go" })
		case BF16:
			kernels = bf16Asm()
		}
		for _, kern := range kernels {
			for _, s := range vitB32Shapes {
				b.Run(fmt.Sprintf("%v%s/M%d_K%d_N%d", prec, kernelSuffix(kern), s.m, s.k, s.n), func(b *testing.B) {
					if kern != "" {
						set := SetInt8Kernel
						if prec == BF16 {
							set = SetBF16Kernel
						}
						prev, _ := set(kern)
						defer set(prev)
					}
					r := rand.New(rand.NewPCG(1, 1))
					a := randSlice(r, s.m*s.k)
					w := randSlice(r, s.n*s.k)
					bias := randSlice(r, s.n)
					c := make([]float32, s.m*s.n)
					var run func()
					switch prec {
					case FP32:
						p := PackBToKeep(true, s.k, s.n, w, s.k)
						run = func() { GemmPackedBias(false, s.m, 1, a, s.k, p, bias, c, s.n) }
					case BF16:
						p, _ := PackBF16("w", w, s.n, s.k)
						run = func() { GemmBF16(s.m, a, s.k, p, bias, c, s.n) }
					case Int8:
						p, _ := QuantizeInt8("w", w, s.n, s.k)
						run = func() { GemmInt8(s.m, a, s.k, p, bias, c, s.n) }
					}
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						run()
					}
					b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// kernelSuffix names a kernel in a benchmark's name: "-avx2", or nothing.
func kernelSuffix(kern string) string {
	if kern == "" {
		return ""
	}
	return "-" + kern
}

// BenchmarkQuantizeRowU8: one activation row of ViT-B/32's widths
// quantised with each of the CPU's vector loops (quantVecs), in GB/s of
// float32 input.
func BenchmarkQuantizeRowU8(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	names := map[quantVec]string{quantGo: "go", quantAVX2: "avx2", quantAVX512: "avx512"}
	for _, k := range []int{768, 3072} {
		x := randSlice(r, k)
		dst := make([]uint8, k)
		for _, vec := range quantVecs() {
			b.Run(fmt.Sprintf("k=%d/%s", k, names[vec]), func(b *testing.B) {
				b.SetBytes(int64(4 * k))
				for b.Loop() {
					quantizeRowU8(dst, x, vec, 127)
				}
			})
		}
	}
}
