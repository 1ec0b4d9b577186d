package data_test

import (
	"bytes"
	"image/jpeg"
	"reflect"
	"testing"

	"github.com/subtta/subtta/data/jpegdec"
)

// TestJPEGDecImageNetC checks that data/jpegdec decodes ImageNet-C's
// JPEGs (corrupt.EncodeImageNetC's, clean and with gaussian_noise) to
// image/jpeg's image.
func TestJPEGDecImageNetC(t *testing.T) {
	for _, noise := range []bool{false, true} {
		for i, b := range imageNetJPEGs(t, 12, noise) {
			got, err := jpegdec.Decode(b)
			if err != nil {
				t.Fatalf("noise=%v %d: %v", noise, i, err)
			}
			want, err := jpeg.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("noise=%v %d: image differs from image/jpeg's", noise, i)
			}
		}
	}
}

// BenchmarkDecodeJPEGImageNet times decoding alone, data/jpegdec against
// image/jpeg, on the JPEGs of BenchmarkDecodePreprocessImageNet.
//
//	go test -run '^$' -bench DecodeJPEGImageNet ./data
func BenchmarkDecodeJPEGImageNet(b *testing.B) {
	for _, kind := range []struct {
		name  string
		noise bool
	}{{"clean", false}, {"gaussian_noise-5", true}} {
		imgs := imageNetJPEGs(b, 16, kind.noise)
		b.Run(kind.name+"/jpegdec", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := jpegdec.Decode(imgs[i%len(imgs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(kind.name+"/image-jpeg", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := jpeg.Decode(bytes.NewReader(imgs[i%len(imgs)])); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
