package data

import (
	"math"
	"testing"
)

// chw packs pixels given as (r, g, b) triples into one CHW image.
func chw(px ...[3]float32) []float32 {
	n := len(px)
	out := make([]float32, 3*n)
	for j, p := range px {
		out[j], out[n+j], out[2*n+j] = p[0], p[1], p[2]
	}
	return out
}

// withinTol reports whether got and want agree to tol in every value.
func withinTol(got, want []float32, tol float64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if math.Abs(float64(got[i])-float64(want[i])) > tol {
			return false
		}
	}
	return true
}

// TestColorAdjustments checks torchvision's formulas on one- and
// two-pixel images computed by hand. The tolerance, 1e-6, covers the
// float32 rounding of decimal inputs and of each operation (ulp(1) is
// 1.2e-7, and no result takes more than a few roundings).
func TestColorAdjustments(t *testing.T) {
	const tol = 1e-6
	// Grey of (1, 1, 1) is 0.2989 + 0.587 + 0.114 = 0.9999.
	tests := []struct {
		name string
		op   func([]float32, int, int, float32) error
		f    float32
		in   []float32
		want []float32
	}{
		{"brightness ×1.5", AdjustBrightness, 1.5, chw([3]float32{0.2, 0.5, 0.9}), chw([3]float32{0.3, 0.75, 1})},
		{"brightness ×0.6", AdjustBrightness, 0.6, chw([3]float32{0.2, 0.5, 1}), chw([3]float32{0.12, 0.3, 0.6})},
		// mean grey = (0 + 0.9999)/2; x → 0.5·x + 0.5·0.49995.
		{"contrast ×0.5", AdjustContrast, 0.5, chw([3]float32{0, 0, 0}, [3]float32{1, 1, 1}),
			chw([3]float32{0.249975, 0.249975, 0.249975}, [3]float32{0.749975, 0.749975, 0.749975})},
		// x → 1.3·x − 0.3·0.49995, clamped.
		{"contrast ×1.3", AdjustContrast, 1.3, chw([3]float32{0, 0, 0}, [3]float32{1, 1, 1}),
			chw([3]float32{0, 0, 0}, [3]float32{1, 1, 1})},
		{"contrast ×1.3 inside", AdjustContrast, 1.3, chw([3]float32{0.4, 0.4, 0.4}, [3]float32{0.6, 0.6, 0.6}),
			// mean grey = 0.5·0.9999·(0.4+0.6) = 0.49995; 1.3·0.4 − 0.3·0.49995
			chw([3]float32{0.370015, 0.370015, 0.370015}, [3]float32{0.630015, 0.630015, 0.630015})},
		// Red's grey is 0.2989.
		{"saturation ×0", AdjustSaturation, 0, chw([3]float32{1, 0, 0}), chw([3]float32{0.2989, 0.2989, 0.2989})},
		{"saturation ×0.5", AdjustSaturation, 0.5, chw([3]float32{1, 0, 0}), chw([3]float32{0.64945, 0.14945, 0.14945})},
		{"saturation ×2", AdjustSaturation, 2, chw([3]float32{1, 0, 0}), chw([3]float32{1, 0, 0})},
		{"gamma 0.5", AdjustGamma, 0.5, chw([3]float32{0.25, 0, 1}), chw([3]float32{0.5, 0, 1})},
		{"gamma 2", AdjustGamma, 2, chw([3]float32{0.5, 0.1, 0.9}), chw([3]float32{0.25, 0.01, 0.81})},
		// Red (h 0) turned by ⅓ is green, by −⅙ magenta (h ⅚), by ½ cyan.
		{"hue +1/3", AdjustHue, 1.0 / 3, chw([3]float32{1, 0, 0}), chw([3]float32{0, 1, 0})},
		{"hue -1/6", AdjustHue, -1.0 / 6, chw([3]float32{1, 0, 0}), chw([3]float32{1, 0, 1})},
		{"hue +1/2", AdjustHue, 0.5, chw([3]float32{0.5, 0, 0}), chw([3]float32{0, 0.5, 0.5})},
		// (0.8, 0.4, 0.2): v 0.8, s 0.75, h = (1 − ⅔)/6 = 1/18; + 0.06
		// gives 6h = 0.69333 in sector 0: (v, t, p) with
		// t = 0.8·(1 − 0.75·0.30667) = 0.616, p = 0.8·0.25 = 0.2.
		{"hue +0.06", AdjustHue, 0.06, chw([3]float32{0.8, 0.4, 0.2}), chw([3]float32{0.8, 0.616, 0.2})},
		// Greys have no hue.
		{"hue of grey", AdjustHue, 0.06, chw([3]float32{0.3, 0.3, 0.3}, [3]float32{0, 0, 0}), chw([3]float32{0.3, 0.3, 0.3}, [3]float32{0, 0, 0})},
	}
	for _, tt := range tests {
		x := append([]float32(nil), tt.in...)
		if err := tt.op(x, 1, len(x)/3, tt.f); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !withinTol(x, tt.want, tol) {
			t.Errorf("%s: got %v, want %v", tt.name, x, tt.want)
		}
	}
}

// TestContrastPerImage: each image of a batch is blended with its own
// mean grey, as torchvision's mean over the last three dimensions does.
func TestContrastPerImage(t *testing.T) {
	a := chw([3]float32{0.2, 0.2, 0.2}, [3]float32{0.4, 0.4, 0.4})
	b := chw([3]float32{0.7, 0.1, 0.9}, [3]float32{1, 0.5, 0})
	batch := append(append([]float32(nil), a...), b...)
	if err := AdjustContrast(batch, 2, 2, 0.8); err != nil {
		t.Fatal(err)
	}
	_ = AdjustContrast(a, 1, 2, 0.8)
	_ = AdjustContrast(b, 1, 2, 0.8)
	if !withinTol(batch, append(a, b...), 0) {
		t.Errorf("batch %v, one by one %v %v", batch, a, b)
	}
}

// TestHueRoundTrip: a zero shift returns every colour of a grid within
// 1e-6, and a shift keeps each pixel's max and min (value and
// saturation) within 3e-7. The round trip is not exact in float32 (nor
// in torchvision): 6h rounds at ulp(4) = 4.8e-7, and that error enters
// the sector fraction f (pure blue comes back with red 4.8e-7; the
// largest error on the grid is 6.7e-7).
func TestHueRoundTrip(t *testing.T) {
	var px [][3]float32
	for r := range 6 {
		for g := range 6 {
			for b := range 6 {
				px = append(px, [3]float32{float32(r) / 5, float32(g) / 5, float32(b) / 5})
			}
		}
	}
	x := chw(px...)
	y := append([]float32(nil), x...)
	if err := AdjustHue(y, 1, len(px), 0); err != nil {
		t.Fatal(err)
	}
	if !withinTol(y, x, 1e-6) {
		t.Error("a zero hue shift changes colours by more than 1e-6")
	}
	_ = AdjustHue(y, 1, len(px), 0.05)
	n := len(px)
	for j := range n {
		mx0, mn0 := max(x[j], x[n+j], x[2*n+j]), min(x[j], x[n+j], x[2*n+j])
		mx1, mn1 := max(y[j], y[n+j], y[2*n+j]), min(y[j], y[n+j], y[2*n+j])
		if math.Abs(float64(mx0-mx1)) > 3e-7 || math.Abs(float64(mn0-mn1)) > 3e-7 {
			t.Fatalf("pixel %v: max/min %v/%v became %v/%v", px[j], mx0, mn0, mx1, mn1)
		}
	}
}

// TestColorErrors: wrong lengths and an out-of-range hue are errors.
func TestColorErrors(t *testing.T) {
	x := make([]float32, 7)
	for name, op := range map[string]func([]float32, int, int, float32) error{
		"brightness": AdjustBrightness, "contrast": AdjustContrast, "saturation": AdjustSaturation,
		"hue": AdjustHue, "gamma": AdjustGamma,
	} {
		if err := op(x, 1, 2, 1); err == nil {
			t.Errorf("%s: 7 values accepted as one 2-pixel image", name)
		}
	}
	if err := AdjustHue(make([]float32, 3), 1, 1, 0.6); err == nil {
		t.Error("hue factor 0.6 accepted")
	}
	if err := AdjustGamma(make([]float32, 3), 1, 1, -1); err == nil {
		t.Error("gamma −1 accepted")
	}
}
