package kernel

import (
	"fmt"
	"math/rand/v2"
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
		for _, s := range vitB32Shapes {
			b.Run(fmt.Sprintf("%v/M%d_K%d_N%d", prec, s.m, s.k, s.n), func(b *testing.B) {
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
