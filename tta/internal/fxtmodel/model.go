// Package fxtmodel loads the fixture model and its test images for the tta
// packages' tests (apart from package fxt, which package feature's tests use
// without importing any model code).
package fxtmodel

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/internal/fxt"
)

// TinyModel loads the fixture model (a fresh copy: Methods write its
// LayerNorm parameters in place).
func TinyModel(tb testing.TB, f64 bool) *clip.Model {
	tb.Helper()
	const rel = "fixtures/clip-tiny.openai.safetensors"
	m, err := clip.Load(fixture.Path(tb, rel), clip.Options{Float64: f64, Config: fixturefile.Config(tb, rel)})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// Pixels returns the preprocessed images of tta_inputs.safetensors
// (pixel_u8 [N,H,W,3], already resized and cropped) in batches of b (a last
// partial batch is left out): float32(u8)/255, then (x−mean)/std in float32
// with tta_inputs.json's mean and std, HWC→CHW, which is what data's CLIP
// preprocessor does to an image of its output size.
func Pixels(tb testing.TB, b int) [][]float32 {
	tb.Helper()
	x := fxt.Open(tb, "fixtures/tta_inputs.safetensors")
	u8, shape, err := x.Uint8("pixel_u8")
	if err != nil {
		tb.Fatal(err)
	}
	if len(shape) != 4 || shape[3] != 3 || shape[1] != shape[2] {
		tb.Fatalf("pixel_u8: shape %v, want [N, S, S, 3]", shape)
	}
	if shape[0] < b {
		tb.Skipf("tta_inputs holds %d images, fewer than a batch of %d", shape[0], b)
	}
	var meta struct{ Mean, Std []float32 }
	if raw, err := os.ReadFile(fixture.Path(tb, "fixtures/tta_inputs.json")); err != nil {
		tb.Fatal(err)
	} else if err := json.Unmarshal(raw, &meta); err != nil {
		tb.Fatalf("tta_inputs.json: %v", err)
	}
	s := shape[1]
	cfg := data.PreprocessConfig{Size: s}
	if len(meta.Mean) == 3 && len(meta.Std) == 3 {
		copy(cfg.Mean[:], meta.Mean)
		copy(cfg.Std[:], meta.Std)
	}
	pre, err := data.NewPreprocessor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]float32
	for k := 0; k < shape[0]/b; k++ {
		imgs := make([]*data.RGB, b)
		for i := range imgs {
			row := k*b + i
			imgs[i] = &data.RGB{W: s, H: s, Pix: u8[row*s*s*3 : (row+1)*s*s*3]}
		}
		px, err := pre.Batch(nil, imgs)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, px)
	}
	return out
}

// Views returns the views of tta2.safetensors' view pool (views.u8
// [N, V, S, S, 3]) preprocessed like Pixels: one slice of V·3·S·S values per
// image, views in order. V is the second dimension.
func Views(tb testing.TB) (views [][]float32, v int) {
	tb.Helper()
	x := fxt.Open(tb, "fixtures/tta2.safetensors")
	u8, shape, err := x.Uint8("views.u8")
	if err != nil {
		tb.Fatal(err)
	}
	if len(shape) != 5 || shape[4] != 3 || shape[2] != shape[3] {
		tb.Fatalf("views.u8: shape %v, want [N, V, S, S, 3]", shape)
	}
	n, v, s := shape[0], shape[1], shape[2]
	pre, err := data.NewPreprocessor(data.PreprocessConfig{Size: s})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		imgs := make([]*data.RGB, v)
		for k := range imgs {
			off := (i*v + k) * s * s * 3
			imgs[k] = &data.RGB{W: s, H: s, Pix: u8[off : off+s*s*3]}
		}
		px, err := pre.Batch(nil, imgs)
		if err != nil {
			tb.Fatal(err)
		}
		views = append(views, px)
	}
	return views, v
}
