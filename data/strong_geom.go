package data

import (
	"fmt"
	"math"
)

// This file holds the geometric middle of RoTTA's strong augmentation
// (the harness' augmentations/transforms_cotta.py get_tta_transforms):
// Pad(size/2, "edge"), RandomAffine(bilinear, fill 0), GaussianBlur(5),
// CenterCrop(size), with torchvision's tensor semantics
// (functional_tensor.py affine and gaussian_blur; torch's grid_sample
// with align_corners=False). Only the pixels the centre crop keeps are
// computed: the crop of a blur needs the affine output two pixels around
// it, so the result is that of the full-size pipeline.

// StrongGeometry is one draw of the affine map and the blur.
type StrongGeometry struct {
	// Angle is the rotation in degrees; torchvision samples
	// U(−15°, 15°).
	Angle float64
	// TX and TY translate by whole pixels: round(U(−d, d)) with
	// d = (size + 2·⌊size/2⌋)/16, the padded side over 16.
	TX, TY int
	// Scale is the zoom, U(0.9, 1.1).
	Scale float64
	// Sigma is the Gaussian blur's standard deviation, U(0.001, 0.5);
	// the kernel is 5×5.
	Sigma float64
}

// inverseAffine returns torchvision's _get_inverse_affine_matrix for a
// rotation, translation and scale about the centre (no shear): the map
// from output to input coordinates, both relative to the image centre.
func (g StrongGeometry) inverseAffine() [6]float64 {
	rot := g.Angle * (math.Pi / 180)
	cos, sin := math.Cos(rot), math.Sin(rot)
	m := [6]float64{cos / g.Scale, sin / g.Scale, 0, -sin / g.Scale, cos / g.Scale, 0}
	tx, ty := float64(g.TX), float64(g.TY)
	m[2] = m[0]*-tx + m[1]*-ty
	m[5] = m[3]*-tx + m[4]*-ty
	return m
}

// gaussianKernel returns torchvision's 1-D Gaussian kernel of 5 taps at
// x = −2…2: exp(−x²/(2σ²)), normalised to sum 1, in float32.
func gaussianKernel(sigma float64) [5]float32 {
	var pdf [5]float32
	var sum float32
	for i := range pdf {
		x := float32(float32(i-2) / float32(sigma))
		pdf[i] = float32(math.Exp(float64(-0.5 * float32(x*x))))
		sum += pdf[i]
	}
	for i := range pdf {
		pdf[i] /= sum
	}
	return pdf
}

// check validates the geometry for images of side size.
func (g StrongGeometry) check(size int) error {
	switch {
	case size < 2:
		return fmt.Errorf("data: strong augmentation: image side %d, want at least 2 (torch's reflect padding of the blur)", size)
	case !(g.Scale > 0) || math.IsInf(g.Scale, 0):
		return fmt.Errorf("data: strong augmentation: scale %v", g.Scale)
	case !(g.Sigma > 0) || math.IsInf(g.Sigma, 0):
		return fmt.Errorf("data: strong augmentation: blur sigma %v", g.Sigma)
	case math.IsNaN(g.Angle) || math.IsInf(g.Angle, 0):
		return fmt.Errorf("data: strong augmentation: angle %v", g.Angle)
	}
	return nil
}

// apply writes the padded, transformed, blurred and centre-cropped src
// (one CHW image of side size) to dst. buf holds (size+4)² float32.
func (g StrongGeometry) apply(dst, src []float32, size int, buf []float32) {
	pad := size / 2
	side := size + 2*pad // the padded image
	m := g.inverseAffine()
	half := float64(side-1) / 2 // centre of pixel coordinates (align_corners=False)
	k := gaussianKernel(g.Sigma)
	var k2 [5][5]float32
	for i := range k2 {
		for j := range k2[i] {
			k2[i][j] = k[i] * k[j]
		}
	}
	// reflect maps an index of the blur's padded input into the affine
	// output, as torch's "reflect" padding does (no edge repeat).
	reflect := func(i int) int {
		if i < 0 {
			return -i
		}
		if i >= side {
			return 2*(side-1) - i
		}
		return i
	}
	w := size + 4
	plane := size * size
	// The edge padding as index maps: padded column x reads source
	// column clamp(x − pad), likewise for rows.
	srcIdx := make([]int, side)
	for i := range srcIdx {
		srcIdx[i] = max(0, min(size-1, i-pad))
	}
	for c := range 3 {
		in := src[c*plane : (c+1)*plane]
		for by := range w {
			yc := float64(reflect(pad-2+by)) - half
			for bx := range w {
				xc := float64(reflect(pad-2+bx)) - half
				// Input position in pixel coordinates of the padded image.
				ix := m[0]*xc + m[1]*yc + m[2] + half
				iy := m[3]*xc + m[4]*yc + m[5] + half
				x0, y0 := int(math.Floor(ix)), int(math.Floor(iy))
				fx, fy := ix-float64(x0), iy-float64(y0)
				// grid_sample's zeros padding: taps outside the padded
				// image add nothing, to the value or to the mask.
				var v, mask float64
				for dy := range 2 {
					y := y0 + dy
					if y < 0 || y >= side {
						continue
					}
					wy := 1 - fy
					if dy == 1 {
						wy = fy
					}
					row := in[srcIdx[y]*size:]
					for dx := range 2 {
						x := x0 + dx
						if x < 0 || x >= side {
							continue
						}
						wx := 1 - fx
						if dx == 1 {
							wx = fx
						}
						v += wx * wy * float64(row[srcIdx[x]])
						mask += wx * wy
					}
				}
				// torchvision's fill: blend with the fill colour (0) by
				// the sampled mask of ones.
				buf[by*w+bx] = float32(v * mask)
			}
		}
		out := dst[c*plane : (c+1)*plane]
		for y := range size {
			for x := range size {
				var s float32
				for i := range 5 {
					row := buf[(y+i)*w+x:]
					for j := range 5 {
						s += k2[i][j] * row[j]
					}
				}
				out[y*size+x] = s
			}
		}
	}
}
