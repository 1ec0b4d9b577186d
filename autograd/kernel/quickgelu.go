package kernel

import (
	"math"
)

// quickGELUAlpha is the sigmoid slope of CLIP's QuickGELU.
const quickGELUAlpha = 1.702

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// QuickGELU computes y = x·σ(1.702·x) elementwise (CLIP's activation).
// y may alias x.
func QuickGELU[T Float](y, x []T) {
	if x32, ok := any(x).([]float32); ok {
		y32 := any(y).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { quickGELU32(y32[lo:hi], x32[lo:hi]) })
		return
	}
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			y[lo+i] = v * T(sigmoid(quickGELUAlpha*float64(v)))
		}
	})
}

// QuickGELUBackward computes dx = dy·(s + 1.702·x·s·(1−s)) with
// s = σ(1.702·x). dx may alias dy.
func QuickGELUBackward[T Float](dx, dy, x []T) {
	if x32, ok := any(x).([]float32); ok {
		dx32, dy32 := any(dx).([]float32), any(dy).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { quickGELUBackward32(dx32[lo:hi], dy32[lo:hi], x32[lo:hi]) })
		return
	}
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			s := sigmoid(quickGELUAlpha * float64(v))
			dx[lo+i] = dy[lo+i] * T(s+quickGELUAlpha*float64(v)*s*(1-s))
		}
	})
}

// QuickGELUSlope computes y = QuickGELU(x) like QuickGELU and, in the same
// pass, slope = dy/dx = s + 1.702·y·(1−s) with s = σ(1.702·x): what the
// backward pass needs, one exponential per value for both. slope may alias x.
func QuickGELUSlope[T Float](y, slope, x []T) {
	checkLen("QuickGELUSlope", y, len(x))
	checkLen("QuickGELUSlope", slope, len(x))
	if x32, ok := any(x).([]float32); ok {
		y32, s32 := any(y).([]float32), any(slope).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { quickGELUSlope32(y32[lo:hi], s32[lo:hi], x32[lo:hi]) })
		return
	}
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			s := T(sigmoid(quickGELUAlpha * float64(v)))
			yv := v * s
			y[lo+i] = yv
			slope[lo+i] = s + quickGELUAlpha*yv*(1-s)
		}
	})
}

func quickGELUSlope32(y, slope, x []float32) {
	done := quickGELUSlopeVector(y, slope, x)
	quickGELUSlope32Go(y[done:], slope[done:], x[done:])
}

// quickGELUSlope32Go is quickGELUSlope32 one value at a time (after the vector prefix).
func quickGELUSlope32Go(y, slope, x []float32) {
	var e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		ys := y[i0 : i0+len(xs)]
		ss := slope[i0 : i0+len(xs)]
		es := e[:len(xs)]
		for i, v := range xs {
			es[i] = -quickGELUAlpha * v
		}
		expInPlace32(es)
		for i, v := range xs {
			yv := v / (1 + es[i]) // as quickGELU32, so y is the same
			s := 1 / (1 + es[i])
			ys[i] = yv
			ss[i] = s + float32(quickGELUAlpha*yv*(1-s))
		}
	}
}

func quickGELU32(y, x []float32) {
	done := quickGELUVector(y, x)
	quickGELU32Go(y[done:], x[done:])
}

// quickGELU32Go is quickGELU32 one value at a time (after the vector prefix).
func quickGELU32Go(y, x []float32) {
	var e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		ys := y[i0 : i0+len(xs)]
		es := e[:len(xs)]
		for i, v := range xs {
			es[i] = -quickGELUAlpha * v
		}
		expInPlace32(es)
		for i, v := range xs {
			ys[i] = v / (1 + es[i])
		}
	}
}

func quickGELUBackward32(dx, dy, x []float32) {
	done := quickGELUBackwardVector(dx, dy, x)
	quickGELUBackward32Go(dx[done:], dy[done:], x[done:])
}

// quickGELUBackward32Go is quickGELUBackward32 one value at a time (after the vector prefix).
func quickGELUBackward32Go(dx, dy, x []float32) {
	var e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		dys := dy[i0 : i0+len(xs)]
		dxs := dx[i0 : i0+len(xs)]
		es := e[:len(xs)]
		for i, v := range xs {
			es[i] = -quickGELUAlpha * v
		}
		expInPlace32(es)
		for i, v := range xs {
			s := 1 / (1 + es[i])
			dxs[i] = dys[i] * s * (1 + float32(quickGELUAlpha*v*(1-s)))
		}
	}
}
