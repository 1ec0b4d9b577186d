package autograd

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// Scratch buffers. Small ones are pooled in power-of-two size classes per
// element type (sync.Pool). Large ones (activation-sized: the same few
// lengths recur every step) are kept by exact length in bigBuffers, so that
// a 39 MB buffer does not occupy a 64 MB allocation.
//
// sync.Pool is wrong for the large ones: it empties itself over two garbage
// collections, and a buffer released at the end of a TTA step's backward is
// wanted again only by the next step's forward, seconds and often several
// collections later. Every dropped buffer was allocated again, so a
// SubTTA-MINT step on ViT-B/32 made about 500 MB of garbage and the heap
// (hence the peak RSS) grew to twice the live data. bigBuffers keeps them
// until they have been idle for maxIdleCycles collections instead.
var (
	pool32 [64]sync.Pool
	pool64 [64]sync.Pool
)

// exactMin is the length above which buffers are pooled by exact length;
// shorter ones round up to a power of two, at most exactMin.
const exactMin = 1 << 15

// maxIdleCycles is how many garbage collections a large free buffer waits
// for reuse before it is dropped: enough to span a training step, few
// enough that buffers of a batch size no longer used are given back.
const maxIdleCycles = 4

type exactKey struct {
	f32 bool
	n   int
}

type idleBuffer struct {
	buf   any    // *[]float32 or *[]float64
	cycle uint32 // gcCycles when it was released
}

var bigBuffers struct {
	sync.Mutex
	free  map[exactKey][]idleBuffer
	swept uint32 // gcCycles at the last sweep
}

// gcCycles counts garbage collections (approximately: a finalizer runs after
// each one that finds the previous sentinel unreachable).
var gcCycles atomic.Uint32

type gcSentinel struct{ _ *int } // holds a pointer: never a tiny allocation

func init() { armGCSentinel() }

func armGCSentinel() {
	runtime.SetFinalizer(new(gcSentinel), func(*gcSentinel) {
		gcCycles.Add(1)
		armGCSentinel()
	})
}

// getBuf returns a pooled buffer of length n; its contents are arbitrary.
func getBuf[T dtype](n int) *[]T {
	if n > exactMin {
		k := exactKey{isF32[T](), n}
		bigBuffers.Lock()
		list := bigBuffers.free[k]
		if len(list) > 0 {
			b := list[len(list)-1].buf.(*[]T)
			list[len(list)-1] = idleBuffer{}
			bigBuffers.free[k] = list[:len(list)-1]
			bigBuffers.Unlock()
			return b
		}
		bigBuffers.Unlock()
		s := make([]T, n)
		return &s
	}
	c := bits.Len(uint(max(n, 1) - 1))
	var p *sync.Pool
	if isF32[T]() {
		p = &pool32[c]
	} else {
		p = &pool64[c]
	}
	if b, ok := p.Get().(*[]T); ok {
		*b = (*b)[:n]
		return b
	}
	s := make([]T, n, 1<<c)
	return &s
}

// getZeroBuf returns a pooled buffer of length n filled with zeros.
func getZeroBuf[T dtype](n int) *[]T {
	b := getBuf[T](n)
	clear(*b)
	return b
}

// putBuf returns a buffer from getBuf to its pool. A short buffer whose
// capacity is not one of getBuf's sizes is dropped instead, so that a
// slice made elsewhere never comes back from getBuf too small.
func putBuf[T dtype](b *[]T) {
	n := cap(*b)
	if n > exactMin {
		*b = (*b)[:n]
		now := gcCycles.Load()
		bigBuffers.Lock()
		if bigBuffers.free == nil {
			bigBuffers.free = make(map[exactKey][]idleBuffer)
		}
		if bigBuffers.swept != now {
			sweepBigBuffers(now)
		}
		k := exactKey{isF32[T](), n}
		bigBuffers.free[k] = append(bigBuffers.free[k], idleBuffer{b, now})
		bigBuffers.Unlock()
		return
	}
	c := bits.Len(uint(n - 1))
	if n == 0 || n != 1<<c {
		return // not of getBuf's sizes (a slice made elsewhere): left to the collector
	}
	if isF32[T]() {
		pool32[c].Put(b)
	} else {
		pool64[c].Put(b)
	}
}

// sweepBigBuffers drops the free buffers idle for more than maxIdleCycles
// collections. The caller holds the lock.
func sweepBigBuffers(now uint32) {
	bigBuffers.swept = now
	for k, list := range bigBuffers.free {
		kept := list[:0]
		for _, e := range list {
			if now-e.cycle <= maxIdleCycles {
				kept = append(kept, e)
			}
		}
		clear(list[len(kept):])
		if len(kept) == 0 {
			delete(bigBuffers.free, k)
		} else {
			bigBuffers.free[k] = kept
		}
	}
}
