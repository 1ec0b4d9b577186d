package data

import (
	"fmt"
	"math"
	"strconv"
)

// This file holds AugMix's five geometric operations (rotate, shear_x,
// shear_y, translate_x, translate_y of the harness'
// augmentations/augmix_ops.py and zhangmarvin/memo's
// imagenet-exps/utils/third_party.py), all of them Pillow 9.4's
// Image.transform(size, AFFINE, data, BILINEAR) (libImaging/Geometry.c,
// ImagingGenericTransform with affine_transform and the bilinear filter).

// Fill colours of the pixels a geometric AugMix op uncovers. MEMO passes
// fillcolor=128 to Pillow, which reads an integer colour of an RGB image
// as packed 0xAABBGGRR, so its fill is (128, 0, 0), not grey; the harness
// passes none, which is black.
var (
	MEMOFill    = [3]uint8{128, 0, 0}
	HarnessFill = [3]uint8{0, 0, 0}
)

// Affine returns the w×h image whose pixel (x, y) samples img at
// (a₀·(x+½) + a₁·(y+½) + a₂, a₃·(x+½) + a₄·(y+½) + a₅), as Pillow's
// img.transform((w, h), Image.AFFINE, a, resample=Image.BILINEAR,
// fillcolor=fill) does: a sample point outside [0, W)×[0, H) gives fill;
// inside, the four pixels around the point less ½ are blended (rows and
// columns beyond the edge clamped to it), first along x, then along y, in
// float64, and the result is truncated to 8 bits.
func Affine(img *RGB, w, h int, a [6]float64, fill [3]uint8) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: affine transform: %w", err)
	}
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("data: affine transform: output size %dx%d", w, h)
	}
	for _, v := range a {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("data: affine transform: coefficients %v", a)
		}
	}
	out := NewRGB(w, h)
	for y := range h {
		yo := float64(y) + 0.5
		for x := range w {
			xo := float64(x) + 0.5
			// Separate products and sums: no fused multiply-add, as in
			// Pillow's C.
			xin := float64(float64(a[0]*xo)+float64(a[1]*yo)) + a[2]
			yin := float64(float64(a[3]*xo)+float64(a[4]*yo)) + a[5]
			px := out.Pix[3*(y*w+x) : 3*(y*w+x)+3]
			if !bilinearSample(px, img, xin, yin) {
				copy(px, fill[:])
			}
		}
	}
	return out, nil
}

// bilinearSample writes img's bilinear sample at (xin, yin) to px, as
// Pillow's bilinear_filter32RGB does, and reports whether the point lies
// inside the image.
func bilinearSample(px []uint8, img *RGB, xin, yin float64) bool {
	if xin < 0 || xin >= float64(img.W) || yin < 0 || yin >= float64(img.H) {
		return false
	}
	xin -= 0.5
	yin -= 0.5
	x, y := int(math.Floor(xin)), int(math.Floor(yin))
	dx, dy := xin-float64(x), yin-float64(y)
	clampX := func(i int) int { return max(0, min(img.W-1, i)) }
	x0, x1 := 3*clampX(x), 3*clampX(x+1)
	row0 := img.Pix[3*img.W*max(0, min(img.H-1, y)):]
	var row1 []uint8
	if y+1 >= 0 && y+1 < img.H {
		row1 = img.Pix[3*img.W*(y+1):]
	}
	lerp := func(a, b uint8, d float64) float64 {
		return float64(a) + float64(float64(int(b)-int(a))*d)
	}
	for c := range 3 {
		v1 := lerp(row0[x0+c], row0[x1+c], dx)
		v2 := v1
		if row1 != nil {
			v2 = lerp(row1[x0+c], row1[x1+c], dx)
		}
		v := v1 + float64((v2-v1)*dy)
		px[c] = uint8(v) // C's (UINT8) cast: truncation; v is in [0, 255]
	}
	return true
}

// Rotate turns img by degrees counter-clockwise about its centre, keeping
// its size, as Pillow's img.rotate(degrees, resample=Image.BILINEAR,
// fillcolor=fill) does: a multiple of 360° returns a copy; otherwise
// θ = −radians(degrees mod 360) and the affine map is (cos θ, sin θ, ·, −sin θ,
// cos θ, ·), each entry rounded to 15 decimals (Python's round), with the
// offsets that keep the centre (W/2, H/2) fixed. AugMix's angle is
// ±int(L·30/10) degrees.
func Rotate(img *RGB, degrees float64, fill [3]uint8) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: rotate: %w", err)
	}
	if math.IsNaN(degrees) || math.IsInf(degrees, 0) {
		return nil, fmt.Errorf("data: rotate: angle %v", degrees)
	}
	// Pillow reduces the angle modulo 360 first (Python's modulo, which
	// takes the sign of the divisor), so −2° is turned as 358°.
	a := math.Mod(degrees, 360)
	if a < 0 {
		a += 360
	}
	if a == 0 {
		out := NewRGB(img.W, img.H)
		copy(out.Pix, img.Pix)
		return out, nil
	}
	// Pillow turns 180° (and 90° and 270° on a square image) by
	// transposition instead. The bilinear map gives the same pixels there:
	// cos and sin rounded to 15 decimals are exactly 0 and ±1, so every
	// sample point is a pixel centre (TestRotate).
	theta := -(a * (math.Pi / 180)) // math.radians
	cos, sin := round15(math.Cos(theta)), round15(math.Sin(theta))
	m := [6]float64{cos, sin, 0, round15(-math.Sin(theta)), cos, 0}
	cx, cy := float64(img.W)/2, float64(img.H)/2
	m[2] = float64(float64(m[0]*-cx)+float64(m[1]*-cy)) + m[2] + cx
	m[5] = float64(float64(m[3]*-cx)+float64(m[4]*-cy)) + m[5] + cy
	return Affine(img, img.W, img.H, m, fill)
}

// round15 rounds x to 15 decimals as Python's round(x, 15) does: the
// correctly rounded decimal string, parsed back.
func round15(x float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 15, 64), 64)
	return r
}

// ShearX shears img along x, as AugMix's shear_x does with Pillow:
// transform((W, H), AFFINE, (1, s, 0, 0, 1, 0), BILINEAR): pixel (x, y)
// samples (x + s·y, y). AugMix's s is ±L·0.3/10.
func ShearX(img *RGB, s float64, fill [3]uint8) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: shear x: %w", err)
	}
	return Affine(img, img.W, img.H, [6]float64{1, s, 0, 0, 1, 0}, fill)
}

// ShearY shears img along y: (1, 0, 0, s, 1, 0), pixel (x, y) samples
// (x, y + s·x). See ShearX.
func ShearY(img *RGB, s float64, fill [3]uint8) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: shear y: %w", err)
	}
	return Affine(img, img.W, img.H, [6]float64{1, 0, 0, s, 1, 0}, fill)
}

// TranslateX shifts img left by d pixels (right for d < 0), as AugMix's
// translate_x does with Pillow: (1, 0, d, 0, 1, 0), pixel (x, y) samples
// (x + d, y); with an integer d this is an exact shift. AugMix's d is
// ±int(L·(W/3)/10).
func TranslateX(img *RGB, d int, fill [3]uint8) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: translate x: %w", err)
	}
	return Affine(img, img.W, img.H, [6]float64{1, 0, float64(d), 0, 1, 0}, fill)
}

// TranslateY shifts img up by d pixels: (1, 0, 0, 0, 1, d). See TranslateX.
func TranslateY(img *RGB, d int, fill [3]uint8) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: translate y: %w", err)
	}
	return Affine(img, img.W, img.H, [6]float64{1, 0, 0, 0, 1, float64(d)}, fill)
}
