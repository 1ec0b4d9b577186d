package data

import (
	"math"
	"sync"
)

// This file reproduces Pillow 9.4's Image.resize(size, BICUBIC) for 8-bit
// images (libImaging/Resample.c): an antialiased separable convolution,
// horizontal pass first into an 8-bit intermediate, with 22-bit fixed-point
// weights. Every step, including the float64 weight computation and its
// rounding, follows Pillow's order of operations so that the output is
// bit-identical.

// precisionBits is Pillow's PRECISION_BITS: the fixed-point weights have
// 22 fractional bits, so that 255 × (sum of weights) fits an int32.
const precisionBits = 32 - 8 - 2

// bicubic is Pillow's bicubic kernel (a = -0.5, support 2). The explicit
// float64 conversions forbid fused multiply-adds, which would change the
// last bit of some weights and, through rounding, some output pixels.
func bicubic(x float64) float64 {
	const a = -0.5
	if x < 0 {
		x = -x
	}
	if x < 1 {
		// ((a+2)x - (a+3))x² + 1
		t := float64((a+2)*x) - (a + 3)
		t = float64(t * x)
		t = float64(t * x)
		return t + 1
	}
	if x < 2 {
		// (((x-5)x + 8)x - 4)a
		t := float64((x-5)*x) + 8
		t = float64(t*x) - 4
		return t * a
	}
	return 0
}

// axisCoeffs holds the weights that map one image axis of length in to
// outputs [from, from+n) of an axis of length out: output from+i is the
// weighted sum of the count[i] inputs from start[i], with weights
// k[i*ksize : i*ksize+count[i]]. Only the outputs a crop keeps are
// computed, which bounds the memory for extreme aspect ratios.
type axisCoeffs struct {
	from, ksize  int
	start, count []int
	k            []int32
}

// resampleFilter is one of Pillow's resampling filters: its kernel and
// support (before scaling by the reduction factor).
type resampleFilter struct {
	id      int // cache key
	kernel  func(float64) float64
	support float64
}

var (
	bicubicFilter  = &resampleFilter{0, bicubic, 2}
	bilinearFilter = &resampleFilter{1, triangle, 1}
)

// triangle is Pillow's bilinear_filter.
func triangle(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

// newAxisCoeffs is Pillow's precompute_coeffs followed by
// normalize_coeffs_8bpc with filter f, for the box (0, in), restricted to
// the outputs [from, from+n).
func newAxisCoeffs(f *resampleFilter, in, out, from, n int) *axisCoeffs {
	// Pillow computes the box width in float32, exact for any real size.
	scale := float64(float32(in)) / float64(out)
	filterscale := scale
	if filterscale < 1 {
		filterscale = 1
	}
	support := f.support * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := &axisCoeffs{
		from:  from,
		ksize: ksize,
		start: make([]int, n),
		count: make([]int, n),
		k:     make([]int32, n*ksize),
	}
	w := make([]float64, ksize)
	ss := 1 / filterscale
	for i := range n {
		xx := from + i
		center := float64((float64(xx) + 0.5) * scale)
		xmin := int(center - support + 0.5) // C's truncating conversion
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > in {
			xmax = in
		}
		cnt := xmax - xmin
		ww := 0.0
		for x := 0; x < cnt; x++ {
			// The kernel is called through a function value, so no
			// multiply-add can fuse across it (Pillow's C does not fuse).
			w[x] = f.kernel(float64(float64(x+xmin)-center+0.5) * ss)
			ww += w[x]
		}
		k := c.k[i*ksize : i*ksize+cnt]
		for x := range k {
			v := w[x]
			if ww != 0 {
				v /= ww
			}
			if v < 0 {
				k[x] = int32(-0.5 + v*(1<<precisionBits))
			} else {
				k[x] = int32(0.5 + v*(1<<precisionBits))
			}
		}
		c.start[i], c.count[i] = xmin, cnt
	}
	return c
}

// coeffCache keeps the weights per (filter, in, out, from, n): a dataset
// of equally sized images computes them once.
var coeffCache struct {
	sync.Mutex
	m map[[5]int]*axisCoeffs
}

// maxCachedCoeffs bounds the cache; datasets of arbitrary sizes (ImageNet)
// would otherwise grow it without limit.
const maxCachedCoeffs = 1024

func cachedAxisCoeffs(f *resampleFilter, in, out, from, n int) *axisCoeffs {
	key := [5]int{f.id, in, out, from, n}
	coeffCache.Lock()
	c := coeffCache.m[key]
	coeffCache.Unlock()
	if c != nil {
		return c
	}
	c = newAxisCoeffs(f, in, out, from, n)
	coeffCache.Lock()
	if coeffCache.m == nil || len(coeffCache.m) >= maxCachedCoeffs {
		coeffCache.m = make(map[[5]int]*axisCoeffs)
	}
	coeffCache.m[key] = c
	coeffCache.Unlock()
	return c
}

// clip8 converts a fixed-point sum to 8 bits, rounding down and clamping.
// The accumulators start at one half, so rounding down rounds to nearest.
func clip8(v int32) uint8 {
	if v >= 256<<precisionBits {
		return 255
	}
	if v <= 0 {
		return 0
	}
	return uint8(v >> precisionBits)
}

const half = 1 << (precisionBits - 1)

// plane is an interleaved 8-bit image region: pixel (x, y) channel ch is
// pix[off + y*stride + x*nch + ch].
type plane struct {
	pix         []uint8
	off, stride int
	nch         int
}

func (p plane) row(y, x0, n int) []uint8 {
	i := p.off + y*p.stride + x0*p.nch
	return p.pix[i : i+n*p.nch]
}

// resampleH runs the horizontal pass on rows [0, rows) of src, writing the
// output columns c covers to dst, which holds rows×len(c.start) pixels.
func resampleH(dst []uint8, src plane, rows int, c *axisCoeffs) {
	cols := len(c.start)
	nch := src.nch
	for y := 0; y < rows; y++ {
		in := src.pix[src.off+y*src.stride:]
		out := dst[y*cols*nch : (y+1)*cols*nch]
		for xx := 0; xx < cols; xx++ {
			start, n := c.start[xx], c.count[xx]
			k := c.k[xx*c.ksize : xx*c.ksize+n]
			px := in[start*nch : (start+n)*nch]
			switch nch {
			case 3:
				s0, s1, s2 := int32(half), int32(half), int32(half)
				for i, kv := range k {
					p := px[3*i : 3*i+3]
					s0 += int32(p[0]) * kv
					s1 += int32(p[1]) * kv
					s2 += int32(p[2]) * kv
				}
				o := out[3*xx : 3*xx+3]
				o[0], o[1], o[2] = clip8(s0), clip8(s1), clip8(s2)
			case 4:
				s0, s1, s2, s3 := int32(half), int32(half), int32(half), int32(half)
				for i, kv := range k {
					p := px[4*i : 4*i+4]
					s0 += int32(p[0]) * kv
					s1 += int32(p[1]) * kv
					s2 += int32(p[2]) * kv
					s3 += int32(p[3]) * kv
				}
				o := out[4*xx : 4*xx+4]
				o[0], o[1], o[2], o[3] = clip8(s0), clip8(s1), clip8(s2), clip8(s3)
			default:
				panic("data: resampleH: unsupported channel count") // programmer error
			}
		}
	}
}

// resampleV runs the vertical pass: the output rows c covers, each cols
// pixels wide, from src whose row 0 is input row firstRow. acc is scratch
// of at least cols×nch elements.
func resampleV(dst []uint8, src plane, firstRow int, c *axisCoeffs, cols int, acc []int32) {
	rows := len(c.start)
	width := cols * src.nch
	acc = acc[:width]
	for yy := 0; yy < rows; yy++ {
		start, n := c.start[yy]-firstRow, c.count[yy]
		k := c.k[yy*c.ksize : yy*c.ksize+n]
		for x := range acc {
			acc[x] = half
		}
		for i, kv := range k {
			in := src.row(start+i, 0, cols)
			for x, v := range in {
				acc[x] += int32(v) * kv
			}
		}
		out := dst[yy*width : (yy+1)*width]
		for x, v := range acc {
			out[x] = clip8(v)
		}
	}
}

var (
	bytePool  = sync.Pool{New: func() any { return new([]uint8) }}
	int32Pool = sync.Pool{New: func() any { return new([]int32) }}
)

func getBytes(n int) *[]uint8 {
	b := bytePool.Get().(*[]uint8)
	if cap(*b) < n {
		*b = make([]uint8, n)
	}
	*b = (*b)[:n]
	return b
}

func getInt32s(n int) *[]int32 {
	b := int32Pool.Get().(*[]int32)
	if cap(*b) < n {
		*b = make([]int32, n)
	}
	*b = (*b)[:n]
	return b
}

// resizeWindow resizes src (w×h) to outW×outH like Pillow with filter f
// and writes the window of cols×rows pixels at (x0, y0) of the result to dst. Only the
// input rows and output columns the window needs are computed; each output
// pixel is the same as in the full resize.
func resizeWindow(f *resampleFilter, dst []uint8, src plane, w, h, outW, outH, x0, y0, cols, rows int) {
	nch := src.nch
	needH, needV := outW != w, outH != h

	var cv *axisCoeffs
	firstRow, lastRow := y0, y0+rows // input rows the window reads
	if needV {
		cv = cachedAxisCoeffs(f, h, outH, y0, rows)
		firstRow, lastRow = cv.start[0], 0
		for j := range cv.start {
			firstRow = min(firstRow, cv.start[j])
			lastRow = max(lastRow, cv.start[j]+cv.count[j])
		}
	}

	// inter holds the horizontally resampled rows [firstRow, lastRow),
	// columns [x0, x0+cols).
	inter := plane{pix: src.pix, off: src.off + firstRow*src.stride + x0*nch, stride: src.stride, nch: nch}
	if needH {
		ch := cachedAxisCoeffs(f, w, outW, x0, cols)
		tmp := getBytes((lastRow - firstRow) * cols * nch)
		defer bytePool.Put(tmp)
		src.off += firstRow * src.stride
		resampleH(*tmp, src, lastRow-firstRow, ch)
		inter = plane{pix: *tmp, stride: cols * nch, nch: nch}
	}

	if needV {
		acc := getInt32s(cols * nch)
		defer int32Pool.Put(acc)
		resampleV(dst, inter, firstRow, cv, cols, *acc)
		return
	}
	width := cols * nch
	for y := 0; y < rows; y++ {
		copy(dst[y*width:(y+1)*width], inter.row(y0+y-firstRow, 0, cols))
	}
}
