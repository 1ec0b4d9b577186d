package data

import (
	"fmt"
	"math"
)

// This file holds the colour adjustments of RoTTA's strong augmentation
// (the harness' augmentations/transforms_cotta.py ColorJitterPro, which
// calls torchvision's functional adjust_* on a float tensor). Each works
// in place on a batch of n CHW float32 images with values in [0, 1],
// plane = H·W values per channel, in float32 with torchvision's formulas
// (torchvision/transforms/functional_tensor.py):
//
//   - blend(a, b, f) = clamp(f·a + (1−f)·b, 0, 1);
//   - grey(r, g, b) = 0.2989·r + 0.587·g + 0.114·b.

// checkBatch reports whether x holds n CHW images of plane values per
// channel.
func checkBatch(op string, x []float32, n, plane int) error {
	if n < 0 || plane <= 0 || len(x) != 3*n*plane {
		return fmt.Errorf("data: %s: %d values are not %d CHW images of %d pixels", op, len(x), n, plane)
	}
	return nil
}

func clamp01(v float32) float32 {
	return min(1, max(0, v))
}

func grey(r, g, b float32) float32 {
	return float32(float32(0.2989*r)+float32(0.587*g)) + float32(0.114*b)
}

// AdjustBrightness is torchvision's adjust_brightness:
// blend(x, 0, f) = clamp(f·x, 0, 1).
func AdjustBrightness(x []float32, n, plane int, f float32) error {
	if err := checkBatch("brightness", x, n, plane); err != nil {
		return err
	}
	for i, v := range x {
		x[i] = clamp01(f * v)
	}
	return nil
}

// AdjustContrast is torchvision's adjust_contrast: each image is blended
// with the mean of its grey image, blend(x, mean(grey), f). The mean is
// summed in float64 (torch sums float32 pairwise; the two agree to about
// 1e-7 relative).
func AdjustContrast(x []float32, n, plane int, f float32) error {
	if err := checkBatch("contrast", x, n, plane); err != nil {
		return err
	}
	of := float32(1 - float64(f))
	for k := range n {
		img := x[3*k*plane : 3*(k+1)*plane]
		r, g, b := img[:plane], img[plane:2*plane], img[2*plane:]
		sum := 0.0
		for j := range plane {
			sum += float64(grey(r[j], g[j], b[j]))
		}
		mean := float32(sum / float64(plane))
		m := float32(of * mean)
		for i, v := range img {
			img[i] = clamp01(float32(f*v) + m)
		}
	}
	return nil
}

// AdjustSaturation is torchvision's adjust_saturation: each pixel is
// blended with its grey level, blend(x, grey, f).
func AdjustSaturation(x []float32, n, plane int, f float32) error {
	if err := checkBatch("saturation", x, n, plane); err != nil {
		return err
	}
	of := float32(1 - float64(f))
	for k := range n {
		img := x[3*k*plane : 3*(k+1)*plane]
		r, g, b := img[:plane], img[plane:2*plane], img[2*plane:]
		for j := range plane {
			m := float32(of * grey(r[j], g[j], b[j]))
			r[j] = clamp01(float32(f*r[j]) + m)
			g[j] = clamp01(float32(f*g[j]) + m)
			b[j] = clamp01(float32(f*b[j]) + m)
		}
	}
	return nil
}

// AdjustGamma is torchvision's adjust_gamma with gain 1:
// clamp(x^γ, 0, 1), γ ≥ 0. The power is exp(γ·ln x) in float64, rounded
// to float32 (torch's float32 powf may differ by an ulp); 0^γ is 0, and 1
// for γ = 0.
func AdjustGamma(x []float32, n, plane int, gamma float32) error {
	if err := checkBatch("gamma", x, n, plane); err != nil {
		return err
	}
	if !(gamma >= 0) || math.IsInf(float64(gamma), 0) {
		return fmt.Errorf("data: gamma: %v, want a non-negative number", gamma)
	}
	g := float64(gamma)
	for i, v := range x {
		switch {
		case v <= 0 && gamma == 0:
			x[i] = 1
		case v <= 0:
			x[i] = 0
		default:
			x[i] = clamp01(float32(math.Exp(g * math.Log(float64(v)))))
		}
	}
	return nil
}

// AdjustHue is torchvision's adjust_hue for float images: every pixel is
// turned to HSV (its _rgb2hsv: v = max, s = (max − min)/max, h from the
// channel holding the max, in [0, 1)), the hue is shifted by f modulo 1
// (f in [−½, ½]), and the pixel is turned back (its _hsv2rgb: sector
// i = ⌊6h⌋ mod 6, p, q, t clamped to [0, 1]).
func AdjustHue(x []float32, n, plane int, f float32) error {
	if err := checkBatch("hue", x, n, plane); err != nil {
		return err
	}
	if !(f >= -0.5 && f <= 0.5) {
		return fmt.Errorf("data: hue: factor %v outside [-0.5, 0.5]", f)
	}
	for k := range n {
		img := x[3*k*plane : 3*(k+1)*plane]
		r, g, b := img[:plane], img[plane:2*plane], img[2*plane:]
		for j := range plane {
			h, s, v := rgbToHSV(r[j], g[j], b[j])
			h = float32(math.Mod(float64(h+f), 1)) // torch's %: the sign of the divisor
			if h < 0 {
				h += 1
			}
			r[j], g[j], b[j] = hsvToRGB(h, s, v)
		}
	}
	return nil
}

// rgbToHSV follows torchvision's _rgb2hsv in float32. Where max = min,
// s = 0 and h = 0.
func rgbToHSV(r, g, b float32) (h, s, v float32) {
	maxc, minc := max(r, g, b), min(r, g, b)
	cr := maxc - minc
	if maxc == minc {
		// torchvision divides by 1 instead and gets h = fmod(6/6+1, 1) = 0.
		return 0, 0, maxc
	}
	s = cr / maxc
	rc, gc, bc := (maxc-r)/cr, (maxc-g)/cr, (maxc-b)/cr
	switch {
	case maxc == r:
		h = bc - gc
	case maxc == g:
		h = float32(2+rc) - bc
	default:
		h = float32(4+gc) - rc
	}
	h = float32(math.Mod(float64(float32(h/6)+1), 1))
	return h, s, maxc
}

// hsvToRGB follows torchvision's _hsv2rgb in float32.
func hsvToRGB(h, s, v float32) (r, g, b float32) {
	h6 := float32(h * 6)
	fi := float32(math.Floor(float64(h6)))
	f := h6 - fi
	i := ((int(fi) % 6) + 6) % 6
	p := clamp01(float32(v * (1 - s)))
	q := clamp01(float32(v * (1 - float32(s*f))))
	t := clamp01(float32(v * (1 - float32(s*(1-f)))))
	switch i {
	case 0:
		return v, t, p
	case 1:
		return q, v, p
	case 2:
		return p, v, t
	case 3:
		return p, q, v
	case 4:
		return t, p, v
	default:
		return v, p, q
	}
}
