//go:build cuda && cgo

package gpu

import (
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
)

var _ kernel.Prefetcher = (*device)(nil)

// TestUploadAhead checks UploadAhead and Await: the values arrive, a pass
// that reads the buffer before Await is refused, the memory a buffer gets
// may be one whose earlier copy is still queued on the device's stream,
// the two pinned stages take turns, a buffer freed without Await is
// awaited, and another goroutine uploads ahead while this one computes and
// downloads. On the stand-in CUDA the second stream's copies run only when
// something waits for them (testdata/fakecuda.c), so a missing wait gives
// wrong values there; the test first checks that it does.
func TestUploadAhead(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(41, 42))
	fake := os.Getenv("SUBTTA_FAKE_CUDA") != ""
	const n = 1000

	t.Run("values", func(t *testing.T) {
		v := randSlice(rng, n)
		b, err := d.UploadAhead(v)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Free(b)
		if err := d.Download(make([]float32, n), b); err == nil || !strings.Contains(err.Error(), "before Await") {
			t.Errorf("a download before Await: %v, want a refusal", err)
		}
		if fake {
			// A slice carries no ready event: read before the copy ran, it
			// shows what the stand-in does without the wait.
			if got := download(t, d, b.Slice(0, n), n); slices.Equal(got, v) {
				t.Fatal("the stand-in CUDA ran the second stream's copy without a wait: this test could not fail")
			}
		}
		if err := d.Await(b); err != nil {
			t.Fatal(err)
		}
		if err := d.Await(b); err != nil {
			t.Fatalf("a second Await: %v", err)
		}
		if got := download(t, d, b, n); !slices.Equal(got, v) {
			t.Fatal("the values uploaded ahead differ after Await")
		}
	})

	t.Run("memory reused behind a queued copy", func(t *testing.T) {
		// x's upload is queued on the device's stream (on the stand-in, it
		// runs at the next kernel or download); x is freed and its memory
		// goes to the next buffer of its length: the copy ahead into it
		// must run after x's.
		old, v := randSlice(rng, n+1), randSlice(rng, n+1)
		x := upload(t, d, old)
		was := x.(*buf).ptr
		d.Free(x)
		b, err := d.UploadAhead(v)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Free(b)
		if b.(*buf).ptr != was {
			t.Fatal("UploadAhead did not reuse the freed memory: the case is not tested")
		}
		if err := d.Await(b); err != nil {
			t.Fatal(err)
		}
		if got := download(t, d, b, n+1); !slices.Equal(got, v) {
			t.Fatal("the copy ahead ran before the queued copy into the same memory")
		}
	})

	t.Run("stages in turn", func(t *testing.T) {
		// Five uploads in flight over two stages: the third and the fourth
		// write the stages again once the first two copies have run, and
		// the last is larger (its stage grows once its copy has passed).
		var vs [][]float32
		var bs []kernel.Buf
		for i := range 5 {
			v := randSlice(rng, n+500*(i/4))
			b, err := d.UploadAhead(v)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Free(b)
			vs, bs = append(vs, v), append(bs, b)
		}
		for i, b := range bs {
			if err := d.Await(b); err != nil {
				t.Fatal(err)
			}
			if got := download(t, d, b, len(vs[i])); !slices.Equal(got, vs[i]) {
				t.Fatalf("upload %d: the values differ", i)
			}
		}
	})

	t.Run("freed without Await", func(t *testing.T) {
		v, w := randSlice(rng, n+2), randSlice(rng, n+2)
		b, err := d.UploadAhead(v)
		if err != nil {
			t.Fatal(err)
		}
		was := b.(*buf).ptr
		d.Free(b)
		c := upload(t, d, w) // the same memory: written after the copy ahead
		defer d.Free(c)
		if c.(*buf).ptr != was {
			t.Fatal("Alloc did not reuse the freed memory: the case is not tested")
		}
		if got := download(t, d, c, n+2); !slices.Equal(got, w) {
			t.Fatal("the values uploaded into the reused memory differ")
		}
		if err := d.syncCopies(); err != nil { // the second stream's copies have run
			t.Fatal(err)
		}
		if got := download(t, d, c, n+2); !slices.Equal(got, w) {
			t.Fatal("the copy ahead into a freed buffer overwrote the next owner's values")
		}
	})
}

// TestUploadAheadConcurrent uploads batches ahead on one goroutine while
// another runs products on the previous ones and downloads their results,
// as eval's reader and method do.
func TestUploadAheadConcurrent(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(43, 44))
	const batches, m, k, nn = 12, 16, 32, 8
	w := randSlice(rng, k*nn)
	wb := upload(t, d, w)
	defer d.Free(wb)
	xs := make([][]float32, batches)
	for i := range xs {
		xs[i] = randSlice(rng, m*k)
	}
	ahead := make(chan kernel.Buf, 2)
	var wg sync.WaitGroup
	var upErr error
	wg.Go(func() {
		defer close(ahead)
		for _, x := range xs {
			b, err := d.UploadAhead(x)
			if err != nil {
				upErr = err
				return
			}
			ahead <- b
		}
	})
	out, err := d.Alloc(m * nn)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(out)
	i := 0
	for b := range ahead {
		if err := d.Await(b); err != nil {
			t.Fatal(err)
		}
		if err := d.Gemm(false, false, m, nn, k, 1, b, k, wb, nn, 0, out, nn); err != nil {
			t.Fatal(err)
		}
		got := download(t, d, out, m*nn)
		d.Free(b)
		want := make([]float32, m*nn)
		kernel.Gemm(false, false, m, nn, k, 1, xs[i], k, w, nn, 0, want, nn)
		check(t, "batch product", got, want)
		i++
	}
	wg.Wait()
	if upErr != nil {
		t.Fatal(upErr)
	}
	if i != batches {
		t.Fatalf("%d batches computed, want %d", i, batches)
	}
}
