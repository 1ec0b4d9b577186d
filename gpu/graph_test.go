//go:build cuda && cgo

package gpu

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
)

// sameBits fails unless got and want hold the same bits: a replay runs the
// kernels of the pass op by op on the same values.
func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("%s: value %d is %g, op by op %g", name, i, got[i], want[i])
		}
	}
}

// TestTowerGraph runs clip-tiny's vision tower on the device op by op and
// from its recording (autograd.TowerGraphs) and gets the same features:
// the second pass records, the later ones replay, with new images, with a
// LayerNorm changed in place (as an adaptation step changes it), with the
// images held on the device; a new tensor or another batch size records
// again. So in float32 and with 16-bit operands (bf16, fp16), whose
// features must differ from float32's (the 16-bit path ran). A pass of
// another batch size is compared with that batch size op by op, not with
// rows of the larger batch: cuBLAS may choose another algorithm for
// another shape (on an H200 the first image's features alone differ from
// the first row of the batch's by 4e-6 relative).
func TestTowerGraph(t *testing.T) {
	var fp32 []float32 // the float32 features, op by op
	for _, prec := range []Precision{FP32, BF16, FP16} {
		t.Run(prec.String(), func(t *testing.T) {
			want := testTowerGraph(t, prec)
			switch {
			case prec == FP32:
				fp32 = want
			case fp32 != nil && slices.Equal(want, fp32):
				t.Errorf("%v features equal float32's: the 16-bit path did not run", prec)
			}
		})
	}
}

// testTowerGraph is TestTowerGraph on a device of precision prec; it
// returns the features of the op-by-op pass.
func testTowerGraph(t *testing.T, prec Precision) []float32 {
	d := openOrSkip(t, Options{Precision: prec})
	m, px, shape := tinyImages(t)
	batch, cols := shape[0], len(px)/shape[0]
	v := m.Vision
	c := v.Config
	tower := func(g *autograd.TowerGraphs) *autograd.VisionTower {
		return &autograd.VisionTower{
			Geometry: autograd.PatchGeometry{Channels: 3, Height: c.ImageSize, Width: c.ImageSize, Patch: c.PatchSize},
			Patch:    v.Patch, Class: v.Class, Pos: v.Pos, LNPre: v.LNPre, Blocks: v.Blocks, LNPost: v.LNPost, Proj: v.Proj,
			Graphs: g}
	}
	run := func(tw *autograd.VisionTower, images []float32, n int) []float32 {
		t.Helper()
		var y []float32
		onDevice(d, func() {
			f, ok := autograd.VisionTowerOnDevice(smat.NewDense[float32](smat.WithShape(n, cols), smat.WithBacking(images)), tw)
			if !ok {
				t.Fatal("VisionTowerOnDevice did not run")
			}
			y = slices.Clone(f.Value().Data().F32())
		})
		return y
	}
	g := &autograd.TowerGraphs{}
	stats := func(recorded, replayed int) {
		t.Helper()
		s := g.Stats()
		if s.Err != nil {
			t.Fatalf("recording failed: %v", s.Err)
		}
		if s.Recorded != recorded || s.Replayed != replayed {
			t.Fatalf("%d passes recorded, %d replayed; want %d and %d", s.Recorded, s.Replayed, recorded, replayed)
		}
	}

	want := run(tower(nil), px, batch)
	for i := range 3 { // op by op, recorded and replayed, replayed
		sameBits(t, "features", run(tower(g), px, batch), want)
		stats(min(i, 1), i)
	}

	other := slices.Clone(px)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range other {
		other[i] = other[i]*0.5 + rng.Float32() - 0.5
	}
	sameBits(t, "features of other images", run(tower(g), other, batch), run(tower(nil), other, batch))
	stats(1, 3)

	gamma := v.Blocks[0].LN1.Gamma.Value().Data().F32()
	saved := slices.Clone(gamma)
	for i := range gamma {
		gamma[i] *= 1.5
	}
	changed := run(tower(nil), px, batch)
	sameBits(t, "features after a LayerNorm changed", run(tower(g), px, batch), changed)
	stats(1, 4)
	copy(gamma, saved)
	sameBits(t, "features with the LayerNorm restored", run(tower(g), px, batch), want)
	stats(1, 5)

	held := slices.Clone(px)
	onDevice(d, func() {
		h := autograd.HoldOnDevice(smat.NewDense[float32](smat.WithShape(batch, cols), smat.WithBacking(held)))
		defer h.Release()
		sameBits(t, "features of held images", run(tower(g), held, batch), want)
		sameBits(t, "features of held images, again", run(tower(g), held, batch), want)
	})
	stats(1, 7)

	// A new projection tensor: another pass, recorded at its second run.
	tw := tower(g)
	tw.Proj = v.Proj.Clone()
	for i := range 2 {
		sameBits(t, "features with a new projection tensor", run(tw, px, batch), want)
		stats(1+i, 7+i)
	}
	// Another batch size likewise.
	first := run(tower(nil), px[:cols], 1)
	for i := range 2 {
		sameBits(t, "features of the first image", run(tower(g), px[:cols], 1), first)
		stats(2+i, 8+i)
	}

	g.Release()
	sameBits(t, "features after Release", run(tower(g), px, batch), want)
	stats(3, 9) // op by op: the first pass again
	return want
}

// TestTowerGraphOff: a device opened with NoGraphs records nothing and
// says so with kernel.ErrGraphsOff; the passes run op by op.
func TestTowerGraphOff(t *testing.T) {
	d := openOrSkip(t, Options{NoGraphs: true})
	_, err := d.Capture(func() error { return nil })
	if !errors.Is(err, kernel.ErrGraphsOff) {
		t.Fatalf("Capture with NoGraphs: %v, want kernel.ErrGraphsOff", err)
	}
}

// TestCapture records a product and replays it on new values; what cannot
// be recorded fails the capture and leaves the device working.
func TestCapture(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 16
	av, bv := randSlice(rng, n*n), randSlice(rng, n*n)
	a, b, y := upload(t, d, av), upload(t, d, bv), upload(t, d, make([]float32, n*n))
	product := func() []float32 {
		if err := d.Gemm(false, false, n, n, n, 1, a, n, b, n, 0, y, n); err != nil {
			t.Fatal(err)
		}
		return download(t, d, y, n*n)
	}
	want := product()
	if err := d.Upload(y, make([]float32, n*n)); err != nil {
		t.Fatal(err)
	}
	g, err := d.Capture(func() error {
		s, err := d.Alloc(n * n) // scratch the graph keeps
		if err != nil {
			return err
		}
		defer d.Free(s)
		if err := d.Gemm(false, false, n, n, n, 1, a, n, b, n, 0, s, n); err != nil {
			return err
		}
		return d.Add(y, s, s, n*n)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if got := download(t, d, y, n*n); slices.ContainsFunc(got, func(x float32) bool { return x != 0 }) {
		t.Fatal("the recorded work ran before Launch")
	}
	for range 2 {
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		got := download(t, d, y, n*n)
		for i := range want {
			if got[i] != want[i]+want[i] {
				t.Fatalf("value %d after Launch: %g, want %g", i, got[i], want[i]+want[i])
			}
		}
	}
	// New values in the buffers the graph reads.
	for i := range av {
		av[i] = -av[i]
	}
	if err := d.Upload(a, av); err != nil {
		t.Fatal(err)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	got := download(t, d, y, n*n)
	if got[0] != -(want[0] + want[0]) {
		t.Fatalf("after new values: %g, want %g", got[0], -(want[0] + want[0]))
	}
	for i := range av {
		av[i] = -av[i]
	}
	if err := d.Upload(a, av); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, want string
		f          func() error
	}{
		{"upload", "Upload while a graph is recorded", func() error { return d.Upload(y, av) }},
		{"download", "Download while a graph is recorded", func() error { return d.Download(make([]float32, 1), y) }},
		{"upload ahead", "UploadAhead while a graph is recorded", func() error {
			_, err := d.UploadAhead(av)
			return err
		}},
		{"a buffer kept", "still held", func() error {
			s, err := d.Alloc(7)
			if err == nil {
				t.Cleanup(func() { d.Free(s) })
			}
			return err
		}},
		{"capture in a capture", "while a graph is recorded", func() error {
			_, err := d.Capture(func() error { return nil })
			return err
		}},
	} {
		_, err := d.Capture(c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s while recording: %v, want an error saying %q", c.name, err, c.want)
		}
		sameBits(t, "a product after a failed capture", product(), want)
	}
}

// TestCaptureWaits: work another goroutine queues while a graph is
// recorded waits for the recording to end and is not part of it.
func TestCaptureWaits(t *testing.T) {
	d := openOrSkip(t, Options{})
	const n = 1000
	one := make([]float32, n)
	for i := range one {
		one[i] = 1
	}
	x, y := upload(t, d, one), upload(t, d, make([]float32, n))
	started := make(chan struct{})
	var wg sync.WaitGroup
	var otherErr error
	g, err := d.Capture(func() error {
		wg.Add(1)
		go func() {
			defer wg.Done()
			close(started)
			otherErr = d.Add(y, y, x, n) // y += 1, once
		}()
		<-started
		time.Sleep(50 * time.Millisecond) // the other goroutine reaches the device
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	wg.Wait()
	if otherErr != nil {
		t.Fatal(otherErr)
	}
	if got := download(t, d, y, 1)[0]; got != 1 {
		t.Fatalf("after the other goroutine's Add: %g, want 1", got)
	}
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
	if got := download(t, d, y, 1)[0]; got != 1 {
		t.Fatalf("after launching the empty graph: %g, want 1 (the other goroutine's Add was recorded)", got)
	}
}

// TestBLASWorkspace checks that the device gave cuBLAS a workspace of its
// own (a CUDA 11 or later cuBLAS has cublasSetWorkspace_v2). On the
// stand-in a product recorded without it is refused, so TestCapture and
// TestTowerGraph fail there too if the workspace is lost
// (cublasSetStream_v2 resets it).
func TestBLASWorkspace(t *testing.T) {
	d := openOrSkip(t, Options{})
	if d.work == 0 {
		t.Fatalf("no workspace given to cuBLAS (%s)", d.Name())
	}
}

func TestBLASWorkspaceSizes(t *testing.T) {
	for _, c := range []struct{ major, bytes int }{{7, 4 << 20}, {8, 4 << 20}, {9, 32 << 20}, {10, 32 << 20}} {
		if got := blasWorkspace(c.major); got != c.bytes {
			t.Errorf("blasWorkspace(%d) = %d, want %d", c.major, got, c.bytes)
		}
	}
}
