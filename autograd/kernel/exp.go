package kernel

import (
	"math"
)

// expInPlace32 replaces every x by exp(x) in float32, within 2e-7
// relative (under 2 ulp) and about three times faster than math.Exp through
// float64: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split in two so that n·ln2Hi
// is exact), exp(r) by its Taylor series to degree 7 (truncation below 5e-9
// relative) evaluated in Estrin's scheme for a short dependency chain, then
// scaled by 2ⁿ through the exponent bits. Inputs are clamped to
// [−87.33, 88], so tiny results stay normal (1.2e-38) and large ones finite
// (1.65e38); a NaN gives an unspecified value. On AVX2 CPUs eight lanes run
// at once (expAVX2 in rowwise_avx2_amd64.s) with the same operations, hence
// the same bits. Every product that feeds a sum is converted to float32,
// so that no compiler fuses a multiply-add (Go does with GOAMD64=v3 and on
// arm64) and the bits stay those of the separate operations.
func expInPlace32(x []float32) {
	done := expVector(x)
	expInPlace32Go(x[done:])
}

// expInPlace32Go is expInPlace32 one value at a time.
func expInPlace32Go(x []float32) {
	const (
		log2e = 1.44269504088896341
		ln2Hi = 0.693359375
		ln2Lo = -2.12194440054690583e-4
		// Adding round to a float32 of magnitude below 2²² rounds it to an
		// integer n held in the low mantissa bits: bits(t) = 0x4B400000 + n.
		round = 0x1.8p23
	)
	for i, v := range x {
		if v > 88 {
			v = 88
		}
		if v < -87.33 {
			v = -87.33
		}
		t := float32(v*log2e) + round
		n := t - round
		r := v - float32(n*ln2Hi) - float32(n*ln2Lo)
		r2 := r * r
		r4 := r2 * r2
		p := (1 + r) + float32(r2*(1.0/2+float32(r*(1.0/6)))) +
			float32(r4*((1.0/24+float32(r*(1.0/120)))+float32(r2*(1.0/720+float32(r*(1.0/5040))))))
		// (bits(t) − 0x400000 + 127) << 23 drops the exponent of t and
		// leaves n + 127 as the exponent of 2ⁿ.
		x[i] = p * math.Float32frombits((math.Float32bits(t)-0x400000+127)<<23)
	}
}

// expBlock is the number of elements the float32 activations process per
// pass, so that their scratch stays in L1.
const expBlock = 512
