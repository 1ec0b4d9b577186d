package jpegdec

import (
	"errors"
	"fmt"
	"image"
)

// ErrUnsupported is returned for a JPEG file of a kind this package does
// not decode (see the package documentation); image/jpeg may decode it.
var ErrUnsupported = errors.New("jpegdec: unsupported JPEG")

// errFormat is returned for malformed data; image/jpeg decides what the
// file is.
var errFormat = errors.New("jpegdec: malformed JPEG")

// errInternal is returned when the decoder panicked: a bug, reported as an
// error so that the caller can still decode with image/jpeg.
var errInternal = errors.New("jpegdec: internal error")

func unsupported(what string) error { return fmt.Errorf("%w: %s", ErrUnsupported, what) }

func malformed(what string) error { return fmt.Errorf("%w: %s", errFormat, what) }

// Markers (ITU T.81 table B.1).
const (
	mSOF0 = 0xc0
	mSOF1 = 0xc1
	mDHT  = 0xc4
	mRST0 = 0xd0
	mRST7 = 0xd7
	mSOI  = 0xd8
	mEOI  = 0xd9
	mSOS  = 0xda
	mDQT  = 0xdb
	mDRI  = 0xdd
	mAPP0 = 0xe0
	mAPPE = 0xee
	mAPPF = 0xef
	mCOM  = 0xfe
)

type component struct {
	id   uint8
	h, v int // sampling factors
	tq   uint8
}

type decoder struct {
	data []byte
	pos  int

	width, height int
	nComp         int
	comp          [3]component
	sofSeen       bool
	baseline      bool
	ri            int // restart interval in MCUs, 0 for none
	adobe         bool

	quant [4][64]int32 // in zig-zag order, as the DQT segments store them
	huff  [2][4]huffTable

	img1 *image.Gray
	img3 *image.YCbCr
}

// Decode decodes a JPEG file that this package handles (see the package
// documentation) into an *image.Gray or *image.YCbCr equal to what
// image/jpeg.Decode returns for b. For any other file it returns an
// error, ErrUnsupported for well-formed files of kinds it does not
// decode; the caller then decodes b with image/jpeg, which decides whether
// and how the file decodes. The caller is expected to have bounded the
// image size (for example with image.DecodeConfig).
func Decode(b []byte) (img image.Image, err error) {
	defer func() {
		if r := recover(); r != nil {
			img, err = nil, fmt.Errorf("%w: %v", errInternal, r)
		}
	}()
	d := &decoder{data: b}
	return d.decode()
}

// next returns the next marker after d.pos, skipping what image/jpeg's
// marker loop skips between segments: bytes other than 0xff, 0xff00
// pairs, fill bytes and RST markers.
func (d *decoder) next() (uint8, error) {
	b := d.data
	for {
		// image/jpeg reads two bytes and shifts by one until the first is
		// 0xff.
		if d.pos+2 > len(b) {
			return 0, malformed("unexpected end of file")
		}
		for b[d.pos] != 0xff {
			d.pos++
			if d.pos+2 > len(b) {
				return 0, malformed("unexpected end of file")
			}
		}
		m := b[d.pos+1]
		d.pos += 2
		if m == 0 {
			continue
		}
		for m == 0xff {
			if d.pos >= len(b) {
				return 0, malformed("unexpected end of file")
			}
			m = b[d.pos]
			d.pos++
		}
		if mRST0 <= m && m <= mRST7 {
			continue
		}
		return m, nil
	}
}

func (d *decoder) decode() (image.Image, error) {
	b := d.data
	if len(b) < 2 || b[0] != 0xff || b[1] != mSOI {
		return nil, malformed("missing SOI marker")
	}
	d.pos = 2
	for {
		m, err := d.next()
		if err != nil {
			return nil, err
		}
		if m == mEOI {
			return nil, malformed("missing SOS marker")
		}
		if d.pos+2 > len(b) {
			return nil, malformed("unexpected end of file")
		}
		n := int(b[d.pos])<<8 | int(b[d.pos+1]) - 2
		d.pos += 2
		if n < 0 {
			return nil, malformed("short segment length")
		}
		if d.pos+n > len(b) {
			return nil, malformed("unexpected end of file")
		}
		seg := b[d.pos : d.pos+n]
		d.pos += n
		switch {
		case m == mSOF0 || m == mSOF1:
			err = d.processSOF(seg, m == mSOF0)
		case m == mDHT:
			err = d.processDHT(seg)
		case m == mDQT:
			err = d.processDQT(seg)
		case m == mDRI:
			if n != 2 {
				return nil, malformed("DRI has wrong length")
			}
			d.ri = int(seg[0])<<8 | int(seg[1])
		case m == mAPPE:
			// image/jpeg reads the Adobe transform from it and may
			// convert the image to RGBA or CMYK: leave such files to it.
			if n >= 12 && string(seg[:5]) == "Adobe" {
				d.adobe = true
			}
		case mAPP0 <= m && m <= mAPPF || m == mCOM:
			// Ignored (APP0's JFIF flag only matters to image/jpeg for
			// files this package declines: RGB and Adobe ones).
		case m == mSOS:
			if err := d.processSOS(seg); err != nil {
				return nil, err
			}
			if err := d.finish(); err != nil {
				return nil, err
			}
			if d.img1 != nil {
				return d.img1, nil
			}
			return d.img3, nil
		default:
			return nil, unsupported(fmt.Sprintf("marker 0x%02x", m))
		}
		if err != nil {
			return nil, err
		}
	}
}

// finish checks that what follows the scan is what image/jpeg reads to the
// end without changing the image: anything but 0xff bytes, 0xff00 pairs,
// fill bytes and RST markers, then EOI.
func (d *decoder) finish() error {
	m, err := d.next()
	if err != nil {
		return err
	}
	if m != mEOI {
		return unsupported(fmt.Sprintf("marker 0x%02x after the scan", m))
	}
	return nil
}

func (d *decoder) processSOF(s []byte, baseline bool) error {
	if d.sofSeen {
		return malformed("multiple SOF markers")
	}
	d.sofSeen = true
	d.baseline = baseline
	switch len(s) {
	case 6 + 3*1:
		d.nComp = 1
	case 6 + 3*3:
		d.nComp = 3
	default:
		return unsupported("number of components")
	}
	if s[0] != 8 {
		return unsupported("precision")
	}
	d.height = int(s[1])<<8 | int(s[2])
	d.width = int(s[3])<<8 | int(s[4])
	if int(s[5]) != d.nComp {
		return malformed("SOF has wrong length")
	}
	if d.width == 0 || d.height == 0 {
		return unsupported("empty image or DNL marker")
	}
	for i := range d.nComp {
		c := &d.comp[i]
		c.id = s[6+3*i]
		for j := range i {
			if d.comp[j].id == c.id {
				return malformed("repeated component identifier")
			}
		}
		c.tq = s[8+3*i]
		if c.tq > 3 {
			return malformed("bad Tq value")
		}
		hv := s[7+3*i]
		c.h, c.v = int(hv>>4), int(hv&0x0f)
		if c.h < 1 || c.h > 4 || c.v < 1 || c.v > 4 || c.h == 3 || c.v == 3 {
			return unsupported("sampling factors")
		}
		if d.nComp == 1 {
			c.h, c.v = 1, 1 // image/jpeg ignores them too
		}
	}
	if d.nComp == 3 {
		y, cb, cr := d.comp[0], d.comp[1], d.comp[2]
		if cb.h != cr.h || cb.v != cr.v {
			return unsupported("sampling factors")
		}
		sameAsY := cb.h == y.h && cb.v == y.v
		if !(cb.h == 1 && cb.v == 1 && y.h <= 2 && y.v <= 2) && !(sameAsY && y.h*y.v <= 2) {
			return unsupported("sampling factors")
		}
		if y.id == 'R' && cb.id == 'G' && cr.id == 'B' {
			return unsupported("RGB components")
		}
	}
	return nil
}

func (d *decoder) processDQT(s []byte) error {
	for len(s) > 0 {
		pq, tq := s[0]>>4, s[0]&0x0f
		s = s[1:]
		if tq > 3 {
			return malformed("bad Tq value")
		}
		q := &d.quant[tq]
		switch pq {
		case 0:
			if len(s) < 64 {
				return malformed("DQT has wrong length")
			}
			for i := range q {
				q[i] = int32(s[i])
			}
			s = s[64:]
		case 1:
			if len(s) < 128 {
				return malformed("DQT has wrong length")
			}
			for i := range q {
				q[i] = int32(s[2*i])<<8 | int32(s[2*i+1])
			}
			s = s[128:]
		default:
			return malformed("bad Pq value")
		}
	}
	return nil
}

func (d *decoder) processDHT(s []byte) error {
	for len(s) > 0 {
		if len(s) < 17 {
			return malformed("DHT has wrong length")
		}
		tc, th := s[0]>>4, s[0]&0x0f
		if tc > 1 {
			return malformed("bad Tc value")
		}
		if th > 3 || (d.baseline && th > 1) {
			return malformed("bad Th value")
		}
		var counts [16]int
		total := 0
		for i := range counts {
			counts[i] = int(s[1+i])
			total += counts[i]
		}
		if total == 0 || total > 256 || len(s) < 17+total {
			return malformed("DHT has wrong length")
		}
		if err := d.huff[tc][th].build(counts, s[17:17+total]); err != nil {
			return err
		}
		s = s[17+total:]
	}
	return nil
}

func (d *decoder) processSOS(s []byte) error {
	if !d.sofSeen {
		return malformed("missing SOF marker")
	}
	n := len(s)
	if n < 6 || n > 4+2*d.nComp || n%2 != 0 {
		return malformed("SOS has wrong length")
	}
	ns := int(s[0])
	if n != 4+2*ns {
		return malformed("SOS length inconsistent with number of components")
	}
	if ns != d.nComp {
		return unsupported("scan without every component")
	}
	if d.adobe {
		return unsupported("Adobe APP14 marker")
	}
	var sc [3]scanComp
	totalHV := 0
	for i := range ns {
		id := s[1+2*i]
		ci := -1
		for j := range d.nComp {
			if d.comp[j].id == id {
				ci = j
			}
		}
		if ci < 0 {
			return malformed("unknown component selector")
		}
		for j := range i {
			if sc[j].ci == ci {
				return malformed("repeated component selector")
			}
		}
		td, ta := s[2+2*i]>>4, s[2+2*i]&0x0f
		if td > 3 || ta > 3 || d.baseline && (td > 1 || ta > 1) {
			return malformed("bad Td or Ta value")
		}
		if !d.huff[0][td].defined || !d.huff[1][ta].defined {
			return malformed("uninitialized Huffman table")
		}
		c := &d.comp[ci]
		sc[i] = scanComp{ci: ci, h: c.h, v: c.v, dc: &d.huff[0][td], ac: &d.huff[1][ta], q: &d.quant[c.tq]}
		totalHV += c.h * c.v
	}
	if d.nComp > 1 && totalHV > 10 {
		return malformed("total sampling factors too large")
	}
	return d.decodeScan(sc[:ns])
}

// makeImg allocates the image as image/jpeg does: whole MCUs, then the
// visible rectangle as a sub-image.
func (d *decoder) makeImg(mxx, myy int) {
	h0, v0 := d.comp[0].h, d.comp[0].v
	if d.nComp == 1 {
		m := image.NewGray(image.Rect(0, 0, 8*mxx, 8*myy))
		d.img1 = m.SubImage(image.Rect(0, 0, d.width, d.height)).(*image.Gray)
		return
	}
	var r image.YCbCrSubsampleRatio
	switch (h0/d.comp[1].h)<<4 | v0/d.comp[1].v {
	case 0x11:
		r = image.YCbCrSubsampleRatio444
	case 0x12:
		r = image.YCbCrSubsampleRatio440
	case 0x21:
		r = image.YCbCrSubsampleRatio422
	case 0x22:
		r = image.YCbCrSubsampleRatio420
	default:
		panic("jpegdec: unexpected sampling ratio") // excluded by processSOF
	}
	m := image.NewYCbCr(image.Rect(0, 0, 8*h0*mxx, 8*v0*myy), r)
	d.img3 = m.SubImage(image.Rect(0, 0, d.width, d.height)).(*image.YCbCr)
}
