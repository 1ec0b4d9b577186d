package prefetch

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// guard fails the test instead of letting it hang when an expected event
// never comes: the tests wait on events, not on time, and this limit is
// reached only when something is wrong.
const guard = 30 * time.Second

func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(guard):
		t.Fatalf("%s did not happen within %v", what, guard)
	}
}

// TestPipeOverlaps shows that batch b+1 is read while the caller still
// holds batch b: the caller, given batch b, waits until the read of batch
// b+1 has started before asking for it. Reading only when asked (no
// overlap) would never start it, and the test would fail at guard.
func TestPipeOverlaps(t *testing.T) {
	const n = 5
	started := make([]chan struct{}, n)
	for i := range started {
		started[i] = make(chan struct{})
	}
	p := Start(n, func(b int, _ []int) ([]int, error) {
		close(started[b])
		return []int{b}, nil
	})
	defer p.Close()
	for b := range n {
		v, ok, err := p.Next()
		if err != nil || !ok || v[0] != b {
			t.Fatalf("Next: %v %v %v, want batch %d", v, ok, err, b)
		}
		if b+1 < n {
			wait(t, started[b+1], "the read of the next batch while the caller holds this one")
		}
	}
	if _, ok, err := p.Next(); ok || err != nil {
		t.Fatalf("Next after the last batch: ok %v, err %v", ok, err)
	}
}

// TestPipeOrderAndReuse checks that batches come out in order with their
// contents, that two buffers are made in all (the one the caller holds
// and the one being read), and that the buffer the caller holds is not
// written: the caller checks its batch again once the next one has been
// read.
func TestPipeOrderAndReuse(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 10} {
		var made atomic.Int32
		read := make([]chan struct{}, n)
		for i := range read {
			read[i] = make(chan struct{})
		}
		p := Start(n, func(b int, reuse []int) ([]int, error) {
			if reuse == nil {
				made.Add(1)
				reuse = make([]int, 0, 4)
			}
			reuse = append(reuse[:0], b, b*b)
			close(read[b])
			return reuse, nil
		})
		var got []int
		for b := 0; ; b++ {
			v, ok, err := p.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if b+1 < n {
				wait(t, read[b+1], "the read of the next batch")
			}
			got = append(got, v...) // after the next batch was read into the other buffer
		}
		p.Close()
		var want []int
		for b := range n {
			want = append(want, b, b*b)
		}
		if !slices.Equal(got, want) {
			t.Errorf("n=%d: got %v, want %v", n, got, want)
		}
		if m, w := made.Load(), int32(min(n, 2)); m != w {
			t.Errorf("n=%d: %d buffers made, want %d", n, m, w)
		}
	}
}

// TestPipeError checks that an error is returned at its batch, after the
// batches before it, and that nothing after it is read.
func TestPipeError(t *testing.T) {
	bad := errors.New("bad image")
	var reads atomic.Int32
	p := Start(10, func(b int, _ int) (int, error) {
		reads.Add(1)
		if b == 3 {
			return 0, bad
		}
		return b, nil
	})
	defer p.Close()
	for b := range 3 {
		if v, ok, err := p.Next(); v != b || !ok || err != nil {
			t.Fatalf("batch %d: %v %v %v", b, v, ok, err)
		}
	}
	if _, ok, err := p.Next(); ok || !errors.Is(err, bad) {
		t.Fatalf("batch 3: ok %v, err %v; want %v", ok, err, bad)
	}
	if _, ok, err := p.Next(); ok || err != nil {
		t.Fatalf("after the error: ok %v, err %v", ok, err)
	}
	p.Close()
	if r := reads.Load(); r != 4 {
		t.Errorf("%d reads, want 4 (none after the error)", r)
	}
}

// TestPipeCloseWaits checks that Close returns only once a read in
// progress has returned, so that the caller may close what read uses.
func TestPipeCloseWaits(t *testing.T) {
	inRead, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	p := Start(3, func(b int, _ int) (int, error) {
		if b == 1 {
			close(inRead)
			<-release
			returned.Store(true)
		}
		return b, nil
	})
	if _, _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	wait(t, inRead, "the read of batch 1")
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a read was in progress")
	default:
	}
	close(release)
	wait(t, closed, "Close after the read returned")
	if !returned.Load() {
		t.Fatal("Close returned before the read did")
	}
	p.Close() // again: nothing
}

// TestPipeDrops checks that StartWith's drop gets the batch read and never
// returned when Close stops the pipe, and no other: not the batches Next
// returned, not a batch whose read failed.
func TestPipeDrops(t *testing.T) {
	for _, fail := range []bool{false, true} {
		var dropped []int
		read := make(chan struct{})
		p := StartWith(5, func(b int, _ int) (int, error) {
			if b == 1 {
				defer close(read)
				if fail {
					return b, errors.New("bad image")
				}
			}
			return b, nil
		}, func(b int) { dropped = append(dropped, b) })
		if v, _, err := p.Next(); v != 0 || err != nil {
			t.Fatalf("batch 0: %v %v", v, err)
		}
		wait(t, read, "the read of batch 1")
		p.Close()
		want := []int{1}
		if fail {
			want = nil
		}
		if !slices.Equal(dropped, want) {
			t.Errorf("read of batch 1 failing %v: dropped %v, want %v", fail, dropped, want)
		}
	}
}

func TestEach(t *testing.T) {
	for _, tc := range []struct{ n, workers int }{{0, 0}, {1, 4}, {7, 1}, {100, 3}, {100, 0}} {
		seen := make([]atomic.Int32, tc.n)
		Each(tc.n, tc.workers, func(k int) { seen[k].Add(1) })
		for k := range seen {
			if c := seen[k].Load(); c != 1 {
				t.Errorf("n=%d workers=%d: item %d done %d times", tc.n, tc.workers, k, c)
			}
		}
	}
}
