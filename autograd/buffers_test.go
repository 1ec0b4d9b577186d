package autograd

import (
	"runtime"
	"testing"
	"time"
)

// collect runs garbage collections until gcCycles has advanced by n.
func collect(t *testing.T, n uint32) {
	t.Helper()
	start := gcCycles.Load()
	deadline := time.Now().Add(10 * time.Second)
	for gcCycles.Load()-start < n {
		if time.Now().After(deadline) {
			t.Fatalf("gcCycles advanced by %d in 10 s, want %d", gcCycles.Load()-start, n)
		}
		runtime.GC()
		time.Sleep(time.Millisecond) // let the finalizer goroutine run
	}
}

// TestBigBuffersSurviveCollections: a large buffer released at the end of
// one step is handed out again by the next, even with collections in
// between (sync.Pool would have dropped it after two); once idle for more
// than maxIdleCycles collections it is given back to the runtime.
func TestBigBuffersSurviveCollections(t *testing.T) {
	const n = exactMin + 12345 // a length no other test uses
	b := getBuf[float32](n)
	putBuf(b)
	collect(t, 2)
	if got := getBuf[float32](n); got != b {
		t.Fatal("a large buffer idle for 2 collections was not reused")
	} else {
		putBuf(got)
	}
	collect(t, maxIdleCycles+1)
	other := getBuf[float64](n) // any release sweeps the idle lists
	putBuf(other)
	if got := getBuf[float32](n); got == b {
		t.Fatalf("a large buffer idle for %d collections was kept", maxIdleCycles+1)
	}
	if got := getBuf[float64](n); got != other {
		t.Fatal("the buffer released just now was not reused")
	}
}

// TestPutBufDropsOtherSizes: a short slice whose capacity is not one of
// getBuf's power-of-two sizes is not pooled, so getBuf never returns it for
// a longer length; one of getBuf's own is.
func TestPutBufDropsOtherSizes(t *testing.T) {
	for range 4 {
		odd := make([]float32, 1000) // capacity 1000: class 1024
		putBuf(&odd)
		b := getBuf[float32](1024)
		if len(*b) != 1024 || cap(*b) < 1024 {
			t.Fatalf("getBuf(1024) gave len %d, cap %d", len(*b), cap(*b))
		}
		putBuf(b)
	}
}
