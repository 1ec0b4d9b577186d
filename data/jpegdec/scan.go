package jpegdec

import "encoding/binary"

// unzig maps a zig-zag index to its natural (row-major) position in a
// block (ITU T.81 figure A.6).
var unzig = [64]uint8{
	0, 1, 8, 16, 9, 2, 3, 10,
	17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34,
	27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36,
	29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46,
	53, 60, 61, 54, 47, 55, 62, 63,
}

// scanComp is one component of a scan.
type scanComp struct {
	ci     int // index in the frame
	h, v   int
	dc, ac *huffTable
	q      *[64]int32
	pred   int32 // DC predictor
	dst    []uint8
	stride int
}

// bitReader reads the entropy-coded data of a scan, most significant bit
// first, removing the 0x00 stuffed after 0xff. At a marker or the end of
// the data it appends zero bits and counts them in pad: a decode that
// consumed more than n-pad bits ran past the data, which image/jpeg
// reports as an error.
type bitReader struct {
	data []byte
	pos  int    // next byte to load
	acc  uint64 // unread bits, left-aligned
	n    uint   // number of bits in acc
	pad  uint   // number of those that are padding
}

// fill loads bytes until acc holds at least 57 bits.
func (r *bitReader) fill() {
	if r.pos+8 <= len(r.data) {
		w := binary.BigEndian.Uint64(r.data[r.pos:])
		x := ^w // a 0xff byte of w is a zero byte of x
		if (x-0x0101010101010101)&^x&0x8080808080808080 == 0 {
			k := (64 - r.n) >> 3 // whole bytes that fit
			w = w >> (64 - 8*k) << (64 - 8*k)
			r.acc |= w >> r.n
			r.n += 8 * k
			r.pos += int(k)
			return
		}
	}
	for r.n <= 56 {
		var c byte
		if r.pos < len(r.data) {
			c = r.data[r.pos]
			if c != 0xff {
				r.pos++
			} else if r.pos+1 < len(r.data) && r.data[r.pos+1] == 0 {
				r.pos += 2
			} else {
				c = 0
				r.pad += 8
			}
		} else {
			r.pad += 8
		}
		r.acc |= uint64(c) << (56 - r.n)
		r.n += 8
	}
}

// overrun reports whether more bits were consumed than the data holds.
func (r *bitReader) overrun() bool { return r.n < r.pad }

// align discards the bits of a partly consumed byte and returns the
// position of the first byte not consumed at all, which is where
// image/jpeg reads on from at the end of a scan or restart interval.
func (r *bitReader) align() int {
	k := (r.n - r.pad) >> 3 // whole bytes loaded but unread
	p := r.pos
	for range k {
		if p >= 2 && r.data[p-1] == 0 && r.data[p-2] == 0xff {
			p -= 2
		} else {
			p--
		}
	}
	return p
}

func (r *bitReader) reset(pos int) { *r = bitReader{data: r.data, pos: pos} }

func (d *decoder) decodeScan(sc []scanComp) error {
	h0, v0 := d.comp[0].h, d.comp[0].v
	mxx := (d.width + 8*h0 - 1) / (8 * h0)
	myy := (d.height + 8*v0 - 1) / (8 * v0)
	d.makeImg(mxx, myy)
	for i := range sc {
		c := &sc[i]
		switch {
		case d.img1 != nil:
			c.dst, c.stride = d.img1.Pix, d.img1.Stride
		case c.ci == 0:
			c.dst, c.stride = d.img3.Y, d.img3.YStride
		case c.ci == 1:
			c.dst, c.stride = d.img3.Cb, d.img3.CStride
		default:
			c.dst, c.stride = d.img3.Cr, d.img3.CStride
		}
	}
	r := bitReader{data: d.data, pos: d.pos}
	var blk [64]int32
	mcus := mxx * myy
	mcu := 0
	rst := uint8(mRST0)
	for my := range myy {
		for mx := range mxx {
			for i := range sc {
				c := &sc[i]
				for j := range c.h * c.v {
					bx := c.h*mx + j%c.h
					by := c.v*my + j/c.h
					if err := decodeBlock(&r, c, &blk); err != nil {
						return err
					}
					if r.overrun() {
						return malformed("short Huffman data")
					}
					off := 8 * (by*c.stride + bx)
					idctStore(&blk, c.dst[off:], c.stride)
				}
			}
			mcu++
			if d.ri > 0 && mcu%d.ri == 0 && mcu < mcus {
				p := r.align()
				for p+2 <= len(d.data) && d.data[p] == 0xff && d.data[p+1] == 0xff {
					p++ // fill bytes, which image/jpeg skips too
				}
				if p+2 > len(d.data) || d.data[p] != 0xff || d.data[p+1] != rst {
					return unsupported("restart marker not where expected")
				}
				rst++
				if rst > mRST7 {
					rst = mRST0
				}
				r.reset(p + 2)
				for i := range sc {
					sc[i].pred = 0
				}
			}
		}
	}
	d.pos = r.align()
	return nil
}

// decodeBlock decodes one block's coefficients, dequantised, into blk in
// natural order.
func decodeBlock(r *bitReader, c *scanComp, blk *[64]int32) error {
	*blk = [64]int32{}
	if r.n < 32 {
		r.fill()
	}
	acc, n := r.acc, r.n
	q := c.q

	// DC: a code (at most 16 bits) and up to 16 bits of difference.
	t := c.dc
	s, l := t.symbol(acc)
	if l == 0 {
		return malformed("bad Huffman code")
	}
	acc <<= l
	n -= l
	if s > 16 {
		return malformed("excessive DC component")
	}
	if s > 0 {
		v := extend(acc>>(64-s), s)
		acc <<= s
		n -= s
		c.pred += v
	}
	blk[0] = c.pred * q[0]

	// AC.
	t = c.ac
	for z := 1; z < 64; z++ {
		if n < 32 {
			r.acc, r.n = acc, n
			r.fill()
			acc, n = r.acc, r.n
		}
		i := acc >> (64 - lutBits)
		if f := t.ac[i]; f != 0 {
			// A short code and value: one look-up, unless the run
			// overflows the block (then image/jpeg reads no value).
			if nz := z + int(f>>8&0xff); nz <= 63 {
				ln := uint(f & 0xff)
				acc <<= ln
				n -= ln
				z = nz
				blk[unzig[z]] = (f >> 16) * q[z]
				continue
			}
		}
		if s, l = t.symbol(acc); l == 0 {
			return malformed("bad Huffman code")
		}
		acc <<= l
		n -= l
		run, size := int(s>>4), s&0x0f
		if size == 0 {
			if run == 0 { // end of block
				break
			}
			if run != 15 {
				// An end-of-band run: image/jpeg applies progressive
				// semantics to it even in sequential scans.
				return unsupported("end-of-band run in a sequential scan")
			}
			z += 15
			continue
		}
		z += run
		if z > 63 {
			break // image/jpeg ends the block here, reading no more bits
		}
		v := extend(acc>>(64-size), size)
		acc <<= size
		n -= size
		blk[unzig[z]] = v * q[z]
	}
	r.acc, r.n = acc, n
	return nil
}

// extend turns the size-bit magnitude category code x into the
// coefficient value it stands for (ITU T.81 figure F.12), without a branch
// (the sign is unpredictable).
func extend(x uint64, size uint) int32 {
	v := int32(x)
	neg := (v - 1<<(size-1)) >> 31 // -1 when the top bit of x is 0
	return v + neg&(-1<<size+1)
}
