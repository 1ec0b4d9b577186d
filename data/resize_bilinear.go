package data

import (
	"fmt"
	"math"
	"sync"
)

// This file adds Pillow 9.4's Image.resize(size, BILINEAR) for 8-bit
// images, the resize of ImageNet-C's input pipeline (torchvision's
// Resize(256) on a PIL image). It is the same antialiased separable
// convolution as the bicubic resize of preprocess_resample.go, with
// Pillow's triangle filter (support 1, scaled by the reduction factor)
// in place of the cubic one; the passes, fixed-point weights and 8-bit
// intermediate are shared.

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

// newTriangleCoeffs is newAxisCoeffs with Pillow's bilinear filter:
// precompute_coeffs and normalize_coeffs_8bpc for the box (0, in),
// restricted to the outputs [from, from+n).
func newTriangleCoeffs(in, out, from, n int) *axisCoeffs {
	scale := float64(float32(in)) / float64(out)
	filterscale := max(scale, 1)
	support := 1 * filterscale // the triangle's support × filterscale
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
		center := float64((float64(from+i) + 0.5) * scale)
		xmin := max(int(center-support+0.5), 0) // C's truncating conversion
		xmax := min(int(center+support+0.5), in)
		cnt := xmax - xmin
		ww := 0.0
		for x := 0; x < cnt; x++ {
			// The conversion forbids a fused multiply-add with the
			// filter's 1 − x, which Pillow's C does not do.
			w[x] = triangle(float64((float64(x+xmin) - center + 0.5) * ss))
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

// triangleCache keeps the bilinear weights per (in, out, from, n), as
// coeffCache does for bicubic.
var triangleCache struct {
	sync.Mutex
	m map[[4]int]*axisCoeffs
}

func cachedTriangleCoeffs(in, out, from, n int) *axisCoeffs {
	key := [4]int{in, out, from, n}
	triangleCache.Lock()
	c := triangleCache.m[key]
	triangleCache.Unlock()
	if c != nil {
		return c
	}
	c = newTriangleCoeffs(in, out, from, n)
	triangleCache.Lock()
	if triangleCache.m == nil || len(triangleCache.m) >= maxCachedCoeffs {
		triangleCache.m = make(map[[4]int]*axisCoeffs)
	}
	triangleCache.m[key] = c
	triangleCache.Unlock()
	return c
}

// resizeWindowBilinear is resizeWindow with the bilinear filter: it resizes
// src (w×h) to outW×outH and writes the cols×rows window at (x0, y0) of the
// result to dst, computing only the input rows and output columns the
// window needs.
func resizeWindowBilinear(dst []uint8, src plane, w, h, outW, outH, x0, y0, cols, rows int) {
	nch := src.nch
	needH, needV := outW != w, outH != h

	var cv *axisCoeffs
	firstRow, lastRow := y0, y0+rows
	if needV {
		cv = cachedTriangleCoeffs(h, outH, y0, rows)
		firstRow, lastRow = cv.start[0], 0
		for j := range cv.start {
			firstRow = min(firstRow, cv.start[j])
			lastRow = max(lastRow, cv.start[j]+cv.count[j])
		}
	}

	inter := plane{pix: src.pix, off: src.off + firstRow*src.stride + x0*nch, stride: src.stride, nch: nch}
	if needH {
		ch := cachedTriangleCoeffs(w, outW, x0, cols)
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

// ResizeBilinear resizes img to w×h exactly as Pillow 9.4's
// Image.resize((w, h), Image.BILINEAR) does on an RGB image: an
// antialiased triangle filter whose support grows with the reduction.
func ResizeBilinear(img *RGB, w, h int) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: resize: %w", err)
	}
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("data: resize: target size %dx%d", w, h)
	}
	out := NewRGB(w, h)
	resizeWindowBilinear(out.Pix, plane{pix: img.Pix, stride: 3 * img.W, nch: 3}, img.W, img.H, w, h, 0, 0, w, h)
	return out, nil
}

// ImageNet-C's input pipeline (make_imagenet_c.py): the validation image is
// resized so that its short side is 256, then the centre 224×224 square is
// corrupted.
const (
	imageNetCResize = 256
	imageNetCCrop   = 224
)

// imageNetCInput is torchvision's Compose([Resize(256), CenterCrop(224)])
// on a PIL image (bilinear), computing only the pixels the crop keeps.
func imageNetCInput(img *RGB) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: ImageNet-C input: %w", err)
	}
	rw, rh := resizedSize(imageNetCResize, img.W, img.H)
	left, top := CenterCropOffset(rw, rh, imageNetCCrop, imageNetCCrop)
	out := NewRGB(imageNetCCrop, imageNetCCrop)
	resizeWindowBilinear(out.Pix, plane{pix: img.Pix, stride: 3 * img.W, nch: 3}, img.W, img.H, rw, rh, left, top, imageNetCCrop, imageNetCCrop)
	return out, nil
}
