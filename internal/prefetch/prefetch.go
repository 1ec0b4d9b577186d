package prefetch

import (
	"runtime"
	"sync"
)

// Pipe reads batches 0, 1, …, n−1 with a read function, one batch ahead
// of the caller: while the caller works on batch b (returned by Next),
// batch b+1 is being read on another goroutine. Batches come out in order.
// A Pipe is used by one goroutine.
type Pipe[T any] struct {
	out   chan result[T]
	free  chan T // batches the caller handed back, for read to reuse
	quit  chan struct{}
	done  chan struct{} // closed when the reading goroutine has returned
	held  T             // the batch last returned by Next
	holds bool
	next  int
	n     int
	stop  sync.Once
}

type result[T any] struct {
	v   T
	err error
}

// Start begins reading n batches with read, which is called with the
// batch's index, in order, on one goroutine other than the caller's, and
// with a value to reuse: T's zero value for batches 0 and 1, and from
// then on batch b−2, which the caller has finished with (see Next), so
// that only two batches' storage is ever made. read must not keep reuse's storage for anything
// else: it is the caller's no longer. After read returns an error, no
// later batch is read.
//
// Close must be called once the caller stops, so that the reading
// goroutine returns.
func Start[T any](n int, read func(b int, reuse T) (T, error)) *Pipe[T] {
	return StartWith(n, read, nil)
}

// StartWith is Start with a function that releases what a batch holds
// beyond its storage (a copy on a device): drop is called, on the reading
// goroutine, with each batch read without an error that Next never
// returned, once Close stops the reading. The batches Next returned are
// the caller's to release.
func StartWith[T any](n int, read func(b int, reuse T) (T, error), drop func(T)) *Pipe[T] {
	p := &Pipe[T]{
		out:  make(chan result[T]),
		free: make(chan T, 2), // batches b−1 and b−2 at most: see Next
		quit: make(chan struct{}),
		done: make(chan struct{}),
		n:    n,
	}
	go func() {
		defer close(p.done)
		for b := range n {
			// From batch 2 on, the batch two before is reused: the caller
			// handed it back (Next) before it took batch b−1, so this
			// waits for nothing but Close.
			var reuse T
			if b >= 2 {
				select {
				case reuse = <-p.free:
				case <-p.quit:
					return
				}
			}
			v, err := read(b, reuse)
			select {
			case p.out <- result[T]{v, err}:
			case <-p.quit:
				if err == nil && drop != nil {
					drop(v)
				}
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

// Next returns the next batch, waiting for it to be read, or ok false
// after the last batch (or after an error). The batch stays the caller's
// until the next call to Next or to Close, which hand it back to the
// reading function for reuse: a caller that keeps a batch's storage
// longer must copy it.
func (p *Pipe[T]) Next() (v T, ok bool, err error) {
	if p.holds {
		// When the caller hands back batch b−1 (asking for b+1), the
		// reader has taken b−2 (before reading b, sent before b+1 was
		// asked for): free holds at most b−1.
		select {
		case p.free <- p.held:
		default:
		}
		var zero T
		p.held, p.holds = zero, false
	}
	if p.next >= p.n {
		return v, false, nil
	}
	r, open := <-p.out
	if !open {
		return v, false, nil
	}
	p.next++
	if r.err != nil {
		p.next = p.n
		return v, false, r.err
	}
	p.held, p.holds = r.v, true
	return r.v, true, nil
}

// Close stops the reading and waits for a read in progress to return, so
// that nothing the read function uses (an open file, a dataset) is used
// after Close. It may be called more than once.
func (p *Pipe[T]) Close() {
	p.stop.Do(func() { close(p.quit) })
	<-p.done
	var zero T
	p.held, p.holds = zero, false
}

// Each calls fn(k) for k in [0, n) on up to workers goroutines (workers
// ≤ 0 means GOMAXPROCS) and returns when every call has. Calls are in no
// particular order; fn must be safe for concurrent use.
func Each(n, workers int, fn func(k int)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	if workers <= 1 {
		for k := range n {
			fn(k)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for k := range next {
				fn(k)
			}
		})
	}
	for k := range n {
		next <- k
	}
	close(next)
	wg.Wait()
}
