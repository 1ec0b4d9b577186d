//go:build unix

package vit

import (
	"math/rand/v2"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/weights"
)

// BenchmarkForwardActivation times the fp32 ViT-B/32 forward pass (random
// weights, batch 64) with OpenAI's QuickGELU and with the exact GELU of
// open_clip's ViT-B-32 and most LAION checkpoints, with the process's CPU
// seconds per pass beside wall time (see BenchmarkForwardPrecision).
//
//	go test -run '^$' -bench ForwardActivation -benchtime 2x ./vit
func BenchmarkForwardActivation(b *testing.B) {
	for _, act := range []string{weights.QuickGELU, weights.GELU} {
		b.Run(act, func(b *testing.B) {
			cfg := ViTB32()
			cfg.Activation = act
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
			m.Forward(images, nil) // packs the weights, fills the pools
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
