package kernel

import (
	"math"
)

// Softmax computes y = softmax(scale·x) over each row of x (rows×cols),
// subtracting the row maximum first. With causal set, row r sees only
// columns 0…(r mod cols): the matrix is read as a stack of square
// cols×cols blocks (one per attention head), and masked entries of y are 0.
// y may alias x. On AVX2 CPUs a float32 row runs in assembly
// (softmaxRowAVX2): the same exponentials, summed in float64 in another
// order than the Go loop, so the two agree within one float32 rounding.
func Softmax[T Float](y, x []T, rows, cols int, scale T, causal bool) {
	checkLen("Softmax", x, rows*cols)
	checkLen("Softmax", y, rows*cols)
	y32, is32 := any(y).([]float32)
	x32, _ := any(x).([]float32)
	scale32, _ := any(scale).(float32)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			n := cols
			if causal {
				n = r%cols + 1
			}
			xr := x[r*cols : r*cols+n]
			yr := y[r*cols : r*cols+cols]
			if is32 && softmaxRow32(y32[r*cols:r*cols+n], x32[r*cols:r*cols+n], scale32) {
				clear(yr[n:])
				continue
			}
			mx := xr[0] * scale
			for _, v := range xr {
				mx = max(mx, v*scale)
			}
			var s float64
			if is32 {
				for j, v := range xr {
					yr[j] = v*scale - mx
				}
				expInPlace32(y32[r*cols : r*cols+n])
				for _, e := range yr[:n] {
					s += float64(e)
				}
			} else {
				for j, v := range xr {
					e := T(math.Exp(float64(v*scale - mx)))
					yr[j] = e
					s += float64(e)
				}
			}
			inv := T(1 / s)
			for j := range n {
				yr[j] *= inv
			}
			clear(yr[n:])
		}
	})
}

// SoftmaxBackward computes dx = scale·y⊙(dy − Σ_j y·dy) for each row, the
// gradient of y = softmax(scale·x) (with or without the causal mask: masked
// entries have y = 0 and get dx = 0). dx may alias dy.
func SoftmaxBackward[T Float](dx, dy, y []T, rows, cols int, scale T) {
	checkLen("SoftmaxBackward", y, rows*cols)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			yr := y[r*cols : r*cols+cols]
			dyr := dy[r*cols : r*cols+cols]
			var s float64
			for j, v := range yr {
				s += float64(v * dyr[j])
			}
			dot := T(s)
			dxr := dx[r*cols : r*cols+cols]
			for j, v := range yr {
				dxr[j] = scale * v * (dyr[j] - dot)
			}
		}
	})
}
