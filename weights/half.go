package weights

import "math"

// HalfToFloat32 converts an IEEE 754 binary16 value to float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: value = mant * 2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Float32ToHalf converts f to IEEE 754 binary16, rounding to nearest with
// ties to even. Values beyond the half range become ±Inf, values below half
// the smallest subnormal become ±0, and NaN stays a quiet NaN.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(mant>>13) // quiet NaN, top payload bits kept
	}
	e := exp - 127 + 15 // the half exponent field
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e >= 1 {
		h := uint32(e)<<10 | mant>>13
		rem := mant & 0x1fff
		if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
			h++ // a carry into the exponent is the correct result, up to Inf
		}
		return sign | uint16(h)
	}
	// Subnormal half: the value is full * 2^(exp-150) = m * 2^-24.
	shift := uint32(14 - e)
	if shift > 24 {
		return sign // below 2^-25 (float32 subnormals included)
	}
	full := mant | 0x800000
	m := full >> shift
	rem := full & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && m&1 == 1) {
		m++ // may become 0x400, the smallest normal: also correct
	}
	return sign | uint16(m)
}

// BFloat16ToFloat32 converts a bfloat16 value to float32 exactly.
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBFloat16 converts f to bfloat16, rounding to nearest with ties to
// even; NaN stays a quiet NaN.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
