package data

import (
	"image"
	"image/color"
)

// Pillow decodes JPEGs with libjpeg(-turbo), which upsamples subsampled
// chroma with a triangular ("fancy") filter and converts YCbCr to RGB with
// its own rounding. Go's image/jpeg keeps the chroma planes at their
// stored resolution, so the conversion below does libjpeg's upsampling
// and colour arithmetic on them. Only the inverse DCT, inside Go's
// decoder, still differs from libjpeg.

// libjpeg's YCbCr→RGB tables (jdcolor.c, build_ycc_rgb_table), 16-bit
// fixed point.
var yccTables = func() (t struct{ crR, cbB, crG, cbG [256]int32 }) {
	const (
		scaleBits = 16
		oneHalf   = 1 << (scaleBits - 1)
	)
	fix := func(x float64) int32 { return int32(x*(1<<scaleBits) + 0.5) }
	for i := range 256 {
		x := int32(i - 128)
		t.crR[i] = (fix(1.40200)*x + oneHalf) >> scaleBits
		t.cbB[i] = (fix(1.77200)*x + oneHalf) >> scaleBits
		t.crG[i] = -fix(0.71414) * x
		t.cbG[i] = -fix(0.34414)*x + oneHalf
	}
	return t
}()

func clamp8(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// yccToRGB is libjpeg's ycc_rgb_convert for one pixel.
func yccToRGB(y, cb, cr uint8) (uint8, uint8, uint8) {
	t := &yccTables
	yy := int32(y)
	return clamp8(yy + t.crR[cr]), clamp8(yy + (t.cbG[cb]+t.crG[cr])>>16), clamp8(yy + t.cbB[cb])
}

// ycbcrToRGB converts a YCbCr image as libjpeg would have produced it.
// Subsampling ratios other than 4:4:4, 4:2:2 and 4:2:0 (rare: 4:4:0,
// 4:1:1, 4:1:0), and images not anchored at the origin, use Go's
// nearest-neighbour chroma instead.
func ycbcrToRGB(p []uint8, src *image.YCbCr) {
	w, h := src.Rect.Dx(), src.Rect.Dy()
	var hs, vs int // chroma subsampling: 1 = halved
	switch src.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
	case image.YCbCrSubsampleRatio422:
		hs = 1
	case image.YCbCrSubsampleRatio420:
		hs, vs = 1, 1
	default:
		ycbcrToRGBNearest(p, src)
		return
	}
	if src.Rect.Min != (image.Point{}) {
		ycbcrToRGBNearest(p, src)
		return
	}
	cw, ch := (w+hs)>>hs, (h+vs)>>vs // libjpeg's downsampled_width/height
	var cb, cr []uint8               // the upsampled chroma of one row
	if hs == 1 {
		cb, cr = make([]uint8, 2*cw), make([]uint8, 2*cw)
	}
	var sumCb, sumCr []int32 // h2v2: 3·(nearer row) + (farther row), per column
	if vs == 1 {
		sumCb, sumCr = make([]int32, cw), make([]int32, cw)
	}
	for y := range h {
		yrow := src.Y[y*src.YStride:][:w]
		cy := y >> vs
		rowCb, rowCr := src.Cb[cy*src.CStride:][:cw], src.Cr[cy*src.CStride:][:cw]
		switch {
		case hs == 0:
			cb, cr = rowCb, rowCr
		case vs == 0:
			upsampleH2V1(cb, rowCb)
			upsampleH2V1(cr, rowCr)
		default:
			// The other row is the one above for even rows, below for odd
			// rows; the edge rows are replicated, as libjpeg's context rows.
			ny := cy - 1
			if y&1 == 1 {
				ny = cy + 1
			}
			ny = max(0, min(ny, ch-1))
			otherCb, otherCr := src.Cb[ny*src.CStride:][:cw], src.Cr[ny*src.CStride:][:cw]
			for i := range cw {
				sumCb[i] = 3*int32(rowCb[i]) + int32(otherCb[i])
				sumCr[i] = 3*int32(rowCr[i]) + int32(otherCr[i])
			}
			upsampleH2V2(cb, sumCb)
			upsampleH2V2(cr, sumCr)
		}
		yccRowToRGB(p[3*w*y:3*w*(y+1)], yrow, cb, cr)
	}
}

// clampTab[i+clampOff] is clamp8(i) for the sums yccRowToRGB forms (luma
// plus a chroma term, within ±300 of 0..255).
const clampOff = 512

var clampTab = func() (t [1024]uint8) {
	for i := range t {
		t[i] = clamp8(int32(i - clampOff))
	}
	return t
}()

// yccRowToRGB is yccToRGB over a row, clamping by table look-up.
func yccRowToRGB(out, yrow, cb, cr []uint8) {
	t := &yccTables
	n := len(yrow)
	out, cb, cr = out[:3*n], cb[:n], cr[:n]
	for x, yv := range yrow {
		yy := int32(yv) + clampOff
		b, r := cb[x], cr[x]
		o := out[3*x : 3*x+3 : 3*x+3]
		o[0] = clampTab[(yy+t.crR[r])&1023]
		o[1] = clampTab[(yy+(t.cbG[b]+t.crG[r])>>16)&1023]
		o[2] = clampTab[(yy+t.cbB[b])&1023]
	}
}

// upsampleH2V1 is libjpeg's h2v1_fancy_upsample: each output sample is
// ¾ of the nearer input and ¼ of the other, edge samples replicated.
func upsampleH2V1(dst, in []uint8) {
	n := len(in)
	for i := range n {
		c := 3 * int32(in[i])
		l, r := int32(in[max(i-1, 0)]), int32(in[min(i+1, n-1)])
		dst[2*i] = uint8((c + l + 1) >> 2)
		dst[2*i+1] = uint8((c + r + 2) >> 2)
	}
}

// upsampleH2V2 is the horizontal half of libjpeg's h2v2_fancy_upsample,
// on column sums already weighted 3:1 vertically.
func upsampleH2V2(dst []uint8, sum []int32) {
	n := len(sum)
	for i := range n {
		c := 3 * sum[i]
		l, r := sum[max(i-1, 0)], sum[min(i+1, n-1)]
		dst[2*i] = uint8((c + l + 8) >> 4)
		dst[2*i+1] = uint8((c + r + 7) >> 4)
	}
}

func ycbcrToRGBNearest(p []uint8, src *image.YCbCr) {
	b := src.Rect
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			yi, ci := src.YOffset(x, y), src.COffset(x, y)
			p[i], p[i+1], p[i+2] = color.YCbCrToRGB(src.Y[yi], src.Cb[ci], src.Cr[ci])
			i += 3
		}
	}
}
