package corrupt

import "math"

// contrast: (x − m)·c + m with m the per-channel mean of x/255.
func contrast(img *Image, c float64, e *env) (*Image, error) {
	x := toFloat(img)
	var mean [3]float64
	for i, v := range x {
		mean[i%3] += v
	}
	n := float64(img.H * img.W)
	for ch := range mean {
		mean[ch] /= n
	}
	for i, v := range x {
		m := mean[i%3]
		x[i] = (v-m)*c + m
	}
	return fromUnit(x, img.H, img.W), nil
}

// pixelate: PIL resize with the BOX filter to int(S·c) square and back.
func pixelate(img *Image, c float64, e *env) (*Image, error) {
	s := e.size
	n := int(float64(s) * c)
	if n < 1 {
		n = 1
	}
	small := pilResize(img, n, n)
	return pilResize(small, s, s), nil
}

// pilResize is Pillow's 8-bit two-pass resample with the BOX filter:
// horizontal pass first, uint8 in between, 22-bit fixed-point weights.
func pilResize(img *Image, w, h int) *Image {
	tmp := img
	if w != img.W {
		tmp = pilPass(img, w, true)
	}
	if h != img.H {
		tmp = pilPass(tmp, h, false)
	}
	if tmp == img {
		tmp = img.Clone()
	}
	return tmp
}

const pilPrecision = 22 // PRECISION_BITS = 32 − 8 − 2

// pilCoeffs is Pillow's precompute_coeffs for the box filter (support
// 0.5) followed by normalize_coeffs_8bpc.
func pilCoeffs(in, out int) (bounds []int, kk [][]int32) {
	scale := float64(in) / float64(out)
	filterscale := max(scale, 1)
	support := 0.5 * filterscale
	bounds = make([]int, 2*out)
	kk = make([][]int32, out)
	for xx := range out {
		center := (float64(xx) + 0.5) * scale
		ss := 1 / filterscale
		xmin := max(int(center-support+0.5), 0)
		xmax := min(int(center+support+0.5), in) - xmin
		w := make([]float64, xmax)
		ww := 0.0
		for x := range xmax {
			t := (float64(x+xmin) - center + 0.5) * ss
			if t > -0.5 && t <= 0.5 {
				w[x] = 1
			}
			ww += w[x]
		}
		k := make([]int32, xmax)
		for x := range xmax {
			if ww != 0 {
				w[x] /= ww
			}
			if w[x] < 0 {
				k[x] = int32(-0.5 + w[x]*(1<<pilPrecision))
			} else {
				k[x] = int32(0.5 + w[x]*(1<<pilPrecision))
			}
		}
		bounds[2*xx], bounds[2*xx+1] = xmin, xmax
		kk[xx] = k
	}
	return bounds, kk
}

// pilPass resamples along x (horizontal) or y to n pixels.
func pilPass(img *Image, n int, horizontal bool) *Image {
	in := img.H
	if horizontal {
		in = img.W
	}
	bounds, kk := pilCoeffs(in, n)
	var out *Image
	if horizontal {
		out = NewImage(img.H, n)
	} else {
		out = NewImage(n, img.W)
	}
	for y := range out.H {
		for x := range out.W {
			o := x
			if !horizontal {
				o = y
			}
			xmin, k := bounds[2*o], kk[o]
			for c := range 3 {
				ss := int64(1) << (pilPrecision - 1)
				for j, wt := range k {
					var v uint8
					if horizontal {
						v = img.Pix[(y*img.W+xmin+j)*3+c]
					} else {
						v = img.Pix[((xmin+j)*img.W+x)*3+c]
					}
					ss += int64(v) * int64(wt)
				}
				out.Pix[(y*out.W+x)*3+c] = pilClip8(ss)
			}
		}
	}
	return out
}

func pilClip8(v int64) uint8 {
	if v >= 1<<(pilPrecision+8) {
		return 255
	}
	if v <= 0 {
		return 0
	}
	return uint8(v >> pilPrecision)
}

// jpegCompression: encode as JPEG at the given quality and decode again,
// with Go's image/jpeg instead of PIL/libjpeg (close, not bit-exact).
func jpegCompression(img *Image, quality int, e *env) (*Image, error) {
	return jpegRoundTrip(img, quality)
}

// elasticTransform: a random affine warp (cv2.warpAffine, bilinear,
// reflect-101) of the three points S//2 ± S//3 jittered by U(±affine),
// then a displacement by Gaussian-smoothed U(−1, 1) fields times α
// (scipy map_coordinates, order 1, half-sample reflect).
func elasticTransform(img *Image, p ElasticParams, e *env) (*Image, error) {
	s := e.size
	x := toFloat32(img)
	cs := float32(s / 2)
	sq := float32(s / 3)
	src := [3][2]float32{{cs + sq, cs + sq}, {cs + sq, cs - sq}, {cs - sq, cs - sq}}
	var dst [3][2]float32
	for i := range 3 {
		for j := range 2 {
			dst[i][j] = src[i][j] + float32(e.src.Uniform(-p.Affine, p.Affine))
		}
	}
	m, ok := affineTransform(src, dst)
	if !ok {
		// cv2.getAffineTransform returns zeros for a singular system;
		// the jitter cannot make three points collinear in practice.
		m = [6]float64{}
	}
	warped := warpAffine(x, s, s, m)

	field := func() []float32 {
		u := make([]float64, s*s)
		for i := range u {
			u[i] = e.src.Uniform(-1, 1)
		}
		g := gaussianFilter(u, s, s, 1, p.Sigma, 3, borderReflect)
		out := make([]float32, len(g))
		for i, v := range g {
			out[i] = float32(v * p.Alpha)
		}
		return out
	}
	dx := field()
	dy := field()

	out := make([]float32, len(x))
	for y := range s {
		for xx := range s {
			cy := float64(y) + float64(dy[y*s+xx])
			cx := float64(xx) + float64(dx[y*s+xx])
			y0, y1, wy0, wy1, okY := reflectTaps(cy, s)
			x0, x1, wx0, wx1, okX := reflectTaps(cx, s)
			for c := range 3 {
				if !okY || !okX {
					out[(y*s+xx)*3+c] = 0
					continue
				}
				t := 0.0
				t += float64(warped[(y0*s+x0)*3+c]) * wy0 * wx0
				t += float64(warped[(y0*s+x1)*3+c]) * wy0 * wx1
				t += float64(warped[(y1*s+x0)*3+c]) * wy1 * wx0
				t += float64(warped[(y1*s+x1)*3+c]) * wy1 * wx1
				out[(y*s+xx)*3+c] = float32(t)
			}
		}
	}
	return fromUnit32(out, s, s), nil
}

// reflectTaps maps coordinate cc as scipy ≥ 1.6 map_coordinates does with
// mode "reflect" and order 1: the coordinate is folded into range, then the
// two taps floor(cc) and floor(cc)+1 are folded again, with weights 1−t, t.
func reflectTaps(cc float64, n int) (i0, i1 int, w0, w1 float64, ok bool) {
	cc = scipyReflect(cc, n)
	if !(cc > -1) {
		return 0, 0, 0, 0, false
	}
	start := int(math.Floor(cc))
	t := cc - float64(start)
	return borderReflect.index(start, n), borderReflect.index(start+1, n), 1 - t, t, true
}

// scipyReflect is scipy's map_coordinate for NI_EXTEND_REFLECT.
func scipyReflect(in float64, n int) float64 {
	if n <= 1 {
		return 0
	}
	sz2 := float64(2 * n)
	if in < 0 {
		if in < -sz2 {
			in = sz2*float64(int64(-in/sz2)) + in
		}
		if in < -float64(n) {
			in += sz2
		} else if in > -1e-15 {
			in = 1e-15 - 1
		} else {
			in = -in - 1
		}
	} else if in > float64(n-1) {
		in -= sz2 * float64(int64(in/sz2))
		if in >= float64(n) {
			in = sz2 - in - 1
		}
	}
	return in
}

// affineTransform is cv2.getAffineTransform: the 2×3 matrix mapping src
// to dst, from the 6×6 system solved by Gaussian elimination with partial
// pivoting (OpenCV's LU), in double.
func affineTransform(src, dst [3][2]float32) ([6]float64, bool) {
	var a [6][6]float64
	var b [6]float64
	for i := range 3 {
		sx, sy := float64(src[i][0]), float64(src[i][1])
		a[2*i] = [6]float64{sx, sy, 1, 0, 0, 0}
		a[2*i+1] = [6]float64{0, 0, 0, sx, sy, 1}
		b[2*i], b[2*i+1] = float64(dst[i][0]), float64(dst[i][1])
	}
	const m = 6
	for i := range m {
		k := i
		for j := i + 1; j < m; j++ {
			if math.Abs(a[j][i]) > math.Abs(a[k][i]) {
				k = j
			}
		}
		if math.Abs(a[k][i]) < 2.220446049250313e-16*100 {
			return [6]float64{}, false
		}
		if k != i {
			a[i], a[k] = a[k], a[i]
			b[i], b[k] = b[k], b[i]
		}
		d := -1 / a[i][i]
		for j := i + 1; j < m; j++ {
			alpha := a[j][i] * d
			for c := i + 1; c < m; c++ {
				a[j][c] += alpha * a[i][c]
			}
			b[j] += alpha * b[i]
		}
	}
	for i := m - 1; i >= 0; i-- {
		s := b[i]
		for c := i + 1; c < m; c++ {
			s -= a[i][c] * b[c]
		}
		b[i] = s / a[i][i]
	}
	return b, true
}

// warpAffine is cv2.warpAffine(x, M, (w, h), INTER_LINEAR,
// BORDER_REFLECT_101) on an h×w×3 float32 image. M is inverted as OpenCV
// does; source positions are quantised to 1/32 pixel in fixed point and
// the bilinear weights come from OpenCV's float32 table.
func warpAffine(x []float32, h, w int, m [6]float64) []float32 {
	d := m[0]*m[4] - m[1]*m[3]
	if d != 0 {
		d = 1 / d
	}
	a11, a22 := m[4]*d, m[0]*d
	m[0] = a11
	m[1] *= -d
	m[3] *= -d
	m[4] = a22
	b1 := -m[0]*m[2] - m[1]*m[5]
	b2 := -m[3]*m[2] - m[4]*m[5]
	m[2], m[5] = b1, b2

	const (
		interBits = 5
		tab       = 1 << interBits
		abBits    = 10
		abScale   = 1 << abBits
		round     = abScale / tab / 2
	)
	var wtab [tab]float32
	for i := range tab {
		wtab[i] = float32(i) * (1 / float32(tab))
	}
	adelta := make([]int, w)
	bdelta := make([]int, w)
	for xx := range w {
		adelta[xx] = cvRound(m[0] * float64(xx) * abScale)
		bdelta[xx] = cvRound(m[3] * float64(xx) * abScale)
	}
	out := make([]float32, len(x))
	for y := range h {
		x0 := cvRound((m[1]*float64(y)+m[2])*abScale) + round
		y0 := cvRound((m[4]*float64(y)+m[5])*abScale) + round
		for xx := range w {
			X := (x0 + adelta[xx]) >> (abBits - interBits)
			Y := (y0 + bdelta[xx]) >> (abBits - interBits)
			sx, sy := X>>interBits, Y>>interBits
			fx, fy := wtab[X&(tab-1)], wtab[Y&(tab-1)]
			vx0, vx1 := float32(1-fx), fx
			vy0, vy1 := float32(1-fy), fy
			w0, w1 := float32(vy0*vx0), float32(vy0*vx1)
			w2, w3 := float32(vy1*vx0), float32(vy1*vx1)
			c0, c1 := borderReflect101.index(sx, w), borderReflect101.index(sx+1, w)
			r0, r1 := borderReflect101.index(sy, h), borderReflect101.index(sy+1, h)
			for c := range 3 {
				t := float32(x[(r0*w+c0)*3+c] * w0)
				t = t + float32(x[(r0*w+c1)*3+c]*w1)
				t = t + float32(x[(r1*w+c0)*3+c]*w2)
				t = t + float32(x[(r1*w+c1)*3+c]*w3)
				out[(y*w+xx)*3+c] = t
			}
		}
	}
	return out
}

// cvRound is OpenCV's saturate_cast<int>(double): round half to even.
func cvRound(v float64) int { return int(math.RoundToEven(v)) }
