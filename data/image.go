package data

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // registered so that GIF files decode too
	_ "image/jpeg"
	_ "image/png"
	"os"

	"github.com/subtta/subtta/data/jpegdec"
)

// MaxImagePixels is the largest image, in pixels, that Decode accepts.
// It is Pillow's decompression-bomb limit (2 × Image.MAX_IMAGE_PIXELS); it
// stops a small corrupt or hostile header from making the decoder allocate
// gigabytes.
const MaxImagePixels = 178956970

// RGB is an 8-bit RGB image, stored row-major and interleaved (HWC): the
// channels of pixel (x, y) are Pix[3*(y*W+x) : 3*(y*W+x)+3].
type RGB struct {
	W, H int
	Pix  []uint8
}

// NewRGB returns a black w×h image.
func NewRGB(w, h int) *RGB {
	return &RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)}
}

// check reports whether m is a well-formed, non-empty image.
func (m *RGB) check() error {
	switch {
	case m == nil:
		return errors.New("nil image")
	case m.W <= 0 || m.H <= 0:
		return fmt.Errorf("empty image %dx%d", m.W, m.H)
	case len(m.Pix) != 3*m.W*m.H:
		return fmt.Errorf("image %dx%d has %d bytes of pixels, want %d", m.W, m.H, len(m.Pix), 3*m.W*m.H)
	}
	return nil
}

// ReadImage reads and decodes the PNG, JPEG or GIF file at path.
// See Decode.
func ReadImage(path string) (image.Image, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err) // the os error names the file
	}
	return Decode(path, b)
}

// ReadRGB reads the image file at path and converts it to RGB as Pillow's
// Image.open(path).convert("RGB") does (see ToRGB).
func ReadRGB(path string) (*RGB, error) {
	img, err := ReadImage(path)
	if err != nil {
		return nil, err
	}
	return ToRGB(img), nil
}

// DecodeRGB decodes an encoded image and converts it to RGB (see Decode and
// ToRGB). name is used in error messages only; dataset readers pass the file
// or archive member the bytes came from.
func DecodeRGB(name string, b []byte) (*RGB, error) {
	img, err := Decode(name, b)
	if err != nil {
		return nil, err
	}
	return ToRGB(img), nil
}

// Decode decodes a PNG, JPEG or GIF image (the first frame of a GIF). It
// returns an error naming name for an unknown format, a corrupt or truncated
// file, an empty image, or one larger than MaxImagePixels. Baseline JPEGs
// are decoded by data/jpegdec, which returns image/jpeg's image bit for
// bit; every other file by the standard library's decoders.
func Decode(name string, b []byte) (image.Image, error) {
	return decode(name, b, MaxImagePixels)
}

func decode(name string, b []byte, maxPixels int) (img image.Image, err error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, decodeError(name, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, fmt.Errorf("data: %s: %s image has no pixels (%dx%d)", name, format, cfg.Width, cfg.Height)
	}
	if cfg.Width > maxPixels/cfg.Height {
		return nil, fmt.Errorf("data: %s: %s image is %dx%d, more than %d pixels", name, format, cfg.Width, cfg.Height, maxPixels)
	}
	// The standard decoders are fuzzed upstream; this only turns a decoder
	// bug into an error instead of taking the whole evaluation down.
	defer func() {
		if r := recover(); r != nil {
			img, err = nil, fmt.Errorf("data: %s: %s decoder failed: %v", name, format, r)
		}
	}()
	if format == "jpeg" && fastJPEG {
		// The fast decoder returns image/jpeg's image for the files it
		// takes (baseline ones); image/jpeg decodes, or rejects, the rest,
		// so what Decode returns is unchanged.
		if img, err := jpegdec.Decode(b); err == nil {
			return img, nil
		}
	}
	img, _, err = image.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, decodeError(name, err)
	}
	return img, nil
}

// fastJPEG turns the fast JPEG decoder on; tests turn it off to compare.
var fastJPEG = true

func decodeError(name string, err error) error {
	if errors.Is(err, image.ErrFormat) {
		return fmt.Errorf("data: %s: unsupported image format (want PNG, JPEG or GIF): %w", name, err)
	}
	return fmt.Errorf("data: %s: corrupt image: %w", name, err)
}

// ToRGB converts img to 8-bit RGB the way Pillow's convert("RGB") converts
// the image Pillow decodes from the same file:
//   - alpha is dropped, keeping the straight (un-premultiplied) colour: Go
//     decodes PNG RGBA and grey+alpha to NRGBA, whose colour is used as is;
//     a premultiplied *image.RGBA is un-premultiplied as Pillow's RGBa→RGBA;
//   - grey is replicated, palettes are looked up (straight colour);
//   - 16-bit samples keep their high byte (Pillow's "RGB;16B" raw modes).
//     Pillow 9.4 opens 16-bit greyscale PNGs as mode "I" and its "I"→"RGB"
//     conversion clamps to 255 instead; this function keeps the high byte;
//   - CMYK uses Pillow's cmyk2rgb;
//   - YCbCr (JPEG) is upsampled and converted with libjpeg's arithmetic;
//     JPEGs still differ slightly from libjpeg's, as Go's inverse DCT
//     differs (see the package doc).
func ToRGB(img image.Image) *RGB {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	m := NewRGB(w, h)
	p := m.Pix
	switch src := img.(type) {
	case *image.NRGBA:
		for y := 0; y < h; y++ {
			row := src.Pix[src.PixOffset(b.Min.X, b.Min.Y+y):]
			out := p[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				out[3*x], out[3*x+1], out[3*x+2] = row[4*x], row[4*x+1], row[4*x+2]
			}
		}
	case *image.RGBA:
		for y := 0; y < h; y++ {
			row := src.Pix[src.PixOffset(b.Min.X, b.Min.Y+y):]
			out := p[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				a := row[4*x+3]
				out[3*x], out[3*x+1], out[3*x+2] = unpremultiply(row[4*x], a), unpremultiply(row[4*x+1], a), unpremultiply(row[4*x+2], a)
			}
		}
	case *image.Gray:
		for y := 0; y < h; y++ {
			row := src.Pix[src.PixOffset(b.Min.X, b.Min.Y+y):]
			out := p[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				v := row[x]
				out[3*x], out[3*x+1], out[3*x+2] = v, v, v
			}
		}
	case *image.Gray16:
		for y := 0; y < h; y++ {
			row := src.Pix[src.PixOffset(b.Min.X, b.Min.Y+y):]
			out := p[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				v := row[2*x] // big-endian: the high byte
				out[3*x], out[3*x+1], out[3*x+2] = v, v, v
			}
		}
	case *image.NRGBA64:
		for y := 0; y < h; y++ {
			row := src.Pix[src.PixOffset(b.Min.X, b.Min.Y+y):]
			out := p[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				out[3*x], out[3*x+1], out[3*x+2] = row[8*x], row[8*x+2], row[8*x+4]
			}
		}
	case *image.Paletted:
		var lut [256][3]uint8 // indices past the palette read black
		for i, c := range src.Palette {
			if i == len(lut) {
				break
			}
			lut[i] = straightRGB(c)
		}
		for y := 0; y < h; y++ {
			row := src.Pix[src.PixOffset(b.Min.X, b.Min.Y+y):]
			out := p[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				c := lut[row[x]]
				out[3*x], out[3*x+1], out[3*x+2] = c[0], c[1], c[2]
			}
		}
	case *image.YCbCr:
		ycbcrToRGB(p, src)
	case *image.NYCbCrA:
		ycbcrToRGB(p, &src.YCbCr)
	case *image.CMYK:
		for y := 0; y < h; y++ {
			row := src.Pix[src.PixOffset(b.Min.X, b.Min.Y+y):]
			out := p[3*w*y : 3*w*(y+1)]
			for x := 0; x < w; x++ {
				out[3*x], out[3*x+1], out[3*x+2] = cmykToRGB(row[4*x], row[4*x+1], row[4*x+2], row[4*x+3])
			}
		}
	default:
		i := 0
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := straightRGB(img.At(x, y))
				p[i], p[i+1], p[i+2] = c[0], c[1], c[2]
				i += 3
			}
		}
	}
	return m
}

// straightRGB returns the un-premultiplied 8-bit colour of c.
func straightRGB(c color.Color) [3]uint8 {
	switch c := c.(type) {
	case color.NRGBA:
		return [3]uint8{c.R, c.G, c.B}
	case color.RGBA:
		return [3]uint8{unpremultiply(c.R, c.A), unpremultiply(c.G, c.A), unpremultiply(c.B, c.A)}
	case color.Gray:
		return [3]uint8{c.Y, c.Y, c.Y}
	case color.CMYK:
		r, g, b := cmykToRGB(c.C, c.M, c.Y, c.K)
		return [3]uint8{r, g, b}
	}
	n := color.NRGBA64Model.Convert(c).(color.NRGBA64)
	return [3]uint8{uint8(n.R >> 8), uint8(n.G >> 8), uint8(n.B >> 8)}
}

// muldiv255 is Pillow's MULDIV255: a·b/255, rounded, in integers.
func muldiv255(a, b uint8) uint8 {
	t := uint32(a)*uint32(b) + 128
	return uint8(((t >> 8) + t) >> 8)
}

// unpremultiply is Pillow's RGBa→RGBA step for one channel (rgba2rgbA):
// truncating division, colour kept as is for alpha 0 and 255.
func unpremultiply(c, a uint8) uint8 {
	if a == 255 || a == 0 {
		return c
	}
	v := 255 * uint32(c) / uint32(a)
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// cmykToRGB is Pillow's cmyk2rgb.
func cmykToRGB(c, m, y, k uint8) (uint8, uint8, uint8) {
	nk := 255 - k
	return nk - muldiv255(c, nk), nk - muldiv255(m, nk), nk - muldiv255(y, nk)
}
