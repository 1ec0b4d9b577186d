package kernel

import (
	"fmt"
	"testing"
)

// packBScalarT is PackB's trans=true packing as it was before the AVX2
// transpose, one strided scalar load per element; kept as the baseline for
// BenchmarkPackB.
func packBScalarT(data []float32, nr, k, n int, b []float32, ldb int) {
	npad := (n + nr - 1) / nr * nr
	for k0 := 0; k0 < k; k0 += kc {
		kb := min(kc, k-k0)
		block := data[k0*npad : k0*npad+kb*npad]
		for j0 := 0; j0 < n; j0 += nr {
			panel := block[j0*kb : (j0+nr)*kb]
			w := min(nr, n-j0)
			for kk := 0; kk < kb; kk++ {
				dst := panel[kk*nr : kk*nr+nr]
				for j := 0; j < w; j++ {
					dst[j] = b[(j0+j)*ldb+k0+kk]
				}
				for j := w; j < nr; j++ {
					dst[j] = 0
				}
			}
		}
	}
}

// BenchmarkPackB packs op(B) = Bᵀ for a ViT-B/32 qkv weight (768×2304) and
// for one attention head's keys (64×50 read from the fused qkv rows,
// ldb = 3·768), with PackB and with the scalar baseline. GB/s counts the
// bytes of op(B) read once.
func BenchmarkPackB(b *testing.B) {
	for _, sh := range []struct {
		name      string
		k, n, ldb int
	}{
		{"weight_k768_n2304", 768, 2304, 768},
		{"keys_k64_n50_ldb2304", 64, 50, 2304},
	} {
		src := make([]float32, (sh.n-1)*sh.ldb+sh.k)
		for i := range src {
			src[i] = float32(i)
		}
		b.Run(fmt.Sprintf("%s/new", sh.name), func(b *testing.B) {
			b.SetBytes(int64(4 * sh.k * sh.n))
			for b.Loop() {
				PackB(true, sh.k, sh.n, src, sh.ldb).Release()
			}
		})
		b.Run(fmt.Sprintf("%s/scalar", sh.name), func(b *testing.B) {
			nr := active.nr
			data := make([]float32, sh.k*((sh.n+nr-1)/nr*nr))
			b.SetBytes(int64(4 * sh.k * sh.n))
			for b.Loop() {
				packBScalarT(data, nr, sh.k, sh.n, src, sh.ldb)
			}
		})
	}
}
