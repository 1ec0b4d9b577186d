package corrupt

import (
	"fmt"
	"math"
	"math/big"
)

// diskKernel is disk(radius, alias_blur) of the original code, in float32:
// the normalised aliased disk X²+Y² ≤ r² on a 17×17 grid (r ≤ 8) or a
// (2r+1)² grid, smoothed by cv2.GaussianBlur with a 3×3 (5×5 when r > 8)
// kernel of σ = alias_blur and OpenCV's reflect-101 border. The smoothing
// at the border is why the ImageNet kernels for r ≥ 8 sum to more than 1.
func diskKernel(radius, aliasBlur float64) (k []float32, n int) {
	var coords []float64
	ksize := 3
	if radius <= 8 {
		coords = arange(-8, 9, 1)
	} else {
		coords = arange(-radius, radius+1, 1)
		ksize = 5
	}
	n = len(coords)
	disk := make([]float32, n*n)
	var count float32
	r2 := radius * radius
	for i, y := range coords {
		for j, x := range coords {
			if x*x+y*y <= r2 {
				disk[i*n+j] = 1
				count++
			}
		}
	}
	for i := range disk {
		disk[i] /= count
	}
	g := cvGaussianKernel(ksize, aliasBlur)
	return sepFilter32(disk, n, n, g), n
}

// cvGaussianKernel is cv::getGaussianKernel(n, sigma, CV_32F) for σ > 0:
// exp(-x²/2σ²) rounded to float32, summed in double, scaled by 1/sum.
func cvGaussianKernel(n int, sigma float64) []float32 {
	k := make([]float32, n)
	scale2X := -0.5 / (sigma * sigma)
	sum := 0.0
	for i := range k {
		x := float64(i) - float64(n-1)*0.5
		k[i] = float32(math.Exp(scale2X * x * x))
		sum += float64(k[i])
	}
	sum = 1 / sum
	for i := range k {
		k[i] = float32(float64(k[i]) * sum)
	}
	return k
}

// sepFilter32 filters an h×w float32 plane with the symmetric kernel k
// along rows, then along columns, in float32 with reflect-101 borders, as
// OpenCV's symmetric small-kernel row and column filters do.
func sepFilter32(x []float32, h, w int, k []float32) []float32 {
	r := len(k) / 2
	tmp := make([]float32, h*w)
	for y := range h {
		for xx := range w {
			s := x[y*w+xx] * k[r]
			for j := 1; j <= r; j++ {
				a := x[y*w+borderReflect101.index(xx-j, w)]
				b := x[y*w+borderReflect101.index(xx+j, w)]
				s += float32(a+b) * k[r+j]
			}
			tmp[y*w+xx] = s
		}
	}
	out := make([]float32, h*w)
	for y := range h {
		for xx := range w {
			s := tmp[y*w+xx] * k[r]
			for j := 1; j <= r; j++ {
				a := tmp[borderReflect101.index(y-j, h)*w+xx]
				b := tmp[borderReflect101.index(y+j, h)*w+xx]
				s += float32(a+b) * k[r+j]
			}
			out[y*w+xx] = s
		}
	}
	return out
}

// defocusBlur: cv2.filter2D of each channel of x/255 with the disk kernel
// (correlation, reflect-101 border), then clip and truncate.
func defocusBlur(img *Image, p DefocusParams, e *env) (*Image, error) {
	k32, n := diskKernel(p.Radius, p.AliasBlur)
	k := make([]float64, len(k32))
	for i, v := range k32 {
		k[i] = float64(v)
	}
	x := toFloat(img)
	h, w, r := img.H, img.W, n/2
	out := make([]float64, len(x))
	rows := make([]int, n)
	cols := make([]int, n)
	for y := range h {
		for i := range n {
			rows[i] = borderReflect101.index(y+i-r, h)
		}
		for xx := range w {
			for j := range n {
				cols[j] = borderReflect101.index(xx+j-r, w)
			}
			for c := range 3 {
				s := 0.0
				for i, yy := range rows {
					for j, cx := range cols {
						s += k[i*n+j] * x[(yy*w+cx)*3+c]
					}
				}
				out[(y*w+xx)*3+c] = s
			}
		}
	}
	return fromUnit(out, h, w), nil
}

// glassBlur: skimage gaussian (mode "nearest", truncate 4), truncated to
// uint8; then, per iteration, for h and w from S−δ down to δ+1, the pixel
// (h, w) takes the value of (h+dy, w+dx) with dx, dy drawn from {−δ…δ−1}
// (the original "swap" aliases numpy views and only copies); then the same
// Gaussian again.
func glassBlur(img *Image, p GlassParams, e *env) (*Image, error) {
	s := e.size
	g := gaussianFilter(toFloat(img), s, s, 3, p.Sigma, 4, borderNearest)
	px := make([]uint8, len(g))
	for i, v := range g {
		px[i] = truncate(v * 255)
	}
	glassShuffle(px, s, p, e.src)
	x := make([]float64, len(px))
	for i, v := range px {
		x[i] = float64(v) / 255
	}
	return fromUnit(gaussianFilter(x, s, s, 3, p.Sigma, 4, borderNearest), s, s), nil
}

// glassShuffle moves pixels of the s×s×3 image px in place.
func glassShuffle(px []uint8, s int, p GlassParams, src Source) {
	d := p.Delta
	for range p.Iterations {
		for h := s - d; h > d; h-- {
			for w := s - d; w > d; w-- {
				dx := src.IntRange(-d, d)
				dy := src.IntRange(-d, d)
				to, from := (h*s+w)*3, ((h+dy)*s+w+dx)*3
				copy(px[to:to+3], px[from:from+3])
			}
		}
	}
}

// motionKernel returns ImageMagick's motion-blur weights and tap offsets
// (MotionBlurImage with GetOptimalKernelWidth1D): width 2·ceil(radius)+1,
// weight i ∝ exp(−i²/2σ²), offset i = (ceil(i·cosθ − 0.5), ceil(i·sinθ − 0.5))
// computed as ImageMagick does, with y pointing down.
func motionKernel(radius, sigma, angleDeg float64) (k []float64, dx, dy []int) {
	width := int(2*math.Ceil(radius) + 1)
	const sq2pi = 2.50662827463100024161235523934010416269302368164062
	if math.Abs(sigma) < 1e-12 { // MagickEpsilon
		sigma = 1e-12
	}
	k = make([]float64, width)
	norm := 0.0
	for i := range k {
		fi := float64(i)
		k[i] = math.Exp(-(fi*fi)/(2*sigma*sigma)) / (sq2pi * sigma)
		norm += k[i]
	}
	for i := range k {
		k[i] /= norm
	}
	rad := math.Pi * angleDeg / 180
	px := float64(width) * math.Sin(rad)
	py := float64(width) * math.Cos(rad)
	hyp := hypot(px, py)
	dx = make([]int, width)
	dy = make([]int, width)
	for i := range width {
		dx[i] = int(math.Ceil(float64(i)*py/hyp - 0.5))
		dy[i] = int(math.Ceil(float64(i)*px/hyp - 0.5))
	}
	return k, dx, dy
}

// hypot returns sqrt(x²+y²) correctly rounded, as glibc's hypot does;
// Go's math.Hypot can be one ulp off, which moves taps whose position
// i·cosθ − 0.5 is an integer (at ±60°, for example).
func hypot(x, y float64) float64 {
	const prec = 256
	bx := new(big.Float).SetPrec(prec).SetFloat64(x)
	by := new(big.Float).SetPrec(prec).SetFloat64(y)
	s := new(big.Float).SetPrec(prec).Mul(bx, bx)
	s.Add(s, new(big.Float).SetPrec(prec).Mul(by, by))
	v, _ := s.Sqrt(s).Float64()
	return v
}

// motionBlurPlanes blurs an h×w×c uint8 array as ImageMagick 6 Q16 does:
// the weighted sum of the 16-bit values 257·v at the taps (edge-clamped),
// rounded to 16 bits, read back as 8 bits by floor(q16/257).
func motionBlurPlanes(pix []uint8, h, w, c int, radius, sigma, angleDeg float64) []uint8 {
	k, dx, dy := motionKernel(radius, sigma, angleDeg)
	out := make([]uint8, len(pix))
	for y := range h {
		for x := range w {
			for ch := range c {
				s := 0.0
				for i, wt := range k {
					yy := borderNearest.index(y+dy[i], h)
					xx := borderNearest.index(x+dx[i], w)
					s += float64(wt * (257 * float64(pix[(yy*w+xx)*c+ch])))
				}
				var q int
				switch {
				case s <= 0:
					q = 0
				case s >= 65535:
					q = 65535
				default:
					q = int(s + 0.5)
				}
				out[(y*w+x)*c+ch] = uint8(q / 257)
			}
		}
	}
	return out
}

// motionBlur: ImageMagick motion blur with an angle drawn from U(−45°, 45°).
func motionBlur(img *Image, p MotionParams, e *env) (*Image, error) {
	angle := e.src.Uniform(-45, 45)
	return &Image{H: img.H, W: img.W, Pix: motionBlurPlanes(img.Pix, img.H, img.W, 3, p.Radius, p.Sigma, angle)}, nil
}

// MotionBlurAngle applies motion_blur at a fixed angle in degrees instead
// of a random one (the fixtures' motion_blur_fixed_angle case).
func MotionBlurAngle(img *Image, severity int, p Preset, angleDeg float64) (*Image, error) {
	prm, err := Params("motion_blur", p, severity)
	if err != nil {
		return nil, err
	}
	if err := img.valid(); err != nil {
		return nil, fmt.Errorf("corrupt: motion_blur: %w", err)
	}
	mp := prm.(MotionParams)
	return &Image{H: img.H, W: img.W, Pix: motionBlurPlanes(img.Pix, img.H, img.W, 3, mp.Radius, mp.Sigma, angleDeg)}, nil
}

// zoomBlur: the mean of x and its clipped zooms by every factor of
// np.arange(start, stop, step), accumulated in float32 as the original.
func zoomBlur(img *Image, p ZoomParams, e *env) (*Image, error) {
	s := e.size
	x32 := toFloat32(img)
	x := make([]float64, len(x32))
	for i, v := range x32 {
		x[i] = float64(v)
	}
	zs := arange(p.Start, p.Stop, p.Step)
	acc := make([]float32, len(x))
	for _, z := range zs {
		for i, v := range clippedZoom(x, s, 3, z) {
			acc[i] += float32(v)
		}
	}
	n := float32(len(zs) + 1)
	for i := range acc {
		acc[i] = (x32[i] + acc[i]) / n
	}
	return fromUnit32(acc, s, s), nil
}
