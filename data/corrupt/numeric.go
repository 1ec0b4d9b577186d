package corrupt

import "math"

// This file holds the numerical building blocks of the original code
// (numpy, scipy.ndimage, skimage, OpenCV), written to follow their
// operation order so that float results round the same way.

// toFloat returns img as float64 values v/255 (np.array(x) / 255.), HWC.
func toFloat(img *Image) []float64 {
	out := make([]float64, len(img.Pix))
	for i, v := range img.Pix {
		out[i] = float64(v) / 255
	}
	return out
}

// toFloat32 returns img as float32 values (np.array(x, dtype=np.float32) / 255.).
func toFloat32(img *Image) []float32 {
	out := make([]float32, len(img.Pix))
	for i, v := range img.Pix {
		out[i] = float32(v) / 255
	}
	return out
}

// truncate is np.uint8 of a float already clipped to [0, 255]: it
// truncates towards zero. NaN becomes 0.
func truncate(v float64) uint8 {
	if !(v > 0) {
		return 0
	}
	if v >= 255 {
		return 255
	}
	return uint8(v)
}

// clip01 is np.clip(v, 0, 1).
func clip01(v float64) float64 {
	if v < 0 {
		return 0
	}
	if v > 1 {
		return 1
	}
	return v
}

// fromUnit returns np.uint8(np.clip(x, 0, 1) * 255) as an h×w image.
func fromUnit(x []float64, h, w int) *Image {
	m := NewImage(h, w)
	for i, v := range x {
		m.Pix[i] = truncate(clip01(v) * 255)
	}
	return m
}

// fromUnit32 is fromUnit for float32 arrays: the product with 255 is a
// float32 product, as numpy computes it.
func fromUnit32(x []float32, h, w int) *Image {
	m := NewImage(h, w)
	for i, v := range x {
		c := v
		if c < 0 {
			c = 0
		} else if c > 1 {
			c = 1
		}
		m.Pix[i] = truncate(float64(float32(c * 255)))
	}
	return m
}

// arange returns np.arange(start, stop, step) for floats: the length is
// ceil((stop-start)/step) and element i is start + i*delta, where delta is
// (start+step) - start as numpy computes it.
func arange(start, stop, step float64) []float64 {
	n := int(math.Ceil((stop - start) / step))
	if n <= 0 {
		return nil
	}
	out := make([]float64, n)
	out[0] = start
	if n > 1 {
		next := start + step
		delta := next - start
		out[1] = next
		for i := 2; i < n; i++ {
			out[i] = start + float64(i)*delta
		}
	}
	return out
}

// pairwiseSum is numpy's summation of a contiguous float64 array
// (np.sum, np.add.reduce): 8-way unrolled blocks of up to 128 elements,
// split in halves above that.
func pairwiseSum(a []float64) float64 {
	n := len(a)
	switch {
	case n < 8:
		res := 0.0
		for _, v := range a {
			res += v
		}
		return res
	case n <= 128:
		var r [8]float64
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := range 8 {
				r[j] += a[i+j]
			}
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += a[i]
		}
		return res
	}
	n2 := n / 2
	n2 -= n2 % 8
	return pairwiseSum(a[:n2]) + pairwiseSum(a[n2:])
}

// border is a rule that maps an index outside [0, n) back inside.
type border int

const (
	borderNearest    border = iota // aaa|abcd|ddd (scipy "nearest", ImageMagick edge)
	borderReflect                  // cba|abcd|dcb (scipy "reflect", half-sample symmetric)
	borderReflect101               // dcb|abcd|cba (OpenCV BORDER_REFLECT_101, scipy "mirror")
)

// index maps i into [0, n) by the border rule.
func (b border) index(i, n int) int {
	if i >= 0 && i < n {
		return i
	}
	switch b {
	case borderNearest:
		if i < 0 {
			return 0
		}
		return n - 1
	case borderReflect:
		p := 2 * n
		q := ((i % p) + p) % p
		if q >= n {
			q = p - 1 - q
		}
		return q
	default:
		if n == 1 {
			return 0
		}
		p := 2*n - 2
		q := ((i % p) + p) % p
		if q >= n {
			q = p - q
		}
		return q
	}
}

// gaussianKernel returns scipy's _gaussian_kernel1d(sigma, 0, radius):
// exp(-0.5/σ² x²) for x = -radius…radius, divided by its numpy sum.
func gaussianKernel(sigma float64, radius int) []float64 {
	k := make([]float64, 2*radius+1)
	s2 := sigma * sigma
	for i := range k {
		x := float64(i - radius)
		k[i] = math.Exp(-0.5 / s2 * (x * x))
	}
	sum := pairwiseSum(k)
	for i := range k {
		k[i] /= sum
	}
	return k
}

// correlateSymmetric1D filters n values of x, read with the given stride
// from offset off, with the odd symmetric kernel k, writing to out with the
// same layout. It sums as scipy's correlate1d does for symmetric kernels:
// the centre term first, then (left + right)·w from the outermost pair in.
func correlateSymmetric1D(x []float64, off, n, stride int, k []float64, b border, out []float64, line []float64) {
	r := len(k) / 2
	for i := range n {
		line[i] = x[off+i*stride]
	}
	for i := range n {
		s := line[i] * k[r]
		for j := r; j >= 1; j-- {
			s += (line[b.index(i-j, n)] + line[b.index(i+j, n)]) * k[r-j]
		}
		out[off+i*stride] = s
	}
}

// gaussianFilter is scipy.ndimage.gaussian_filter on an h×w×c float64
// array with σ on the two spatial axes and 0 on the channel axis (skimage's
// gaussian with multichannel=True). Axis 0 is filtered first, then axis 1.
// The kernel radius is int(truncate·σ + 0.5); σ ≤ 1e-15 leaves x as it is.
func gaussianFilter(x []float64, h, w, c int, sigma, truncate float64, b border) []float64 {
	out := append([]float64(nil), x...)
	if sigma <= 1e-15 {
		return out
	}
	k := gaussianKernel(sigma, int(truncate*sigma+0.5))
	line := make([]float64, max(h, w))
	tmp := make([]float64, len(x))
	for xx := range w {
		for ch := range c {
			correlateSymmetric1D(out, xx*c+ch, h, w*c, k, b, tmp, line)
		}
	}
	for y := range h {
		for ch := range c {
			correlateSymmetric1D(tmp, y*w*c+ch, w, c, k, b, out, line)
		}
	}
	return out
}

// zoomLinear is scipy.ndimage.zoom(x, (zoom, zoom, 1), order=1) of an
// ih×iw×c array to oh×ow×c (scipy ≥ 1.6 without grid_mode): corner-aligned,
// the source coordinate of output index o is o·((in−1)/(out−1)). It sums
// the 2×2 neighbours as scipy does, value·w_y·w_x added in row-major order.
func zoomLinear(x []float64, ih, iw, c, oh, ow int) []float64 {
	ys, yw := linearTaps(ih, oh)
	xs, xw := linearTaps(iw, ow)
	out := make([]float64, oh*ow*c)
	for oy := range oh {
		y0, y1 := ys[2*oy], ys[2*oy+1]
		wy0, wy1 := yw[2*oy], yw[2*oy+1]
		for ox := range ow {
			x0, x1 := xs[2*ox], xs[2*ox+1]
			wx0, wx1 := xw[2*ox], xw[2*ox+1]
			for ch := range c {
				t := 0.0
				t += x[(y0*iw+x0)*c+ch] * wy0 * wx0
				t += x[(y0*iw+x1)*c+ch] * wy0 * wx1
				t += x[(y1*iw+x0)*c+ch] * wy1 * wx0
				t += x[(y1*iw+x1)*c+ch] * wy1 * wx1
				out[(oy*ow+ox)*c+ch] = t
			}
		}
	}
	return out
}

// linearTaps returns, for every output index, the two source indices and
// their order-1 spline weights (1−t, t), with reflect-101 indices at the
// border as scipy's edge offsets use.
func linearTaps(in, out int) (idx []int, wt []float64) {
	idx = make([]int, 2*out)
	wt = make([]float64, 2*out)
	zoom := 1.0
	if out > 1 {
		zoom = float64(in-1) / float64(out-1)
	}
	for o := range out {
		cc := float64(o) * zoom
		if cc > float64(in-1) {
			cc = float64(in - 1)
		}
		start := int(math.Floor(cc))
		t := cc - float64(start)
		idx[2*o] = borderReflect101.index(start, in)
		idx[2*o+1] = borderReflect101.index(start+1, in)
		wt[2*o], wt[2*o+1] = 1-t, t
	}
	return idx, wt
}

// clippedZoom is clipped_zoom of the original code on an s×s×c array:
// take the centred ceil(s/z) square, zoom it by z with zoomLinear to
// round(ch·z) (Python's half-to-even round), and cut the centred s×s.
func clippedZoom(x []float64, s, c int, z float64) []float64 {
	ch, top, zs, trim := zoomGeometry(s, z)
	crop := make([]float64, ch*ch*c)
	for y := range ch {
		copy(crop[y*ch*c:(y+1)*ch*c], x[((top+y)*s+top)*c:((top+y)*s+top+ch)*c])
	}
	zoomed := zoomLinear(crop, ch, ch, c, zs, zs)
	out := make([]float64, s*s*c)
	for y := range s {
		copy(out[y*s*c:(y+1)*s*c], zoomed[((trim+y)*zs+trim)*c:((trim+y)*zs+trim+s)*c])
	}
	return out
}

// zoomGeometry returns the sizes of clipped_zoom for side s and factor z:
// the crop side ch = ceil(s/z) and its offset (s−ch)//2, the zoomed side
// round(ch·z) (half to even, as scipy's zoom computes the output shape)
// and the trim (zoomed−s)//2.
func zoomGeometry(s int, z float64) (ch, top, zoomed, trim int) {
	ch = int(math.Ceil(float64(s) / z))
	top = floorDiv(s-ch, 2)
	zoomed = int(math.RoundToEven(float64(ch) * z))
	trim = floorDiv(zoomed-s, 2)
	return ch, top, zoomed, trim
}

// floorDiv is Python's a // b for b > 0.
func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && (a < 0) {
		q--
	}
	return q
}
