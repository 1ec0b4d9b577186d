package data

import (
	"maps"
	"slices"
	"testing"
)

// rgbOf builds a w×h image from per-channel level lists (pixel order).
func rgbOf(w, h int, r, g, b []uint8) *RGB {
	img := NewRGB(w, h)
	for i := range w * h {
		img.Pix[3*i], img.Pix[3*i+1], img.Pix[3*i+2] = r[i], g[i], b[i]
	}
	return img
}

// channelOf returns channel c of img in pixel order.
func channelOf(img *RGB, c int) []uint8 {
	out := make([]uint8, img.W*img.H)
	for i := range out {
		out[i] = img.Pix[3*i+c]
	}
	return out
}

// TestAutoContrast checks ImageOps.autocontrast's table on hand-computed
// channels: red spans [50, 150], so v → int(2.55·v − 127.5) gives 0, 127,
// 255; green holds one level (left alone); blue already spans [0, 255]
// (the identity).
func TestAutoContrast(t *testing.T) {
	img := rgbOf(4, 1,
		[]uint8{50, 100, 150, 150},
		[]uint8{7, 7, 7, 7},
		[]uint8{0, 255, 10, 20})
	got, err := AutoContrast(img)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]uint8{{0, 127, 255, 255}, {7, 7, 7, 7}, {0, 255, 10, 20}}
	for c := range 3 {
		if g := channelOf(got, c); !slices.Equal(g, want[c]) {
			t.Errorf("channel %d: got %v, want %v", c, g, want[c])
		}
	}
	// Red spanning [3, 200]: s = 255/197, 100 → int(125.54) = 125.
	img = rgbOf(3, 1, []uint8{3, 100, 200}, []uint8{0, 0, 0}, []uint8{0, 0, 0})
	got, _ = AutoContrast(img)
	if g := channelOf(got, 0); !slices.Equal(g, []uint8{0, 125, 255}) {
		t.Errorf("red [3, 200]: got %v, want [0 125 255]", g)
	}
	if _, err := AutoContrast(&RGB{W: 2, H: 2}); err == nil {
		t.Error("a malformed image was accepted")
	}
}

// TestEqualize checks ImageOps.equalize's table on hand-computed
// histograms.
func TestEqualize(t *testing.T) {
	tests := []struct {
		name   string
		counts map[uint8]int // level → pixels, every channel alike
		want   map[uint8]uint8
	}{
		// N = 520 − 10 = 510, step 2: 10 → ⌊1/2⌋ = 0, 20 → ⌊256/2⌋ = 128,
		// 30 → ⌊511/2⌋ = 255.
		{"three levels", map[uint8]int{10: 255, 20: 255, 30: 10}, map[uint8]uint8{10: 0, 20: 128, 30: 255}},
		// N = 300, step 1: 1 → 300, clipped to 255.
		{"clipped", map[uint8]int{0: 300, 1: 1}, map[uint8]uint8{0: 0, 1: 255}},
		// N = 254 < 255: step 0, the identity.
		{"step 0", map[uint8]int{5: 254, 9: 100}, map[uint8]uint8{5: 5, 9: 9}},
		// One level: the identity.
		{"one level", map[uint8]int{42: 600}, map[uint8]uint8{42: 42}},
	}
	for _, tt := range tests {
		var levels []uint8
		for _, l := range slices.Sorted(maps.Keys(tt.counts)) {
			for range tt.counts[l] {
				levels = append(levels, l)
			}
		}
		img := rgbOf(len(levels), 1, levels, levels, levels)
		got, err := Equalize(img)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range levels {
			for c := range 3 {
				if g := got.Pix[3*i+c]; g != tt.want[l] {
					t.Fatalf("%s: level %d → %d, want %d", tt.name, l, g, tt.want[l])
				}
			}
		}
	}
	// The channels are equalised separately.
	r := make([]uint8, 520)
	for i := range r {
		r[i] = []uint8{10, 20, 30}[min(2, i/255)]
	}
	g := slices.Repeat([]uint8{9}, 520)
	got, _ := Equalize(rgbOf(520, 1, r, g, r))
	if got.Pix[3*300] != 128 || got.Pix[3*300+1] != 9 || got.Pix[3*300+2] != 128 {
		t.Errorf("pixel 300 = %v, want [128 9 128]", got.Pix[900:903])
	}
}

// TestPosterize: the top bits are kept, the others cleared.
func TestPosterize(t *testing.T) {
	img := rgbOf(3, 1, []uint8{0xAB, 0xFF, 0x0F}, []uint8{0x10, 0x1F, 0x80}, []uint8{0x7E, 0x01, 0xC3})
	tests := []struct {
		bits int
		want []uint8 // channel 0, 1, 2 of each pixel, interleaved
	}{
		{4, []uint8{0xA0, 0x10, 0x70, 0xF0, 0x10, 0x00, 0x00, 0x80, 0xC0}},
		{1, []uint8{0x80, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x80, 0x80}},
		{7, []uint8{0xAA, 0x10, 0x7E, 0xFE, 0x1E, 0x00, 0x0E, 0x80, 0xC2}},
		{8, img.Pix},
	}
	for _, tt := range tests {
		got, err := Posterize(img, tt.bits)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Pix, tt.want) {
			t.Errorf("%d bits: got % x, want % x", tt.bits, got.Pix, tt.want)
		}
	}
	for _, bits := range []int{0, 9, -1} {
		if _, err := Posterize(img, bits); err == nil {
			t.Errorf("%d bits accepted", bits)
		}
	}
}

// TestSolarize: levels at or above the threshold are inverted.
func TestSolarize(t *testing.T) {
	img := rgbOf(2, 1, []uint8{0, 127}, []uint8{128, 200}, []uint8{254, 255})
	tests := []struct {
		threshold int
		want      []uint8
	}{
		{128, []uint8{0, 127, 1, 127, 55, 0}},
		{231, []uint8{0, 128, 1, 127, 200, 0}},
		{255, []uint8{0, 128, 254, 127, 200, 0}},
		{256, img.Pix},
		{0, []uint8{255, 127, 1, 128, 55, 0}},
	}
	for _, tt := range tests {
		got, err := Solarize(img, tt.threshold)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Pix, tt.want) {
			t.Errorf("threshold %d: got %v, want %v", tt.threshold, got.Pix, tt.want)
		}
	}
}
