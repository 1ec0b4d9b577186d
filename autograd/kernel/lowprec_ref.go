package kernel

import (
	"math"
)

// goInt8Tile is the reference of the int8 kernels: the same integer sums
// (exact, so in any order) and the same float32 epilogue,
// float32(acc − zero·colSum)·(scale·colScale) + bias, each operation rounded.
func goInt8Tile(groups int, a []uint8, lda int, b []int8, c []float32, ldc int, scale []float32, zero []int32, colSum []int32, colScale, bias []float32, tiles int) {
	for t := 0; t < tiles; t++ {
		for r := 0; r < lowMR; r++ {
			var acc [lowNR]int32
			ar := a[(t*lowMR+r)*lda:]
			for g := 0; g < groups; g++ {
				av := ar[g*4 : g*4+4]
				bg := b[g*lowNR*4 : (g+1)*lowNR*4]
				for j := 0; j < lowNR; j++ {
					bv := bg[j*4 : j*4+4]
					acc[j] += int32(av[0])*int32(bv[0]) + int32(av[1])*int32(bv[1]) + int32(av[2])*int32(bv[2]) + int32(av[3])*int32(bv[3])
				}
			}
			i := t*lowMR + r
			cr := c[i*ldc : i*ldc+lowNR]
			for j := range cr {
				f := float32(acc[j] - zero[i]*colSum[j])
				s := float32(colScale[j] * scale[i])
				cr[j] = float32(f*s) + bias[j]
			}
		}
	}
}

// goBF16Tile is the reference of the bf16 kernels: per pair of k, the odd
// product then the even one added to the float32 sum, each addition rounded
// to nearest and a subnormal result flushed to zero, as VDPBF16PS does (the
// products of two bf16 values are exact in float32); then the bias.
func goBF16Tile(groups int, a []uint8, lda int, b []uint16, c []float32, ldc int, bias []float32, tiles int) {
	for t := 0; t < tiles; t++ {
		for r := 0; r < lowMR; r++ {
			var acc [lowNR]float32
			ar := a[(t*lowMR+r)*lda:]
			for g := 0; g < groups; g++ {
				o := g * 4
				a0 := FromBF16(uint16(ar[o]) | uint16(ar[o+1])<<8)
				a1 := FromBF16(uint16(ar[o+2]) | uint16(ar[o+3])<<8)
				bg := b[g*lowNR*2 : (g+1)*lowNR*2]
				for j := 0; j < lowNR; j++ {
					s := flushSubnormal(acc[j] + float32(a1*FromBF16(bg[2*j+1])))
					acc[j] = flushSubnormal(s + float32(a0*FromBF16(bg[2*j])))
				}
			}
			i := t*lowMR + r
			cr := c[i*ldc : i*ldc+lowNR]
			for j := range cr {
				cr[j] = acc[j] + bias[j]
			}
		}
	}
}

// goAMXBF16Tile is the reference of the AMX bf16 kernel, the arithmetic
// of TDPBF16PS as measured on an Intel Xeon of the Sapphire Rapids family
// (it differs from VDPBF16PS's, and the SDM's pseudo-code does not pin it):
// C starts from the bias (flushed if subnormal) and takes one instruction
// per 16 pairs of k. An instruction keeps two float32 sums, of the even
// products and of the odd ones, each product added exactly and the sum
// rounded to nearest (ties to even) and flushed to zero if subnormal, in
// the order of k; then C += (even + odd), each of the two additions
// rounded and flushed. (Measured over 853,248 results of random, wide-range,
// subnormal and constructed inputs, every one equal.)
func goAMXBF16Tile(groups int, a []uint8, lda int, b []uint16, c []float32, ldc int, bias []float32, tiles int) {
	for i := 0; i < tiles*lowMR; i++ {
		for j, v := range bias[:lowNR] {
			c[i*ldc+j] = flushSubnormal(v)
		}
	}
	addAMXBF16Pairs(0, groups, a, lda, b, c, ldc, tiles*lowMR)
}

// addAMXBF16Pairs adds the products of pairs g0 to g1 − 1 (g0 a multiple
// of 16) to rows of C (lowNR wide) as TDPBF16PS does, one instruction per
// 16 pairs and the last one short (as if padded with zeros): the AMX
// kernel's tail, and with g0 = 0 its reference.
func addAMXBF16Pairs(g0, g1 int, a []uint8, lda int, b []uint16, c []float32, ldc, rows int) {
	for i := 0; i < rows; i++ {
		ar := a[i*lda:]
		cr := c[i*ldc : i*ldc+lowNR]
		for g := g0; g < g1; g += 16 {
			for j := range cr {
				var even, odd float32
				for h := g; h < min(g+16, g1); h++ {
					o := h * 4
					a0 := float64(FromBF16(uint16(ar[o]) | uint16(ar[o+1])<<8))
					a1 := float64(FromBF16(uint16(ar[o+2]) | uint16(ar[o+3])<<8))
					bh := b[(h*lowNR+j)*2:]
					// The float64 product of two bf16 values is exact, and
					// so is its sum with a float32 whenever the rounding to
					// float32 could depend on it: one rounding, as the
					// instruction's.
					even = flushSubnormal(float32(float64(even) + a0*float64(FromBF16(bh[0]))))
					odd = flushSubnormal(float32(float64(odd) + a1*float64(FromBF16(bh[1]))))
				}
				cr[j] = flushSubnormal(cr[j] + flushSubnormal(even+odd))
			}
		}
	}
}

// flushSubnormal returns x, or a zero of its sign if x is subnormal.
func flushSubnormal(x float32) float32 {
	if u := math.Float32bits(x); u&0x7f800000 == 0 {
		return math.Float32frombits(u & 0x80000000)
	}
	return x
}
