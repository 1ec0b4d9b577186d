package corrupt

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	_ "image/png" // register the PNG decoder for Decode
	"io"
	"os"
)

// Image is an 8-bit RGB image, stored row by row with the three channels of
// a pixel next to each other (height × width × 3, "HWC"), as numpy holds it.
type Image struct {
	H, W int
	Pix  []uint8 // len H*W*3; Pix[(y*W+x)*3+c]
}

// NewImage returns a black h×w image.
func NewImage(h, w int) *Image {
	return &Image{H: h, W: w, Pix: make([]uint8, h*w*3)}
}

// Clone returns a deep copy of m.
func (m *Image) Clone() *Image {
	return &Image{H: m.H, W: m.W, Pix: append([]uint8(nil), m.Pix...)}
}

// valid reports whether m is a well-formed image.
func (m *Image) valid() error {
	switch {
	case m == nil:
		return fmt.Errorf("nil image")
	case m.H <= 0 || m.W <= 0:
		return fmt.Errorf("image is %d×%d", m.H, m.W)
	case len(m.Pix) != m.H*m.W*3:
		return fmt.Errorf("image %d×%d has %d bytes, want %d", m.H, m.W, len(m.Pix), m.H*m.W*3)
	}
	return nil
}

// FromImage converts any image.Image to RGB. Alpha is dropped without
// premultiplying (as cv2.imread and PIL's convert("RGB") do for RGBA files).
func FromImage(src image.Image) *Image {
	b := src.Bounds()
	m := NewImage(b.Dy(), b.Dx())
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			var r, g, bl uint8
			switch s := src.(type) {
			case *image.NRGBA:
				o := s.PixOffset(x, y)
				r, g, bl = s.Pix[o], s.Pix[o+1], s.Pix[o+2]
			case *image.Gray:
				v := s.Pix[s.PixOffset(x, y)]
				r, g, bl = v, v, v
			default:
				c := color.NRGBAModel.Convert(src.At(x, y)).(color.NRGBA)
				r, g, bl = c.R, c.G, c.B
			}
			m.Pix[i], m.Pix[i+1], m.Pix[i+2] = r, g, bl
			i += 3
		}
	}
	return m
}

// ToNRGBA returns m as an opaque *image.NRGBA.
func (m *Image) ToNRGBA() *image.NRGBA {
	out := image.NewNRGBA(image.Rect(0, 0, m.W, m.H))
	for i, j := 0, 0; i < len(m.Pix); i, j = i+3, j+4 {
		out.Pix[j], out.Pix[j+1], out.Pix[j+2], out.Pix[j+3] = m.Pix[i], m.Pix[i+1], m.Pix[i+2], 255
	}
	return out
}

// Decode reads a PNG or JPEG image with the standard library.
func Decode(r io.Reader) (*Image, error) {
	src, _, err := image.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("corrupt: decode: %w", err)
	}
	return FromImage(src), nil
}

// ReadFile decodes the PNG or JPEG file at path.
func ReadFile(path string) (*Image, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	m, err := Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("corrupt: %s: %w", path, err)
	}
	return m, nil
}

// EncodeJPEG writes m as a baseline JPEG (4:2:0, IJG tables scaled by
// quality) with Go's image/jpeg.
func EncodeJPEG(w io.Writer, m *Image, quality int) error {
	if err := m.valid(); err != nil {
		return fmt.Errorf("corrupt: encode jpeg: %w", err)
	}
	if quality < 1 || quality > 100 {
		return fmt.Errorf("corrupt: encode jpeg: quality %d outside 1…100", quality)
	}
	if err := jpeg.Encode(w, m.ToNRGBA(), &jpeg.Options{Quality: quality}); err != nil {
		return fmt.Errorf("corrupt: encode jpeg: %w", err)
	}
	return nil
}

// ImageNetCQuality is the JPEG quality make_imagenet_c.py stores its
// results with (PIL, optimize=True; optimisation only changes the Huffman
// tables, not the pixels).
const ImageNetCQuality = 85

// EncodeImageNetC writes a corrupted ImageNet image the way ImageNet-C stores
// it: a JPEG of quality 85. It is a separate step from Apply, whose result is
// the array before saving.
func EncodeImageNetC(w io.Writer, m *Image) error {
	return EncodeJPEG(w, m, ImageNetCQuality)
}

// jpegRoundTrip encodes m at the given quality and decodes it again.
func jpegRoundTrip(m *Image, quality int) (*Image, error) {
	var buf bytes.Buffer
	if err := EncodeJPEG(&buf, m, quality); err != nil {
		return nil, err
	}
	src, err := jpeg.Decode(&buf)
	if err != nil {
		return nil, fmt.Errorf("corrupt: jpeg round trip: %w", err)
	}
	return FromImage(src), nil
}
