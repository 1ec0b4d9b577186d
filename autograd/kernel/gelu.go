package kernel

import (
	"math"
)

// GELU computes the exact GELU y = x·Φ(x) = x·(1+erf(x/√2))/2 elementwise.
// y may alias x. float32 runs gelu32; float64 uses math.Erf.
func GELU[T Float](y, x []T) {
	if x32, ok := any(x).([]float32); ok {
		y32 := any(y).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { gelu32(y32[lo:hi], x32[lo:hi]) })
		return
	}
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			f := float64(v)
			y[lo+i] = T(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
		}
	})
}

// GELUBackward computes dx = dy·(Φ(x) + x·φ(x)), φ the standard normal
// density. dx may alias dy. float32 runs geluBackward32.
func GELUBackward[T Float](dx, dy, x []T) {
	if x32, ok := any(x).([]float32); ok {
		dx32, dy32 := any(dx).([]float32), any(dy).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { geluBackward32(dx32[lo:hi], dy32[lo:hi], x32[lo:hi]) })
		return
	}
	const invSqrt2Pi = 0.3989422804014327
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			f := float64(v)
			d := 0.5*(1+math.Erf(f/math.Sqrt2)) + f*invSqrt2Pi*math.Exp(-0.5*f*f)
			dx[lo+i] = dy[lo+i] * T(d)
		}
	})
}

// GELUSlope computes slope = Φ(x) + x·φ(x), the derivative of GELU, which
// a forward pass keeps for backward. slope may alias x. float32 runs
// geluSlope32.
func GELUSlope[T Float](slope, x []T) {
	slope = slope[:len(x)]
	if x32, ok := any(x).([]float32); ok {
		s32 := any(slope).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { geluSlope32(s32[lo:hi], x32[lo:hi]) })
		return
	}
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			f := float64(v)
			slope[lo+i] = T(0.5*(1+math.Erf(f/math.Sqrt2)) + f*math.Exp(-0.5*f*f)/math.Sqrt(2*math.Pi))
		}
	})
}

// GELUAndSlope computes y = GELU(x) and slope = GELUSlope(x) in one pass,
// with their bits: what a forward pass that keeps the slope for backward
// needs, from one evaluation of Φ and φ per value instead of two. slope may
// alias x (y must not).
func GELUAndSlope[T Float](y, slope, x []T) {
	y, slope = y[:len(x)], slope[:len(x)]
	if x32, ok := any(x).([]float32); ok {
		y32, s32 := any(y).([]float32), any(slope).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { geluAndSlope32(y32[lo:hi], s32[lo:hi], x32[lo:hi]) })
		return
	}
	GELU(y, x)
	GELUSlope(slope, x)
}

// The float32 GELU.
//
// For a = |x| the lower tail of the normal distribution is written
// Φ(−a) = exp(−a²/2)·t·G(t) with t = 1/(1 + a/4): G is smooth on (0, 1]
// (G(1) = Φ(0) = 1/2; G(t) → 1/(4√(2π)) as a → ∞, the Mills ratio) and
// geluPoly is its degree-10 minimax polynomial in t on [1/(1+13.2/4), 1],
// relative error 8.4e-10 before the coefficients are rounded to float32
// (fit_gelu.go derives it). Then Φ(x) = Φ(−a) for x < 0 and 1 − Φ(−a)
// otherwise, so the lower tail keeps its relative accuracy instead of
// cancelling in 1 + erf, and φ(x) = exp(−a²/2)/√(2π) comes from the same
// exponential. Everything runs in float32: the exponential is expInPlace32,
// t one division, G Horner's rule; every product that feeds a sum is
// rounded first (an explicit float32 conversion), so no compiler fuses a
// multiply-add and the AVX2 kernels (geluAVX2 and the others in
// rowwise_avx2_amd64.s) give the same bits as these loops.
//
// Inputs are clamped to ±geluClamp, where Φ(−a) is 4.4e−40: beyond it
// Φ is 0 or 1 and φ is 0, so GELU(x) = −0 for x < −13.2 (the true value is
// a subnormal above −6e−39), GELU(+Inf) = +Inf, GELU(−Inf) = −0, the slope
// is 1 above 13.2 and 0 below −13.2, and a NaN gives NaN. The measured
// accuracy against the float64 formulas is in TestGELU32Accuracy.
const (
	geluClamp  = 13.2
	geluScale  = 0.25               // t = 1/(1 + geluScale·a)
	invSqrt2Pi = 0.3989422804014327 // 1/√(2π)
)

// geluPoly holds the coefficients of G(t), t⁰ first (fit_gelu.go).
var geluPoly = [11]float32{0.09972464, 0.099993, 0.09082412, 0.09724323, 0.0002707729, 0.20935842, -0.27349737, 0.3608461, -0.2651967, 0.09317971, -0.012745897}

// geluClamp32 returns x limited to [−geluClamp, ∞) and to [−geluClamp,
// geluClamp]; a NaN stays NaN in both.
func geluClamp32(x float32) (lo, both float32) {
	if x < -geluClamp {
		x = -geluClamp
	}
	lo = x
	if x > geluClamp {
		x = geluClamp
	}
	return lo, x
}

// geluNormal32 sets cdf[i] = Φ(x[i]) and e[i] = exp(−a²/2) (0 where
// |x[i]| ≥ geluClamp), a = |x[i]| clamped, so that φ(x[i]) = e[i]/√(2π).
func geluNormal32(cdf, e, x []float32) {
	e = e[:len(x)]
	cdf = cdf[:len(x)]
	for i, v := range x {
		_, c := geluClamp32(v)
		a := math.Float32frombits(math.Float32bits(c) &^ (1 << 31))
		e[i] = a * a * -0.5
	}
	expInPlace32(e)
	for i, v := range x {
		_, c := geluClamp32(v)
		a := math.Float32frombits(math.Float32bits(c) &^ (1 << 31))
		if !(a < geluClamp) {
			e[i] = 0
		}
		t := 1 / (1 + float32(geluScale*a))
		p := geluPoly[10]
		for k := 9; k >= 0; k-- {
			p = float32(p*t) + geluPoly[k]
		}
		q := e[i] * t * p // Φ(−a)
		if c < 0 {
			cdf[i] = q
		} else {
			cdf[i] = 1 - q
		}
	}
}

func gelu32(y, x []float32) {
	done := geluVector(y, x)
	gelu32Go(y[done:], x[done:])
}

// gelu32Go is gelu32 one value at a time (after the vector prefix).
func gelu32Go(y, x []float32) {
	var cdf, e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		ys := y[i0 : i0+len(xs)]
		geluNormal32(cdf[:], e[:], xs)
		for i, v := range xs {
			lo, _ := geluClamp32(v)
			ys[i] = lo * cdf[i]
		}
	}
}

func geluSlope32(slope, x []float32) {
	done := geluSlopeVector(slope, x)
	geluSlope32Go(slope[done:], x[done:])
}

// geluSlope32Go is geluSlope32 one value at a time (after the vector prefix).
func geluSlope32Go(slope, x []float32) {
	var cdf, e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		ss := slope[i0 : i0+len(xs)]
		geluNormal32(cdf[:], e[:], xs)
		for i, v := range xs {
			_, c := geluClamp32(v)
			ss[i] = cdf[i] + float32(c*float32(e[i]*invSqrt2Pi))
		}
	}
}

func geluAndSlope32(y, slope, x []float32) {
	done := geluAndSlopeVector(y, slope, x)
	geluAndSlope32Go(y[done:], slope[done:], x[done:])
}

// geluAndSlope32Go is geluAndSlope32 one value at a time (after the vector
// prefix): gelu32Go's and geluSlope32Go's operations on one Φ and φ.
func geluAndSlope32Go(y, slope, x []float32) {
	var cdf, e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		ys, ss := y[i0:i0+len(xs)], slope[i0:i0+len(xs)]
		geluNormal32(cdf[:], e[:], xs)
		for i, v := range xs {
			lo, c := geluClamp32(v)
			ys[i] = lo * cdf[i]
			ss[i] = cdf[i] + float32(c*float32(e[i]*invSqrt2Pi))
		}
	}
}

func geluBackward32(dx, dy, x []float32) {
	done := geluBackwardVector(dx, dy, x)
	geluBackward32Go(dx[done:], dy[done:], x[done:])
}

// geluBackward32Go is geluBackward32 one value at a time (after the vector prefix).
func geluBackward32Go(dx, dy, x []float32) {
	var cdf, e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		dys := dy[i0 : i0+len(xs)]
		dxs := dx[i0 : i0+len(xs)]
		geluNormal32(cdf[:], e[:], xs)
		for i, v := range xs {
			_, c := geluClamp32(v)
			dxs[i] = dys[i] * (cdf[i] + float32(c*float32(e[i]*invSqrt2Pi)))
		}
	}
}
