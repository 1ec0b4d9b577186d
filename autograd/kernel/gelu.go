package kernel

import (
	"math"
)

// GELU computes the exact GELU y = x·Φ(x) = x·(1+erf(x/√2))/2 elementwise.
// y may alias x.
func GELU[T Float](y, x []T) {
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			f := float64(v)
			y[lo+i] = T(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
		}
	})
}

// GELUBackward computes dx = dy·(Φ(x) + x·φ(x)), φ the standard normal
// density. dx may alias dy.
func GELUBackward[T Float](dx, dy, x []T) {
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
// a forward pass keeps for backward. slope may alias x.
func GELUSlope[T Float](slope, x []T) {
	slope = slope[:len(x)]
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			f := float64(v)
			slope[lo+i] = T(0.5*(1+math.Erf(f/math.Sqrt2)) + f*math.Exp(-0.5*f*f)/math.Sqrt(2*math.Pi))
		}
	})
}
