package jpegdec

import (
	"bytes"
	"errors"
	"image"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// This file holds a small baseline JPEG encoder for the tests: image/jpeg's
// encoder writes only 4:2:0 colour and grey, without restart intervals,
// and with 8-bit quantisation tables.

// encOptions chooses the features of an encoded file.
type encOptions struct {
	gray    bool
	hY, vY  int    // luma sampling factors; chroma is sampled 1×1
	chromaY bool   // chroma sampled as luma (4:4:4 with hY×vY MCUs)
	ri      int    // restart interval in MCUs, 0 for none
	sof1    bool   // SOF1 instead of SOF0, with Huffman tables 2 and 3
	q16     bool   // 16-bit quantisation tables
	qscale  int    // quantisation step, at least 1
	fill    bool   // a fill byte before each marker after the scan data
	ids     string // component identifiers, "" for 1, 2, 3
	noJFIF  bool   // no APP0 JFIF segment
}

type bitWriter struct {
	out   []byte
	acc   uint32
	nbits uint
}

func (w *bitWriter) put(code uint32, n uint) {
	for i := int(n) - 1; i >= 0; i-- {
		w.acc = w.acc<<1 | (code>>uint(i))&1
		w.nbits++
		if w.nbits == 8 {
			w.byte(uint8(w.acc))
			w.acc, w.nbits = 0, 0
		}
	}
}

func (w *bitWriter) byte(c uint8) {
	w.out = append(w.out, c)
	if c == 0xff {
		w.out = append(w.out, 0)
	}
}

// flush pads the last byte with 1 bits.
func (w *bitWriter) flush() {
	for w.nbits != 0 {
		w.put(1, 1)
	}
}

// The test Huffman codes: DC categories 0..11 as 4-bit codes 0..11; AC
// symbols EOB, ZRL and every (run, size) with size 1..10 as 8-bit codes,
// in that order.
var acSyms = func() []uint8 {
	s := []uint8{0x00, 0xf0}
	for run := range 16 {
		for size := 1; size <= 10; size++ {
			s = append(s, uint8(run<<4|size))
		}
	}
	return s
}()

func category(v int) (uint, uint32) {
	a := v
	if a < 0 {
		a = -a
	}
	n := uint(0)
	for a>>n != 0 {
		n++
	}
	if v < 0 {
		v += 1<<n - 1
	}
	return n, uint32(v) & (1<<n - 1)
}

// encode writes m (an *image.Gray or an RGB image) as a baseline JPEG.
func encode(t testing.TB, m image.Image, o encOptions) []byte {
	t.Helper()
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	nc := 3
	if o.gray {
		nc = 1
		o.hY, o.vY = 1, 1
	}
	// Planes at full resolution, JFIF YCbCr, level-shifted.
	planes := make([][]float64, nc)
	for c := range planes {
		planes[c] = make([]float64, w*h)
	}
	for y := range h {
		for x := range w {
			r, g, bl, _ := m.At(b.Min.X+x, b.Min.Y+y).RGBA()
			R, G, B := float64(r>>8), float64(g>>8), float64(bl>>8)
			Y := 0.299*R + 0.587*G + 0.114*B
			planes[0][y*w+x] = Y - 128
			if nc == 3 {
				planes[1][y*w+x] = -0.168736*R - 0.331264*G + 0.5*B
				planes[2][y*w+x] = 0.5*R - 0.418688*G - 0.081312*B
			}
		}
	}
	mxx := (w + 8*o.hY - 1) / (8 * o.hY)
	myy := (h + 8*o.vY - 1) / (8 * o.vY)
	hs, vs := make([]int, nc), make([]int, nc)
	for c := range nc {
		hs[c], vs[c] = 1, 1
		if c == 0 || o.chromaY {
			hs[c], vs[c] = o.hY, o.vY
		}
	}
	// sample returns component c at block-grid position (x, y), chroma
	// box-averaged, edges replicated.
	sample := func(c, x, y int) float64 {
		fx, fy := o.hY/hs[c], o.vY/vs[c]
		s := 0.0
		for dy := range fy {
			for dx := range fx {
				xx, yy := min(x*fx+dx, w-1), min(y*fy+dy, h-1)
				s += planes[c][yy*w+xx]
			}
		}
		return s / float64(fx*fy)
	}
	var quant [2][64]int // zig-zag order
	for z := range 64 {
		quant[0][z] = max(1, o.qscale*(1+z/4))
		quant[1][z] = max(1, o.qscale*(2+z/3))
		if z > 0 {
			quant[0][z] = max(2, quant[0][z])
			quant[1][z] = max(2, quant[1][z])
		}
	}
	var out []byte
	seg := func(marker uint8, p []byte) {
		out = append(out, 0xff, marker, uint8((len(p)+2)>>8), uint8(len(p)+2))
		out = append(out, p...)
	}
	out = append(out, 0xff, mSOI)
	if !o.noJFIF {
		seg(mAPP0, []byte("JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"))
	}
	id := func(c int) uint8 {
		if o.ids != "" {
			return o.ids[c]
		}
		return uint8(c + 1)
	}
	for i := range 2 {
		if o.q16 {
			p := []byte{0x10 | uint8(i)}
			for _, q := range quant[i] {
				p = append(p, uint8(q>>8), uint8(q))
			}
			seg(mDQT, p)
		} else {
			p := []byte{uint8(i)}
			for _, q := range quant[i] {
				p = append(p, uint8(q))
			}
			seg(mDQT, p)
		}
	}
	sof := []byte{8, uint8(h >> 8), uint8(h), uint8(w >> 8), uint8(w), uint8(nc)}
	for c := range nc {
		sof = append(sof, id(c), uint8(hs[c]<<4|vs[c]), uint8(min(c, 1)))
	}
	marker, tab := uint8(mSOF0), uint8(0)
	if o.sof1 {
		marker, tab = mSOF1, 2
	}
	seg(marker, sof)
	for _, th := range []uint8{tab, tab + 1} {
		dc := []byte{0x00 | th, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		for s := range 12 {
			dc = append(dc, uint8(s))
		}
		seg(mDHT, dc)
		ac := []byte{0x10 | th, 0, 0, 0, 0, 0, 0, 0, uint8(len(acSyms)), 0, 0, 0, 0, 0, 0, 0, 0}
		seg(mDHT, append(ac, acSyms...))
	}
	if o.ri > 0 {
		seg(mDRI, []byte{uint8(o.ri >> 8), uint8(o.ri)})
	}
	sos := []byte{uint8(nc)}
	for c := range nc {
		th := tab + uint8(min(c, 1))
		sos = append(sos, id(c), th<<4|th)
	}
	seg(mSOS, append(sos, 0, 63, 0))

	bw := &bitWriter{}
	pred := make([]int, nc)
	var blk [64]float64
	rst := 0
	for my := range myy {
		for mx := range mxx {
			for c := range nc {
				qt := &quant[min(c, 1)]
				for j := range hs[c] * vs[c] {
					bx, by := hs[c]*mx+j%hs[c], vs[c]*my+j/hs[c]
					for y := range 8 {
						for x := range 8 {
							blk[y*8+x] = sample(c, 8*bx+x, 8*by+y)
						}
					}
					coef := fdct(&blk)
					var zz [64]int
					for z := range 64 {
						v := int(math.Round(coef[unzig[z]] / float64(qt[z])))
						zz[z] = max(-1023, min(1023, v))
					}
					n, bits := category(zz[0] - pred[c])
					pred[c] = zz[0]
					bw.put(uint32(n), 4)
					bw.put(bits, n)
					run := 0
					for z := 1; z < 64; z++ {
						if zz[z] == 0 {
							run++
							continue
						}
						for run > 15 {
							bw.put(1, 8) // ZRL
							run -= 16
						}
						n, bits := category(zz[z])
						bw.put(uint32(2+run*10+int(n)-1), 8)
						bw.put(bits, n)
						run = 0
					}
					if run > 0 {
						bw.put(0, 8) // EOB
					}
				}
			}
			if o.ri > 0 && (my*mxx+mx+1)%o.ri == 0 && my*mxx+mx+1 < mxx*myy {
				bw.flush()
				if o.fill {
					bw.out = append(bw.out, 0xff)
				}
				bw.out = append(bw.out, 0xff, uint8(mRST0+rst))
				rst = (rst + 1) % 8
			}
		}
	}
	bw.flush()
	out = append(out, bw.out...)
	if o.fill {
		out = append(out, 0xff)
	}
	return append(out, 0xff, mEOI)
}

// fdct is the textbook 8×8 forward DCT (ITU T.81 A.3.3).
func fdct(b *[64]float64) (out [64]float64) {
	for v := range 8 {
		for u := range 8 {
			s := 0.0
			for y := range 8 {
				for x := range 8 {
					s += b[y*8+x] * math.Cos(float64(2*x+1)*float64(u)*math.Pi/16) * math.Cos(float64(2*y+1)*float64(v)*math.Pi/16)
				}
			}
			cu, cv := 1.0, 1.0
			if u == 0 {
				cu = 1 / math.Sqrt2
			}
			if v == 0 {
				cv = 1 / math.Sqrt2
			}
			out[v*8+u] = cu * cv * s / 4
		}
	}
	return out
}

// ownJPEGs returns files of this encoder covering the sampling ratios the
// fast path takes, restart intervals, SOF1 with tables 2 and 3, 16-bit
// quantisation tables and fill bytes.
func ownJPEGs(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	type cs struct {
		name string
		o    encOptions
	}
	cases := []cs{
		{"444", encOptions{hY: 1, vY: 1}},
		{"422", encOptions{hY: 2, vY: 1}},
		{"440", encOptions{hY: 1, vY: 2}},
		{"420", encOptions{hY: 2, vY: 2}},
		{"444-mcu21", encOptions{hY: 2, vY: 1, chromaY: true}},
		{"444-mcu12", encOptions{hY: 1, vY: 2, chromaY: true}},
		{"gray", encOptions{gray: true}},
		{"420-ri1", encOptions{hY: 2, vY: 2, ri: 1}},
		{"422-ri3", encOptions{hY: 2, vY: 1, ri: 3}},
		{"444-ri7-fill", encOptions{hY: 1, vY: 1, ri: 7, fill: true}},
		{"gray-ri5", encOptions{gray: true, ri: 5}},
		{"420-sof1-q16", encOptions{hY: 2, vY: 2, sof1: true, q16: true}},
		{"422-sof1-ri2", encOptions{hY: 2, vY: 1, sof1: true, ri: 2}},
	}
	sizes := [][2]int{{1, 1}, {7, 13}, {17, 9}, {40, 24}, {67, 45}}
	for _, c := range cases {
		for _, sz := range sizes {
			for _, qs := range []int{1, 4, 30} {
				o := c.o
				o.qscale = qs
				m := testImage(sz[0], sz[1], o.gray, uint64(sz[0]+sz[1]))
				out[c.name+"/"+string(rune('0'+qs%10))+"/"+itoa(sz[0])+"x"+itoa(sz[1])] = encode(t, m, o)
			}
		}
	}
	return out
}

func itoa(i int) string {
	var buf bytes.Buffer
	if i >= 10 {
		buf.WriteString(itoa(i / 10))
	}
	buf.WriteByte(byte('0' + i%10))
	return buf.String()
}

// TestOwnEncoded compares Decode with image/jpeg on files with the
// sampling ratios, restart intervals and table kinds image/jpeg's encoder
// does not write.
func TestOwnEncoded(t *testing.T) {
	files := ownJPEGs(t)
	for name, b := range files {
		if !check(t, name, b) {
			_, err := Decode(b)
			_, jerr := jpegDecode(b)
			t.Errorf("%s: not decoded by the fast path: %v (image/jpeg: %v)", name, err, jerr)
		}
	}
	t.Logf("%d JPEGs", len(files))
}

// TestLeftToImageJPEG checks that files of kinds the fast path does not
// take are declined with ErrUnsupported while image/jpeg decodes them.
func TestLeftToImageJPEG(t *testing.T) {
	m := testImage(40, 24, false, 9)
	base := encode(t, m, encOptions{hY: 2, vY: 2, qscale: 2})
	cases := map[string][]byte{
		"4:1:1": encode(t, m, encOptions{hY: 4, vY: 1, qscale: 2}),
		// image/jpeg converts these to RGBA.
		"RGB component names": encode(t, m, encOptions{hY: 1, vY: 1, qscale: 2, ids: "RGB", noJFIF: true}),
		"Adobe APP14": func() []byte {
			app14 := []byte{0xff, mAPPE, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 1}
			return append(append(bytes.Clone(base[:2]), app14...), base[2:]...)
		}(),
	}
	if jp, err := os.ReadFile(filepath.Join(fixture.SharedDir(), "assets/corruptions/frost4.jpg")); err == nil {
		cases["progressive"] = jp
	}
	for name, b := range cases {
		_, err := Decode(b)
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: Decode error %v, want ErrUnsupported", name, err)
		}
		if _, err := jpegDecode(b); err != nil {
			t.Errorf("%s: image/jpeg: %v", name, err)
		}
	}
}
