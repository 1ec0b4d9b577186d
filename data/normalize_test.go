package data

import (
	"math"
	"slices"
	"testing"
)

// TestNormalizeRoundTrip: normalising float32(v)/255 gives exactly the
// preprocessor's normalised bytes (the same float32 operations as
// Transform), and un-normalising those gives v/255 back within 2.4e-7,
// two float32 ulps at 1: (x−μ)/σ·σ+μ rounds three times (1.2e-7 seen).
func TestNormalizeRoundTrip(t *testing.T) {
	p := NewCLIPPreprocessor(16)
	n := p.OutputLen()
	pix := make([]uint8, 2*3*16*16) // two HWC images
	for i := range pix {
		pix[i] = uint8(i * 37)
	}
	want := make([]float32, 2*n)
	unit := make([]float32, 2*n)
	for k := range 2 {
		p.normalize(want[k*n:(k+1)*n], pix[k*n:(k+1)*n], 3)
		for j := range 256 {
			for c := range 3 {
				unit[k*n+c*256+j] = float32(pix[k*n+3*j+c]) / 255
			}
		}
	}
	got, err := p.Normalize(nil, unit)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Error("Normalize differs from the preprocessor's normalisation")
	}
	back, err := p.Unnormalize(nil, got)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range back {
		worst = max(worst, math.Abs(float64(back[i])-float64(unit[i])))
	}
	if worst > 2.4e-7 {
		t.Errorf("round trip off by %v", worst)
	}
	t.Logf("round trip off by at most %.2g", worst)
	// In place.
	in := slices.Clone(unit)
	if _, err := p.Normalize(in, in); err != nil || !slices.Equal(in, want) {
		t.Error("in-place Normalize differs")
	}
	if _, err := p.Normalize(nil, unit[:n-1]); err == nil {
		t.Error("a partial image was accepted")
	}
	if _, err := p.Unnormalize(nil, unit[:n+3]); err == nil {
		t.Error("a partial image was accepted")
	}
}
