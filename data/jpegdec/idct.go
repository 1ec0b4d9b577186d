package jpegdec

// The inverse DCT below does exactly the integer arithmetic of
// image/jpeg's (a fixed-point factorisation after Loeffler, Ligtenberg
// and Moschytz, rows then columns, in int32 that wraps on overflow): the
// same products by the same rounded constants and the same right shifts
// in the same places. Sums and products may be regrouped, as int32
// arithmetic is exact modulo 2³²; shifts may not.
//
// The constants are round(k·2^b) for the named k and scale b.
const (
	r2c6x18 = 70936  // (1/√2)·cos(6π/16)·2¹⁸
	r2s6x18 = 171254 // (1/√2)·sin(6π/16)·2¹⁸
	r2x8    = 181    // (1/√2)·2⁸
	c3x12   = 3406   // cos(3π/16)·2¹²
	s3x12   = 2276   // sin(3π/16)·2¹²
	c1x12   = 4017   // cos(π/16)·2¹²
	s1x12   = 799    // sin(π/16)·2¹²
	r2c6x12 = 1108   // (1/√2)·cos(6π/16)·2¹²
	r2s6x12 = 2676   // (1/√2)·sin(6π/16)·2¹²
	r2x14   = 11585  // (1/√2)·2¹⁴
)

// rot returns (kc·a + ks·b, kc·b − ks·a): the plane rotation of the
// factorisation's butterflies, called with ks the negated sine constant.
func rot(a, b, kc, ks int32) (int32, int32) {
	return kc*a + ks*b, kc*b - ks*a
}

// idctStore computes the inverse DCT of the dequantised coefficients blk
// (natural order), level-shifts and clamps it to 0..255 as image/jpeg
// does, and stores the 8×8 samples at dst with the given stride.
func idctStore(blk *[64]int32, dst []uint8, stride int) {
	// A block with only a DC coefficient: every row pass output is
	// DC·2¹⁷ in row 0 and 0 elsewhere, so every column gives the same
	// value.
	ac := false
	for _, v := range blk[1:] {
		if v != 0 {
			ac = true
			break
		}
	}
	if !ac {
		x := (blk[0]<<17 + 1<<19) >> 20
		p := clampShift(x)
		for y := range 8 {
			row := dst[y*stride : y*stride+8 : y*stride+8]
			for i := range row {
				row[i] = p
			}
		}
		return
	}

	// Rows.
	for y := range 8 {
		x := blk[8*y : 8*y+8 : 8*y+8]
		if x[1]|x[2]|x[3]|x[4]|x[5]|x[6]|x[7] == 0 {
			// Only the even part's x0 is non-zero: every output is x0·2¹⁷.
			v := x[0] << 17
			x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7] = v, v, v, v, v, v, v, v
			continue
		}
		// Even part.
		e0, e1 := x[0]<<17, x[4]<<17
		e0, e1 = e0+e1, e0-e1
		e2, e3 := rot(x[2], x[6], r2c6x18, -r2s6x18)
		e1, e2 = e1+e2, e1-e2
		e0, e3 = e0+e3, e0-e3
		// Odd part (o7 from x[1], o5 from x[3], o6 from x[5], o4 from x[7]).
		o4, o7 := x[7]<<7, x[1]<<7
		o7, o4 = o7+o4, o7-o4
		o6 := x[5] * r2x8
		o5 := x[3] * r2x8
		o7, o5 = o7+o5, o7-o5
		o4, o6 = o4+o6, o4-o6
		o4, o7 = rot(o4>>2, o7>>2, c3x12, -s3x12)
		o5, o6 = rot(o5>>2, o6>>2, c1x12, -s1x12)
		x[0], x[7] = e0+o7, e0-o7
		x[1], x[6] = e1+o6, e1-o6
		x[2], x[5] = e2+o5, e2-o5
		x[3], x[4] = e3+o4, e3-o4
	}

	// Columns, written back into blk.
	for i := range 8 {
		c0, c1, c2, c3 := blk[i], blk[8+i], blk[16+i], blk[24+i]
		c4, c5, c6, c7 := blk[32+i], blk[40+i], blk[48+i], blk[56+i]
		if c1|c2|c3|c4|c5|c6|c7 == 0 {
			v := (c0 + 1<<19) >> 20
			blk[i], blk[8+i], blk[16+i], blk[24+i] = v, v, v, v
			blk[32+i], blk[40+i], blk[48+i], blk[56+i] = v, v, v, v
			continue
		}
		e0 := c0 + 1<<19
		e0, e1 := (e0+c4)>>2, (e0-c4)>>2
		e2, e3 := rot(c2>>13, c6>>13, r2c6x12, -r2s6x12)
		e1, e2 = e1+e2, e1-e2
		e0, e3 = e0+e3, e0-e3
		o7, o4 := c1+c7, c1-c7
		o5 := (c3 >> 13) * r2x14
		o6 := (c5 >> 13) * r2x14
		o7, o5 = o7+o5, o7-o5
		o4, o6 = o4+o6, o4-o6
		o4, o7 = rot(o4>>14, o7>>14, c3x12, -s3x12)
		o5, o6 = rot(o5>>14, o6>>14, c1x12, -s1x12)
		blk[i], blk[56+i] = (e0+o7)>>18, (e0-o7)>>18
		blk[8+i], blk[48+i] = (e1+o6)>>18, (e1-o6)>>18
		blk[16+i], blk[40+i] = (e2+o5)>>18, (e2-o5)>>18
		blk[24+i], blk[32+i] = (e3+o4)>>18, (e3-o4)>>18
	}
	for y := range 8 {
		x := blk[8*y : 8*y+8 : 8*y+8]
		row := dst[y*stride : y*stride+8 : y*stride+8]
		row[0], row[1], row[2], row[3] = clampShift(x[0]), clampShift(x[1]), clampShift(x[2]), clampShift(x[3])
		row[4], row[5], row[6], row[7] = clampShift(x[4]), clampShift(x[5]), clampShift(x[6]), clampShift(x[7])
	}
}

// clampShift level-shifts an inverse-DCT output to a sample as image/jpeg
// does: below −128 is 0, above 127 is 255.
func clampShift(v int32) uint8 {
	v += 128
	if uint32(v) <= 255 {
		return uint8(v)
	}
	return uint8(^(v >> 31)) // 0 below the range, 255 above
}
