package kernel

// Mul computes y = a·b elementwise. y may alias a or b.
func Mul[T Float](y, a, b []T) {
	b, y = b[:len(a)], y[:len(a)]
	forRows(len(a), 1, func(_, lo, hi int) {
		for i, v := range a[lo:hi] {
			y[lo+i] = v * b[lo+i]
		}
	})
}

// Add computes y = a + b elementwise. y may alias a or b.
func Add[T Float](y, a, b []T) {
	b, y = b[:len(a)], y[:len(a)]
	y32, vec := any(y).([]float32)
	a32, _ := any(a).([]float32)
	b32, _ := any(b).([]float32)
	forRows(len(a), 1, func(_, lo, hi int) {
		if vec { // the same sums, 8 at a time
			lo += addVector(y32[lo:hi], a32[lo:hi], b32[lo:hi])
		}
		for i, v := range a[lo:hi] {
			y[lo+i] = v + b[lo+i]
		}
	})
}

// Axpy computes y += alpha·x elementwise.
func Axpy[T Float](y []T, alpha T, x []T) {
	y = y[:len(x)]
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			y[lo+i] += alpha * v
		}
	})
}

// Scale computes y = alpha·x elementwise. y may alias x.
func Scale[T Float](y []T, alpha T, x []T) {
	y = y[:len(x)]
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			y[lo+i] = alpha * v
		}
	})
}

// AddRowVector adds v (length cols) to every row of y (rows×cols): a bias.
func AddRowVector[T Float](y []T, rows, cols int, v []T) {
	checkLen("AddRowVector", y, rows*cols)
	v = v[:cols]
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			yr := y[r*cols : r*cols+cols]
			for j, b := range v {
				yr[j] += b
			}
		}
	})
}

// SumRows accumulates the column sums of x (rows×cols) into dst (length
// cols): dst[j] += Σ_r x[r,j]. It is the gradient of a bias. The sums do
// not depend on the number of threads (sumRanges).
func SumRows[T Float](dst, x []T, rows, cols int) {
	checkLen("SumRows", x, rows*cols)
	chunks := sumRanges(rows, cols)
	partial := dst[:cols]
	if chunks > 1 {
		partial = make([]T, chunks*cols)
	}
	splitRange(rows, 1, chunks, func(c, lo, hi int) {
		p := partial[c*cols : c*cols+cols]
		for r := lo; r < hi; r++ {
			for j, v := range x[r*cols : r*cols+cols] {
				p[j] += v
			}
		}
	})
	if chunks > 1 {
		for c := range chunks {
			for j, v := range partial[c*cols : c*cols+cols] {
				dst[j] += v
			}
		}
	}
}
