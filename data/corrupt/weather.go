package corrupt

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
)

// snow: a field N(loc, scale) on the S×S grid, clipped-zoomed, zeroed below
// the threshold, truncated to uint8 and motion-blurred (ImageMagick) at an
// angle from U(−135°, −45°); the image is blended with its brightened grey
// version, and the layer is added as it is and rotated by 180°.
func snow(img *Image, p SnowParams, e *env) (*Image, error) {
	s := e.size
	layer := make([]float64, s*s)
	for i := range layer {
		layer[i] = e.src.Normal(p.Loc, p.Scale)
	}
	layer = clippedZoom(layer, s, 1, p.Zoom)
	u8 := make([]uint8, len(layer))
	for i, v := range layer {
		if v < p.Threshold {
			v = 0
		}
		u8[i] = truncate(clip01(v) * 255)
	}
	angle := e.src.Uniform(-135, -45)
	blurred := motionBlurPlanes(u8, s, s, 1, p.Radius, p.Sigma, angle)

	x := toFloat32(img)
	blend := float32(p.Blend)
	rest := float32(1 - p.Blend)
	out := make([]float64, len(x))
	for y := range s {
		for xx := range s {
			i := (y*s + xx) * 3
			// cv2.cvtColor(RGB2GRAY) on float32, then *1.5 + 0.5 in float32.
			gray := float32(float32(x[i]*0.299)+float32(x[i+1]*0.587)) + float32(x[i+2]*0.114)
			bright := float32(gray*1.5) + 0.5
			sl := float64(blurred[y*s+xx]) / 255
			rot := float64(blurred[(s-1-y)*s+(s-1-xx)]) / 255
			for c := range 3 {
				v := float32(blend*x[i+c]) + float32(rest*max(x[i+c], bright))
				out[i+c] = float64(v) + sl + rot
			}
		}
	}
	return fromUnit(out, s, s), nil
}

// frostFiles are the overlays the original draws from with randint(5);
// frost6.jpg exists upstream but is never drawn.
var frostFiles = [5]string{"frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"}

type frostKey struct {
	dir    string
	preset Preset
}

var frostCache struct {
	sync.Mutex
	m map[frostKey]*[5]*Image
}

// frostOverlays loads (once per folder and preset) the five overlays; for
// CIFAR they are shrunk by cv2.resize(fx=fy=0.2), which for a factor of 5
// samples pixel 5i+2 exactly (bilinear weights 1 and 0).
func frostOverlays(dir string, p Preset) (*[5]*Image, error) {
	if dir == "" {
		return nil, errors.New("frost needs Config.FrostDir, the folder with frost1.png … frost5.jpg")
	}
	key := frostKey{dir, p}
	frostCache.Lock()
	defer frostCache.Unlock()
	if o, ok := frostCache.m[key]; ok {
		return o, nil
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("frost folder %q: not a readable directory", dir)
	}
	var o [5]*Image
	for i, name := range frostFiles {
		m, err := ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("frost overlay: %w", err)
		}
		if p == CIFAR {
			m = decimate5(m)
		}
		if m.H < p.Size()+1 || m.W < p.Size()+1 {
			return nil, fmt.Errorf("frost overlay %s is %d×%d, smaller than the %d×%d crop", name, m.H, m.W, p.Size()+1, p.Size()+1)
		}
		o[i] = m
	}
	if frostCache.m == nil {
		frostCache.m = map[frostKey]*[5]*Image{}
	}
	frostCache.m[key] = &o
	return &o, nil
}

// decimate5 is cv2.resize(m, fx=0.2, fy=0.2, INTER_LINEAR): the output size
// is round(n·0.2) and output pixel i sits exactly on input pixel 5i+2.
func decimate5(m *Image) *Image {
	h := int(math.RoundToEven(float64(m.H) * 0.2))
	w := int(math.RoundToEven(float64(m.W) * 0.2))
	out := NewImage(h, w)
	for y := range h {
		sy := min(5*y+2, m.H-1)
		for x := range w {
			sx := min(5*x+2, m.W-1)
			copy(out.Pix[(y*w+x)*3:(y*w+x)*3+3], m.Pix[(sy*m.W+sx)*3:(sy*m.W+sx)*3+3])
		}
	}
	return out
}

// frost: clip(a·x + b·crop, 0, 255) on 0–255 values, with the overlay drawn
// by randint(5) and an S×S crop at randint(0, H−S), randint(0, W−S).
func frost(img *Image, p FrostParams, e *env) (*Image, error) {
	ov, err := frostOverlays(e.FrostDir, e.Preset)
	if err != nil {
		return nil, err
	}
	s := e.size
	f := ov[e.src.IntRange(0, 5)]
	top := e.src.IntRange(0, f.H-s)
	left := e.src.IntRange(0, f.W-s)
	out := NewImage(s, s)
	for y := range s {
		for x := range s {
			for c := range 3 {
				i := (y*s+x)*3 + c
				// Each product rounded, as NumPy's: float64(…) keeps a
				// GOAMD64=v3 build from fusing them into a multiply-add.
				v := float64(p.Image*float64(img.Pix[i])) + float64(p.Frost*float64(f.Pix[((top+y)*f.W+left+x)*3+c]))
				out.Pix[i] = truncate(min(max(v, 0), 255))
			}
		}
	}
	return out, nil
}

// plasmaFractal is the original diamond-square height map on a toroidal
// mapsize×mapsize grid, min-max scaled to [0, 1]. Each new point is the
// mean of its 4 neighbours plus wibble·U(−wibble, wibble); per level the
// squares are drawn, then the diamonds on even rows, then on odd rows, each
// as one C-order array; wibble is divided by decay after each level.
func plasmaFractal(mapsize int, decay float64, src Source) []float64 {
	m := make([]float64, mapsize*mapsize)
	at := func(y, x int) *float64 { return &m[y*mapsize+x] }
	wibble := 100.0
	for step := mapsize; step >= 2; step /= 2 {
		n := mapsize / step
		half := step / 2
		wrap := func(i int) int { return (i + n) % n }
		// Squares: mean of the 4 corners, summed as
		// (c[i,j]+c[i+1,j]) + (c[i,j+1]+c[i+1,j+1]).
		for i := range n {
			for j := range n {
				a := *at(i*step, j*step) + *at(wrap(i+1)*step, j*step)
				b := *at(i*step, wrap(j+1)*step) + *at(wrap(i+1)*step, wrap(j+1)*step)
				*at(i*step+half, j*step+half) = (a+b)/4 + wibble*src.Uniform(-wibble, wibble)
			}
		}
		// Diamonds at (i·step, j·step+half):
		// (dr[i,j] + dr[i-1,j]) + (ul[i,j] + ul[i,j+1]).
		for i := range n {
			for j := range n {
				a := *at(i*step+half, j*step+half) + *at(wrap(i-1)*step+half, j*step+half)
				b := *at(i*step, j*step) + *at(i*step, wrap(j+1)*step)
				*at(i*step, j*step+half) = (a+b)/4 + wibble*src.Uniform(-wibble, wibble)
			}
		}
		// Diamonds at (i·step+half, j·step):
		// (dr[i,j] + dr[i,j-1]) + (ul[i,j] + ul[i+1,j]).
		for i := range n {
			for j := range n {
				a := *at(i*step+half, j*step+half) + *at(i*step+half, wrap(j-1)*step+half)
				b := *at(i*step, j*step) + *at(wrap(i+1)*step, j*step)
				*at(i*step+half, j*step) = (a+b)/4 + wibble*src.Uniform(-wibble, wibble)
			}
		}
		wibble /= decay
	}
	lo := math.Inf(1)
	for _, v := range m {
		lo = min(lo, v)
	}
	hi := math.Inf(-1)
	for i := range m {
		m[i] -= lo
		hi = max(hi, m[i])
	}
	for i := range m {
		m[i] /= hi
	}
	return m
}

// fog: x + c·plasma (the map is 32 for CIFAR, 256 cropped to 224 for
// ImageNet), scaled by max(x)/(max(x)+c), where max runs over all values.
func fog(img *Image, p FogParams, e *env) (*Image, error) {
	s := e.size
	mapsize := 32
	if e.Preset == ImageNet {
		mapsize = 256
	}
	pl := plasmaFractal(mapsize, p.Decay, e.src)
	x := toFloat(img)
	mx := 0.0
	for _, v := range x {
		mx = max(mx, v)
	}
	for y := range s {
		for xx := range s {
			add := p.Amount * pl[y*mapsize+xx]
			for c := range 3 {
				i := (y*s+xx)*3 + c
				x[i] = (x[i] + add) * mx / (mx + p.Amount)
			}
		}
	}
	return fromUnit(x, s, s), nil
}

// brightness: V + c in skimage's HSV (rgb2hsv, clip V to [0, 1], hsv2rgb).
func brightness(img *Image, c float64, e *env) (*Image, error) {
	x := toFloat(img)
	for i := 0; i < len(x); i += 3 {
		h, s, v := rgbToHSV(x[i], x[i+1], x[i+2])
		v = clip01(v + c)
		x[i], x[i+1], x[i+2] = hsvToRGB(h, s, v)
	}
	return fromUnit(x, img.H, img.W), nil
}

// rgbToHSV is skimage.color.rgb2hsv (0.19) for one pixel. When several
// channels share the maximum, blue wins over green over red.
func rgbToHSV(r, g, b float64) (h, s, v float64) {
	v = max(r, g, b)
	delta := v - min(r, g, b)
	if delta == 0 {
		return 0, 0, v
	}
	s = delta / v
	switch {
	case b == v:
		h = 4 + (r-g)/delta
	case g == v:
		h = 2 + (b-r)/delta
	default:
		h = (g - b) / delta
	}
	h = pyMod1(h / 6)
	return h, s, v
}

// pyMod1 is numpy's remainder(a, 1.0): the result has the sign of 1.
func pyMod1(a float64) float64 {
	m := math.Mod(a, 1)
	if m < 0 {
		m += 1
	}
	if m == 0 {
		return 0
	}
	return m
}

// hsvToRGB is skimage.color.hsv2rgb (0.19) for one pixel.
func hsvToRGB(h, s, v float64) (r, g, b float64) {
	hi := math.Floor(h * 6)
	f := h*6 - hi
	p := v * (1 - s)
	q := v * (1 - f*s)
	t := v * (1 - (1-f)*s)
	switch int(uint8(int(hi))) % 6 {
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
