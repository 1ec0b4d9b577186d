package data

import "fmt"

// This file holds AugMix's four point operations (the harness'
// augmentations/augmix_ops.py and zhangmarvin/memo's
// imagenet-exps/utils/third_party.py call Pillow's ImageOps for them):
// each builds one 256-entry lookup table per channel and maps every
// pixel through it, as ImageOps does with Image.point.

// AutoContrast stretches each channel so that its darkest level becomes 0
// and its brightest 255, as Pillow's ImageOps.autocontrast(img) does with
// no cutoff: with lo and hi the lowest and highest levels present, level v
// maps to int(v·s − lo·s), s = 255/(hi − lo), truncated toward zero and
// clamped to [0, 255]; a channel with a single level is left alone.
func AutoContrast(img *RGB) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: autocontrast: %w", err)
	}
	var luts [3][256]uint8
	hist := histograms(img)
	for c := range luts {
		lo, hi := 0, 255
		for lo < 256 && hist[c][lo] == 0 {
			lo++
		}
		for hi >= 0 && hist[c][hi] == 0 {
			hi--
		}
		if hi <= lo {
			luts[c] = identityLUT()
			continue
		}
		scale := 255.0 / float64(hi-lo)
		offset := float64(-lo) * scale
		for v := range luts[c] {
			// Python's int() truncates toward zero; a negative value
			// is clamped to 0 either way.
			luts[c][v] = uint8(max(0, min(255, int(float64(float64(v)*scale)+offset))))
		}
	}
	return applyLUTs(img, &luts), nil
}

// Equalize flattens each channel's histogram as Pillow's
// ImageOps.equalize(img) does: with N the channel's pixel count less the
// count of its highest level and step = ⌊N/255⌋, level v maps to
// ⌊(⌊step/2⌋ + #pixels below v)/step⌋, clamped to 255 (Image.point clips
// its table to 8 bits). A channel with one level, or with step 0, is left
// alone.
func Equalize(img *RGB) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: equalize: %w", err)
	}
	var luts [3][256]uint8
	hist := histograms(img)
	for c := range luts {
		total, last, levels := 0, 0, 0
		for _, h := range hist[c] {
			if h != 0 {
				total += h
				last = h
				levels++
			}
		}
		step := (total - last) / 255
		if levels <= 1 || step == 0 {
			luts[c] = identityLUT()
			continue
		}
		n := step / 2
		for v := range luts[c] {
			luts[c][v] = uint8(min(255, n/step))
			n += hist[c][v]
		}
	}
	return applyLUTs(img, &luts), nil
}

// Posterize keeps the top bits bits of every level (1 ≤ bits ≤ 8), as
// Pillow's ImageOps.posterize(img, bits) does: v AND NOT (2^(8−bits) − 1).
// AugMix at severity 1 always keeps 4 bits (4 − int(L·4/10) with L < 1).
func Posterize(img *RGB, bits int) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: posterize: %w", err)
	}
	if bits < 1 || bits > 8 {
		return nil, fmt.Errorf("data: posterize: %d bits, want 1 to 8", bits)
	}
	mask := ^uint8(1<<(8-bits) - 1)
	var lut [256]uint8
	for v := range lut {
		lut[v] = uint8(v) & mask
	}
	luts := [3][256]uint8{lut, lut, lut}
	return applyLUTs(img, &luts), nil
}

// Solarize inverts every level at or above threshold (v → 255 − v) and
// keeps the others, as Pillow's ImageOps.solarize(img, threshold) does.
// AugMix's threshold is 256 − int(L·256/10), between 231 and 254 at
// severity 1; a threshold of 256 or more changes nothing.
func Solarize(img *RGB, threshold int) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: solarize: %w", err)
	}
	var lut [256]uint8
	for v := range lut {
		lut[v] = uint8(v)
		if v >= threshold {
			lut[v] = uint8(255 - v)
		}
	}
	luts := [3][256]uint8{lut, lut, lut}
	return applyLUTs(img, &luts), nil
}

// histograms counts the levels of each channel of img.
func histograms(img *RGB) *[3][256]int {
	var h [3][256]int
	for i := 0; i < len(img.Pix); i += 3 {
		h[0][img.Pix[i]]++
		h[1][img.Pix[i+1]]++
		h[2][img.Pix[i+2]]++
	}
	return &h
}

func identityLUT() (lut [256]uint8) {
	for v := range lut {
		lut[v] = uint8(v)
	}
	return lut
}

// applyLUTs returns a new image with channel c of every pixel mapped
// through luts[c].
func applyLUTs(img *RGB, luts *[3][256]uint8) *RGB {
	out := NewRGB(img.W, img.H)
	for i := 0; i < len(img.Pix); i += 3 {
		out.Pix[i] = luts[0][img.Pix[i]]
		out.Pix[i+1] = luts[1][img.Pix[i+1]]
		out.Pix[i+2] = luts[2][img.Pix[i+2]]
	}
	return out
}
