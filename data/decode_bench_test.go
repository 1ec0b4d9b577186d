package data_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
)

// imageNetJPEGs returns n different 224×224 JPEGs of ImageNet-C's kind
// (quality 85, as corrupt.EncodeImageNetC stores them): a smooth scene of
// gradients and blobs with fine texture, as is, or with gaussian_noise at
// severity 5, whose JPEGs are about three times larger and slower to
// decode.
func imageNetJPEGs(tb testing.TB, n int, noise bool) [][]byte {
	tb.Helper()
	out := make([][]byte, n)
	for i := range out {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		m := corrupt.NewImage(224, 224)
		var fx, fy, ph [3]float64
		for c := range 3 {
			fx[c], fy[c], ph[c] = r.Float64()*0.1, r.Float64()*0.1, r.Float64()*6
		}
		for y := range 224 {
			for x := range 224 {
				for c := range 3 {
					v := 128 + 70*math.Sin(fx[c]*float64(x)+fy[c]*float64(y)+ph[c]) + 12*r.NormFloat64()
					m.Pix[(y*224+x)*3+c] = uint8(max(0, min(255, v)))
				}
			}
		}
		if noise {
			var err error
			if m, err = corrupt.Apply(m, "gaussian_noise", 5, corrupt.Config{Preset: corrupt.ImageNet}, corrupt.NewPCG(uint64(i), 1)); err != nil {
				tb.Fatal(err)
			}
		}
		var buf bytes.Buffer
		if err := corrupt.EncodeImageNetC(&buf, m); err != nil {
			tb.Fatal(err)
		}
		out[i] = buf.Bytes()
	}
	return out
}

// BenchmarkDecodePreprocessImageNet times what `subtta eval` does to every
// image of an ImageNet-C folder before the model sees it: decoding a
// 224-pixel JPEG (data.DecodeRGB) and CLIP's preprocessing for a 224-pixel
// model (resize, centre crop, normalisation). "per-core" runs on one
// goroutine: its img/s is one core's rate, which times the host's cores
// bounds the images/s a run can feed the model. "all-cores" runs on
// GOMAXPROCS goroutines.
//
//	go test -run '^$' -bench DecodePreprocessImageNet ./data
func BenchmarkDecodePreprocessImageNet(b *testing.B) {
	pre := data.NewCLIPPreprocessor(224)
	for _, kind := range []struct {
		name  string
		noise bool
	}{{"clean", false}, {"gaussian_noise-5", true}} {
		imgs := imageNetJPEGs(b, 16, kind.noise)
		size := 0
		for _, im := range imgs {
			size += len(im)
		}
		one := func(dst []float32, i int) []float32 {
			m, err := data.DecodeRGB("bench", imgs[i%len(imgs)])
			if err != nil {
				b.Fatal(err)
			}
			if dst, err = pre.Transform(dst, m); err != nil {
				b.Fatal(err)
			}
			return dst
		}
		b.Run(kind.name+"/per-core", func(b *testing.B) {
			dst := make([]float32, pre.OutputLen())
			i := 0
			for b.Loop() {
				dst = one(dst, i)
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
			b.ReportMetric(float64(size/len(imgs))/1024, "KiB/jpeg")
		})
		b.Run(kind.name+"/all-cores", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]float32, pre.OutputLen())
				i := 0
				for pb.Next() {
					dst = one(dst, i)
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
		})
	}
}
