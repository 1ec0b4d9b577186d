package jpegdec

// lutBits is the length of the codes a huffTable decodes with one look-up.
const lutBits = 10

// huffTable is a canonical Huffman code (ITU T.81 annex C): a look-up
// table for codes of up to lutBits bits and the per-length code ranges
// (annex F.2.2.3) for longer ones.
type huffTable struct {
	defined bool
	// lut, indexed by the next lutBits bits, is symbol<<8 | code length,
	// or 0 where the code is longer than lutBits.
	lut [1 << lutBits]uint16
	// ac, for an AC table, is for the next lutBits bits that hold a code
	// of run r and size s > 0 and its s bits, the coefficient value v and
	// the total length n as v<<16 | r<<8 | n, or 0.
	ac [1 << lutBits]int32
	// maxCode[l] is the largest code of length l, or -1; the symbol of
	// code c of length l is vals[valPtr[l]+c-minCode[l]].
	maxCode, minCode, valPtr [17]int32
	vals                     [256]uint8
}

// build makes the table from a DHT segment's counts of codes per length
// (1 to 16 bits) and its symbols. It refuses a code set that does not fit
// in the code space (more codes of some length than remain), on which
// image/jpeg's table and this one could disagree.
func (t *huffTable) build(counts [16]int, vals []uint8) error {
	*t = huffTable{defined: true}
	copy(t.vals[:], vals)
	code, k := int32(0), int32(0)
	for l := 1; l <= 16; l++ {
		n := int32(counts[l-1])
		if n == 0 {
			t.maxCode[l], t.minCode[l], t.valPtr[l] = -1, -1, -1
		} else {
			t.minCode[l], t.maxCode[l], t.valPtr[l] = code, code+n-1, k
		}
		for range n {
			if code >= 1<<l {
				return malformed("Huffman code set does not fit")
			}
			if l <= lutBits {
				shift := lutBits - l
				e := uint16(vals[k])<<8 | uint16(l)
				base := code << shift
				for i := range int32(1) << shift {
					t.lut[base+i] = e
				}
			}
			code++
			k++
		}
		code <<= 1
	}
	for i, e := range t.lut {
		l, sym := uint(e&0xff), uint(e>>8)
		run, size := sym>>4, sym&0x0f
		if e == 0 || size == 0 || l+size > lutBits {
			continue
		}
		x := uint64(i>>(lutBits-l-size)) & (1<<size - 1)
		t.ac[i] = extend(x, size)<<16 | int32(run<<8) | int32(l+size)
	}
	return nil
}

// symbol decodes the code at the top of acc: its symbol and length, or
// length 0 for no code.
func (t *huffTable) symbol(acc uint64) (sym, length uint) {
	if e := t.lut[acc>>(64-lutBits)]; e != 0 {
		return uint(e >> 8), uint(e & 0xff)
	}
	s, l := t.slow(acc)
	return uint(s), l
}

// slow decodes a code longer than lutBits from the top 16 bits of acc,
// returning its symbol and length, or length 0 for no code.
func (t *huffTable) slow(acc uint64) (sym uint8, length uint) {
	bits := int32(acc >> 48)
	for l := lutBits + 1; l <= 16; l++ {
		c := bits >> (16 - l)
		if c <= t.maxCode[l] {
			return t.vals[(t.valPtr[l]+c-t.minCode[l])&0xff], uint(l)
		}
	}
	return 0, 0
}
