package clip

import (
	"errors"
	"math"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/weights"
)

// TestReducedPrecisionFeatures encodes the fixture's 17 preprocessed images
// and its prompts with the tiny model's linear layers in bf16 and int8 and
// compares each feature row with float32's: the smallest cosine must reach
// 0.999 for bf16 (8 bits of mantissa in every product's operands) and 0.995
// for int8 (a step of 1/255 of each activation row's range and 1/127 of each
// weight row's). Features of a pass that records gradients, and of float32
// after going back, stay float32's bit for bit.
func TestReducedPrecisionFeatures(t *testing.T) {
	m := tiny(t)
	pre, err := weights.Open(fixture.Path(t, "fixtures/preprocess.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	px, shape, err := pre.Float32("pixel_values")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := weights.Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ids, tshape, err := ref.Int64("text_tokens")
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([][]int, tshape[0])
	for i := range tokens {
		for _, id := range ids[i*tshape[1] : (i+1)*tshape[1]] {
			tokens[i] = append(tokens[i], int(id))
		}
	}
	encode := func() (img, txt []float32) {
		t.Helper()
		f, err := m.EncodeImage(px, shape[0])
		if err != nil {
			t.Fatal(err)
		}
		g, err := m.EncodeText(tokens)
		if err != nil {
			t.Fatal(err)
		}
		return f.Value().Data().F32(), g.Value().Data().F32()
	}
	img32, txt32 := encode()
	dim := m.Config.EmbedDim
	type precCase struct {
		prec   kernel.Precision
		kern   string // the kernel (int8's activations' levels differ between kernels)
		minCos float64
	}
	var cases []precCase
	for _, prec := range []kernel.Precision{kernel.BF16, kernel.Int8} {
		minCos, kernels := 0.999, kernel.BF16Kernels()
		if prec == kernel.Int8 {
			minCos, kernels = 0.995, kernel.Int8Kernels()
		}
		n := len(cases)
		for _, k := range kernels {
			if kernel.LowReference(prec, k) != "" { // an assembly kernel
				cases = append(cases, precCase{prec, k, minCos})
			}
		}
		if len(cases) == n { // none: the case skips, saying why
			cases = append(cases, precCase{prec, "", minCos})
		}
	}
	for _, c := range cases {
		name := c.prec.String()
		if c.kern != "" {
			name += "-" + c.kern
		}
		t.Run(name, func(t *testing.T) {
			if err := kernel.CheckPrecision(c.prec); err != nil {
				t.Skipf("%v (the kernels' Go references are tested in autograd/kernel)", err)
			}
			if c.kern != "" {
				set := kernel.SetInt8Kernel
				if c.prec == kernel.BF16 {
					set = kernel.SetBF16Kernel
				}
				prev, err := set(c.kern)
				if err != nil {
					t.Fatal(err)
				}
				defer set(prev)
			}
			if err := m.SetPrecision(c.prec); err != nil {
				t.Fatal(err)
			}
			img, txt := encode()
			for _, f := range []struct {
				name      string
				got, want []float32
			}{{"image", img, img32}, {"text", txt, txt32}} {
				worst := minRowCosine(f.got, f.want, dim)
				t.Logf("%s features: smallest cosine to fp32 %.6f", f.name, worst)
				if worst < c.minCos {
					t.Errorf("%s features: smallest cosine to fp32 %.6f < %v", f.name, worst, c.minCos)
				}
				if same(f.got, f.want) {
					t.Errorf("%s features equal fp32's bit for bit: the reduced precision did not run", f.name)
				}
			}
			// A pass that records gradients stays float32.
			m.SetVisionTrainable(true)
			f, err := m.EncodeImage(px, shape[0])
			m.SetVisionTrainable(false)
			if err != nil {
				t.Fatal(err)
			}
			if !same(f.Value().Data().F32(), img32) {
				t.Error("a pass with trainable LayerNorms differs from fp32")
			}
			if err := m.SetPrecision(kernel.FP32); err != nil {
				t.Fatal(err)
			}
			img, txt = encode()
			if !same(img, img32) || !same(txt, txt32) {
				t.Error("fp32 after SetPrecision(FP32) differs from fp32 before")
			}
		})
	}
}

func minRowCosine(got, want []float32, dim int) float64 {
	worst := 1.0
	for r := 0; r < len(want)/dim; r++ {
		var dot, ng, nw float64
		for j := r * dim; j < (r+1)*dim; j++ {
			dot += float64(got[j]) * float64(want[j])
			ng += float64(got[j]) * float64(got[j])
			nw += float64(want[j]) * float64(want[j])
		}
		worst = min(worst, dot/math.Sqrt(ng*nw))
	}
	return worst
}

func same(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestPrecisionRefusedOnDevice: reduced precision has CPU kernels only; a
// model does not fall back to fp32 without a word when a device is set,
// whether the device comes before the precision or after it.
func TestPrecisionRefusedOnDevice(t *testing.T) {
	m := tiny(t)
	prec := kernel.Int8
	if err := kernel.CheckPrecision(prec); err != nil {
		prec = kernel.BF16
		if err := kernel.CheckPrecision(prec); err != nil {
			t.Skip("no reduced-precision kernel on this CPU")
		}
	}
	autograd.SetDevice(kernel.Host)
	err := m.SetPrecision(prec)
	autograd.SetDevice(nil)
	if !errors.Is(err, ErrPrecisionOnDevice) || m.Precision() != kernel.FP32 {
		t.Fatalf("SetPrecision(%v) with a device set: err = %v, precision %v; want ErrPrecisionOnDevice and fp32", prec, err, m.Precision())
	}
	if err := m.SetPrecision(prec); err != nil {
		t.Fatal(err)
	}
	defer m.SetPrecision(kernel.FP32)
	autograd.SetDevice(kernel.Host)
	defer autograd.SetDevice(nil)
	size := m.Config.Vision.ImageSize
	if _, err := m.EncodeImage(make([]float32, 3*size*size), 1); !errors.Is(err, ErrPrecisionOnDevice) {
		t.Errorf("EncodeImage in %v with a device set: err = %v, want ErrPrecisionOnDevice", prec, err)
	}
	if _, err := m.EncodeText([][]int{{1, 2}}); !errors.Is(err, ErrPrecisionOnDevice) {
		t.Errorf("EncodeText in %v with a device set: err = %v, want ErrPrecisionOnDevice", prec, err)
	}
}
