package data

import (
	"math"
	"slices"
	"testing"
)

// patternRGB returns a w×h image whose pixel (x, y) is (x·17+y, y·29+x, 255−x−y)
// modulo 256: every pixel distinct enough to catch a wrong index.
func patternRGB(w, h int) *RGB {
	img := NewRGB(w, h)
	for y := range h {
		for x := range w {
			i := 3 * (y*w + x)
			img.Pix[i], img.Pix[i+1], img.Pix[i+2] = uint8(x*17+y), uint8(y*29+x), uint8(255-x-y)
		}
	}
	return img
}

// TestTranslate: an integer translation is an exact shift, with fill where
// the source lies outside (Pillow's sample point x+½+d is a pixel centre).
func TestTranslate(t *testing.T) {
	img := patternRGB(7, 5)
	fill := [3]uint8{1, 2, 3}
	for _, d := range []int{0, 1, 3, -2, 7, -9} {
		gx, err := TranslateX(img, d, fill)
		if err != nil {
			t.Fatal(err)
		}
		gy, err := TranslateY(img, d, fill)
		if err != nil {
			t.Fatal(err)
		}
		for y := range img.H {
			for x := range img.W {
				wantX, wantY := fill[:], fill[:]
				if sx := x + d; sx >= 0 && sx < img.W {
					wantX = img.Pix[3*(y*img.W+sx):][:3]
				}
				if sy := y + d; sy >= 0 && sy < img.H {
					wantY = img.Pix[3*(sy*img.W+x):][:3]
				}
				i := 3 * (y*img.W + x)
				if !slices.Equal(gx.Pix[i:i+3], wantX) || !slices.Equal(gy.Pix[i:i+3], wantY) {
					t.Fatalf("d = %d, pixel (%d, %d): x %v want %v, y %v want %v", d, x, y, gx.Pix[i:i+3], wantX, gy.Pix[i:i+3], wantY)
				}
			}
		}
	}
}

// TestShearX checks Pillow's bilinear filter on values computed by hand:
// with s = ½, row 0 samples x + ¼ (past the last column the edge pixel is
// repeated as long as the point is inside the image) and row 1 samples
// x + ¾ (the last pixel's point, 4.25, is outside: fill). Blends are
// truncated: 200 + 55·¼ = 213.75 → 213.
func TestShearX(t *testing.T) {
	img := rgbOf(4, 2,
		[]uint8{0, 100, 200, 255, 10, 20, 30, 40},
		[]uint8{0, 0, 0, 0, 0, 0, 0, 0},
		[]uint8{9, 9, 9, 9, 9, 9, 9, 9})
	got, err := ShearX(img, 0.5, [3]uint8{7, 7, 7})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]uint8{
		{25, 125, 213, 255, 17, 27, 37, 7},
		{0, 0, 0, 0, 0, 0, 0, 7},
		{9, 9, 9, 9, 9, 9, 9, 7},
	}
	for c := range 3 {
		if g := channelOf(got, c); !slices.Equal(g, want[c]) {
			t.Errorf("channel %d: got %v, want %v", c, g, want[c])
		}
	}
}

// transposeRGB swaps the axes of img.
func transposeRGB(img *RGB) *RGB {
	out := NewRGB(img.H, img.W)
	for y := range img.H {
		for x := range img.W {
			copy(out.Pix[3*(x*img.H+y):][:3], img.Pix[3*(y*img.W+x):][:3])
		}
	}
	return out
}

// TestShearY: shearing along y is shearing the transposed image along x.
func TestShearY(t *testing.T) {
	img := patternRGB(9, 6)
	for _, s := range []float64{0.03, -0.027, 0.2} {
		got, err := ShearY(img, s, MEMOFill)
		if err != nil {
			t.Fatal(err)
		}
		viaX, _ := ShearX(transposeRGB(img), s, MEMOFill)
		if !slices.Equal(got.Pix, transposeRGB(viaX).Pix) {
			t.Errorf("s = %v: ShearY differs from ShearX on the transpose", s)
		}
	}
}

// TestRotate: 0° and 360° copy; 90° on a square image is the exact
// counter-clockwise quarter turn (Pillow's ROTATE_90: out(x, y) =
// in(W−1−y, x)), since cos and sin rounded to 15 decimals are exact 0
// and 1; −270° is the same turn; 180° on a non-square image is the exact
// half turn; a constant image keeps its level inside
// and gets the fill in the corners, and the centre pixel of an odd image
// stays put.
func TestRotate(t *testing.T) {
	img := patternRGB(6, 6)
	for _, deg := range []float64{0, 360, -720} {
		got, err := Rotate(img, deg, MEMOFill)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Pix, img.Pix) || &got.Pix[0] == &img.Pix[0] {
			t.Errorf("%v°: not a copy", deg)
		}
	}
	for _, deg := range []float64{90, -270} {
		got, _ := Rotate(img, deg, MEMOFill)
		for y := range 6 {
			for x := range 6 {
				if g, w := got.Pix[3*(y*6+x):][:3], img.Pix[3*(x*6+5-y):][:3]; !slices.Equal(g, w) {
					t.Fatalf("%v°: pixel (%d, %d) = %v, want %v", deg, x, y, g, w)
				}
			}
		}
	}
	// 180° on a non-square image is Pillow's ROTATE_180 for any shape:
	// out(x, y) = in(W−1−x, H−1−y).
	wide := patternRGB(7, 4)
	half, err := Rotate(wide, 180, MEMOFill)
	if err != nil {
		t.Fatal(err)
	}
	for y := range 4 {
		for x := range 7 {
			if g, w := half.Pix[3*(y*7+x):][:3], wide.Pix[3*((3-y)*7+6-x):][:3]; !slices.Equal(g, w) {
				t.Fatalf("180°: pixel (%d, %d) = %v, want %v", x, y, g, w)
			}
		}
	}
	flat := NewRGB(9, 9)
	for i := range flat.Pix {
		flat.Pix[i] = 77
	}
	flat.Pix[3*(4*9+4)] = 200 // the centre
	got, err := Rotate(flat, 30, HarnessFill)
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Pix[3*(4*9+4)]; c != 200 {
		t.Errorf("centre = %d, want 200", c)
	}
	for _, p := range [][2]int{{0, 0}, {8, 0}, {0, 8}, {8, 8}} {
		if g := got.Pix[3*(p[1]*9+p[0]):][:3]; !slices.Equal(g, HarnessFill[:]) {
			t.Errorf("corner %v = %v, want the fill", p, g)
		}
	}
	// Green is 77 everywhere, so every pixel whose sample point falls
	// inside the image keeps it exactly (a blend of equal levels).
	for _, p := range [][2]int{{1, 4}, {4, 1}, {7, 4}, {4, 7}, {2, 2}, {6, 6}} {
		if g := got.Pix[3*(p[1]*9+p[0])+1]; g != 77 {
			t.Errorf("pixel %v green = %d, want 77", p, g)
		}
	}
}

// TestAffineErrors: bad images, sizes and coefficients are errors.
func TestAffineErrors(t *testing.T) {
	img := patternRGB(3, 3)
	id := [6]float64{1, 0, 0, 0, 1, 0}
	if _, err := Affine(nil, 3, 3, id, HarnessFill); err == nil {
		t.Error("nil image accepted")
	}
	if _, err := Affine(img, 0, 3, id, HarnessFill); err == nil {
		t.Error("empty output accepted")
	}
	if _, err := Affine(img, 3, 3, [6]float64{math.NaN(), 0, 0, 0, 1, 0}, HarnessFill); err == nil {
		t.Error("NaN coefficient accepted")
	}
	if _, err := Rotate(img, math.Inf(1), HarnessFill); err == nil {
		t.Error("infinite angle accepted")
	}
	got, err := Affine(img, 3, 3, id, HarnessFill)
	if err != nil || !slices.Equal(got.Pix, img.Pix) {
		t.Error("the identity map does not copy")
	}
}
