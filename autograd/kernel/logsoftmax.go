package kernel

import (
	"math"
)

// LogSoftmax computes y = x − log Σ exp(x) over each row. y may alias x.
func LogSoftmax[T Float](y, x []T, rows, cols int) {
	checkLen("LogSoftmax", x, rows*cols)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := x[r*cols : r*cols+cols]
			mx := xr[0]
			for _, v := range xr {
				mx = max(mx, v)
			}
			var s float64
			for _, v := range xr {
				s += math.Exp(float64(v - mx))
			}
			lse := mx + T(math.Log(s))
			yr := y[r*cols : r*cols+cols]
			for j, v := range xr {
				yr[j] = v - lse
			}
		}
	})
}

// LogSoftmaxBackward computes dx = dy − exp(y)·Σ_j dy for each row, where y
// is the output of LogSoftmax. dx may alias dy.
func LogSoftmaxBackward[T Float](dx, dy, y []T, rows, cols int) {
	checkLen("LogSoftmaxBackward", y, rows*cols)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			dyr := dy[r*cols : r*cols+cols]
			var s float64
			for _, v := range dyr {
				s += float64(v)
			}
			sum := T(s)
			yr := y[r*cols : r*cols+cols]
			dxr := dx[r*cols : r*cols+cols]
			for j, v := range yr {
				dxr[j] = dyr[j] - T(math.Exp(float64(v)))*sum
			}
		}
	})
}
