package kernel

import (
	"math/bits"
	"runtime"
	"sync"
)

// Threads returns the number of goroutines the kernels split work over.
func Threads() int { return runtime.GOMAXPROCS(0) }

// ParallelFor splits [0, n) into at most Threads() contiguous ranges and
// runs fn on each, the last one on the calling goroutine.
func ParallelFor(n int, fn func(lo, hi int)) {
	splitRange(n, 1, Threads(), func(_, lo, hi int) { fn(lo, hi) })
}

// splitRange cuts [0, n) into at most chunks contiguous ranges whose
// boundaries are multiples of grain, and runs fn(chunk, lo, hi) on each in
// its own goroutine, the last on the calling goroutine.
func splitRange(n, grain, chunks int, fn func(chunk, lo, hi int)) {
	if n <= 0 {
		return
	}
	units := (n + grain - 1) / grain
	t := min(chunks, units)
	if t <= 1 {
		fn(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	per, extra := units/t, units%t
	lo := 0
	for i := 0; i < t; i++ {
		u := per
		if i < extra {
			u++
		}
		hi := min(lo+u*grain, n)
		if i == t-1 {
			fn(i, lo, hi)
			break
		}
		wg.Add(1)
		go func(i, lo, hi int) {
			defer wg.Done()
			fn(i, lo, hi)
		}(i, lo, hi)
		lo = hi
	}
	wg.Wait()
}

// scratch pools float32 buffers in power-of-two size classes, so that
// steady-state kernels do not allocate.
var scratch [48]sync.Pool

func getScratch(n int) *[]float32 {
	c := bits.Len(uint(n))
	if p, ok := scratch[c].Get().(*[]float32); ok {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n, 1<<c)
	return &s
}

func putScratch(p *[]float32) { scratch[bits.Len(uint(cap(*p)-1))].Put(p) }
