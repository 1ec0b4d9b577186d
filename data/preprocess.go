package data

import (
	"errors"
	"fmt"
	"image"
	"math"
)

// CLIP's normalisation constants (OpenAI clip/clip.py, _transform).
var (
	CLIPMean = [3]float32{0.48145466, 0.4578275, 0.40821073}
	CLIPStd  = [3]float32{0.26862954, 0.26130258, 0.27577711}
)

// DefaultImageSize is the input resolution of CLIP's ViT-B models.
const DefaultImageSize = 224

// PreprocessConfig configures a Preprocessor.
type PreprocessConfig struct {
	// Size is the side of the square output; 0 means DefaultImageSize.
	Size int
	// Mean and Std normalise each channel: (x/255 - Mean)/Std. Both zero
	// means CLIPMean and CLIPStd.
	Mean, Std [3]float32
	// PremultipliedAlpha makes TransformImage reproduce Pillow's result for
	// an image with alpha (Go's *image.NRGBA or *image.NRGBA64, from PNG RGBA
	// or grey+alpha) that was NOT converted to RGB before the transform, as
	// in OpenAI's README example: Pillow then resizes premultiplied colour
	// and un-premultiplies it afterwards, which darkens the edges of
	// transparent regions. The default drops alpha first, like
	// Image.open(f).convert("RGB"). Opaque images give the same result
	// either way. (Go also decodes PNG RGB or grey with a tRNS colour key
	// to NRGBA; Pillow does not premultiply those.)
	PremultipliedAlpha bool
}

// Preprocessor is CLIP's image transform, torchvision's
// Compose([Resize(Size, BICUBIC), CenterCrop(Size), ToTensor(),
// Normalize(Mean, Std)]) on a Pillow image, reproduced bit for bit: the
// short side is resized to Size with Pillow's antialiased bicubic filter,
// the centre Size×Size square is cut out, and each channel is scaled to
// [0, 1] and normalised in float32. The output is CHW float32.
//
// A Preprocessor is safe for concurrent use.
type Preprocessor struct {
	size    int
	premult bool
	mean    [3]float32
	std     [3]float32
	// lut[c][v] is the normalised value of channel c at level v: the
	// same float32 operations as ToTensor and Normalize, done once.
	lut [3][256]float32
}

// NewPreprocessor returns a Preprocessor for cfg. It fails for a negative
// size or a zero or non-finite standard deviation.
func NewPreprocessor(cfg PreprocessConfig) (*Preprocessor, error) {
	if cfg.Size < 0 {
		return nil, fmt.Errorf("data: preprocess: negative image size %d", cfg.Size)
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultImageSize
	}
	if cfg.Mean == [3]float32{} && cfg.Std == [3]float32{} {
		cfg.Mean, cfg.Std = CLIPMean, CLIPStd
	}
	for c, s := range cfg.Std {
		if s == 0 || math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return nil, fmt.Errorf("data: preprocess: std[%d] = %v", c, s)
		}
	}
	p := &Preprocessor{size: cfg.Size, premult: cfg.PremultipliedAlpha, mean: cfg.Mean, std: cfg.Std}
	for c := range p.lut {
		for v := range p.lut[c] {
			x := float32(v) / 255
			p.lut[c][v] = (x - p.mean[c]) / p.std[c]
		}
	}
	return p, nil
}

// NewCLIPPreprocessor returns CLIP's transform at the given size (224 for
// the ViT-B models) with CLIP's mean and std. It panics if size is not
// positive; use NewPreprocessor for sizes that come from users.
func NewCLIPPreprocessor(size int) *Preprocessor {
	if size <= 0 {
		panic(fmt.Sprintf("data: NewCLIPPreprocessor: size %d", size))
	}
	p, err := NewPreprocessor(PreprocessConfig{Size: size})
	if err != nil {
		panic(err) // unreachable: the configuration is valid
	}
	return p
}

// Size returns the side of the output square.
func (p *Preprocessor) Size() int { return p.size }

// OutputLen returns the number of values Transform writes: 3·Size·Size.
func (p *Preprocessor) OutputLen() int { return 3 * p.size * p.size }

// ResizedSize returns the size of a w×h image after the Resize step:
// the short side becomes Size and the long side int(Size·long/short), as
// torchvision computes it (truncation, in float64).
func (p *Preprocessor) ResizedSize(w, h int) (rw, rh int) {
	return resizedSize(p.size, w, h)
}

func resizedSize(size, w, h int) (int, int) {
	short, long := w, h
	if h < w {
		short, long = h, w
	}
	newLong := int(float64(size*long) / float64(short))
	if w <= h {
		return size, newLong
	}
	return newLong, size
}

// CenterCropOffset returns the top-left corner of the centred cw×ch crop of
// a w×h image: round((w-cw)/2), round((h-ch)/2), rounding halves to even
// as Python's round does (torchvision's center_crop).
func CenterCropOffset(w, h, cw, ch int) (left, top int) {
	return int(math.RoundToEven(float64(w-cw) / 2)), int(math.RoundToEven(float64(h-ch) / 2))
}

// Transform preprocesses img into dst[:OutputLen()] as CHW float32 and
// returns that slice: it overwrites dst from index 0, whatever len(dst),
// and does not append (unlike online.BatchDomain.Samples). If cap(dst) is
// too short a new slice is allocated. It fails only for a malformed image.
func (p *Preprocessor) Transform(dst []float32, img *RGB) ([]float32, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: preprocess: %w", err)
	}
	dst = p.out(dst)
	src := plane{pix: img.Pix, stride: 3 * img.W, nch: 3}
	crop := getBytes(3 * p.size * p.size)
	defer bytePool.Put(crop)
	p.resizeCrop(*crop, src, img.W, img.H)
	p.normalize(dst, *crop, 3)
	return dst, nil
}

// TransformImage converts img to RGB (see ToRGB) and preprocesses it like
// Transform. With PremultipliedAlpha set, an *image.NRGBA or
// *image.NRGBA64 image is resized in premultiplied alpha as Pillow does
// for an RGBA image (see PreprocessConfig).
func (p *Preprocessor) TransformImage(dst []float32, img image.Image) ([]float32, error) {
	if p.premult {
		var nrgba *image.NRGBA
		switch src := img.(type) {
		case *image.NRGBA:
			nrgba = src
		case *image.NRGBA64:
			nrgba = nrgba64To8(src)
		}
		if nrgba != nil {
			return p.transformPremultiplied(dst, nrgba)
		}
	}
	return p.Transform(dst, ToRGB(img))
}

// Batch preprocesses imgs into one NCHW tensor, dst[:len(imgs)·OutputLen()]
// (overwriting dst from index 0, as Transform does), allocating a new
// slice if dst is too short.
func (p *Preprocessor) Batch(dst []float32, imgs []*RGB) ([]float32, error) {
	n := p.OutputLen()
	if cap(dst) < n*len(imgs) {
		dst = make([]float32, n*len(imgs))
	}
	dst = dst[:n*len(imgs)]
	for i, img := range imgs {
		if _, err := p.Transform(dst[i*n:(i+1)*n], img); err != nil {
			return nil, fmt.Errorf("data: preprocess: batch image %d: %w", i, errors.Unwrap(err))
		}
	}
	return dst, nil
}

func (p *Preprocessor) out(dst []float32) []float32 {
	n := p.OutputLen()
	if cap(dst) < n {
		return make([]float32, n)
	}
	return dst[:n]
}

// resizeCrop writes the centre Size×Size crop of the resized src to crop.
func (p *Preprocessor) resizeCrop(crop []uint8, src plane, w, h int) {
	rw, rh := p.ResizedSize(w, h)
	left, top := CenterCropOffset(rw, rh, p.size, p.size)
	resizeWindow(bicubicFilter, crop, src, w, h, rw, rh, left, top, p.size, p.size)
}

// normalize writes the CHW normalised values of the interleaved Size×Size
// image pix (nch channels, the first three used) to dst.
func (p *Preprocessor) normalize(dst []float32, pix []uint8, nch int) {
	n := p.size * p.size
	r, g, b := dst[:n], dst[n:2*n], dst[2*n:3*n]
	lr, lg, lb := &p.lut[0], &p.lut[1], &p.lut[2]
	for i := range r {
		px := pix[i*nch : i*nch+3]
		r[i], g[i], b[i] = lr[px[0]], lg[px[1]], lb[px[2]]
	}
}

// transformPremultiplied follows Pillow on an RGBA image: premultiply
// (RGBA→RGBa), resize all four channels, crop, un-premultiply (RGBa→RGBA)
// and drop alpha.
func (p *Preprocessor) transformPremultiplied(dst []float32, img *image.NRGBA) ([]float32, error) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("data: preprocess: empty image %dx%d", w, h)
	}
	dst = p.out(dst)
	pm := getBytes(4 * w * h)
	defer bytePool.Put(pm)
	for y := 0; y < h; y++ {
		in := img.Pix[img.PixOffset(b.Min.X, b.Min.Y+y):][:4*w]
		out := (*pm)[4*w*y : 4*w*(y+1)]
		for x := 0; x < 4*w; x += 4 {
			a := in[x+3]
			out[x], out[x+1], out[x+2], out[x+3] = muldiv255(in[x], a), muldiv255(in[x+1], a), muldiv255(in[x+2], a), a
		}
	}
	crop := getBytes(4 * p.size * p.size)
	defer bytePool.Put(crop)
	p.resizeCrop(*crop, plane{pix: *pm, stride: 4 * w, nch: 4}, w, h)
	c := *crop
	for i := 0; i < len(c); i += 4 {
		a := c[i+3]
		c[i], c[i+1], c[i+2] = unpremultiply(c[i], a), unpremultiply(c[i+1], a), unpremultiply(c[i+2], a)
	}
	p.normalize(dst, c, 4)
	return dst, nil
}

// nrgba64To8 keeps the high byte of every sample, as Pillow's "RGBA;16B"
// raw mode does.
func nrgba64To8(src *image.NRGBA64) *image.NRGBA {
	b := src.Bounds()
	m := image.NewNRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	for y := 0; y < b.Dy(); y++ {
		in := src.Pix[src.PixOffset(b.Min.X, b.Min.Y+y):][:8*b.Dx()]
		out := m.Pix[y*m.Stride:][:4*b.Dx()]
		for i := range out {
			out[i] = in[2*i]
		}
	}
	return m
}

// Resize resizes img to w×h exactly as Pillow 9.4's
// Image.resize((w, h), Image.BICUBIC) does on an RGB image.
func Resize(img *RGB, w, h int) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: resize: %w", err)
	}
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("data: resize: target size %dx%d", w, h)
	}
	out := NewRGB(w, h)
	resizeWindow(bicubicFilter, out.Pix, plane{pix: img.Pix, stride: 3 * img.W, nch: 3}, img.W, img.H, w, h, 0, 0, w, h)
	return out, nil
}

// CenterCrop returns the centred w×h crop of img (see CenterCropOffset).
// The crop must fit inside the image.
func CenterCrop(img *RGB, w, h int) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: center crop: %w", err)
	}
	if w <= 0 || h <= 0 || w > img.W || h > img.H {
		return nil, fmt.Errorf("data: center crop: %dx%d crop of a %dx%d image", w, h, img.W, img.H)
	}
	left, top := CenterCropOffset(img.W, img.H, w, h)
	out := NewRGB(w, h)
	for y := 0; y < h; y++ {
		copy(out.Pix[3*w*y:3*w*(y+1)], img.Pix[3*(img.W*(top+y)+left):])
	}
	return out, nil
}
