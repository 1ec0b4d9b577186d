package kernel

// Float is the element type of the row-wise kernels. Model code runs them in
// float32; gradient checks run the very same code in float64.
type Float interface{ ~float32 | ~float64 }

// rowGrain is the number of elements below which a row-wise kernel runs on
// the calling goroutine: smaller inputs do not repay starting goroutines.
const rowGrain = 1 << 14

// forRows splits rows 0…rows−1 into at most Threads() contiguous ranges and
// runs fn on each in parallel when the matrix (rows×cols) is large enough.
// fn receives the index of its chunk (0 … rowChunks(rows, cols)−1) and the
// range, so that callers can keep per-chunk partial sums.
func forRows(rows, cols int, fn func(chunk, lo, hi int)) {
	splitRange(rows, 1, rowChunks(rows, cols), fn)
}

// rowChunks is the number of chunks forRows uses for a rows×cols matrix.
func rowChunks(rows, cols int) int {
	if rows*cols < rowGrain {
		return 1
	}
	return max(1, min(Threads(), rows, rows*cols/rowGrain))
}

func checkLen[T Float](name string, s []T, n int) {
	if len(s) < n {
		panic("kernel: " + name + ": slice shorter than rows×cols")
	}
}
