package vit

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/weights"
)

// liveCounter is a TransferCounter that also counts the live buffers of
// one size (the images'), to tell that a held copy is freed.
type liveCounter struct {
	*devicetest.TransferCounter
	size int
	mu   sync.Mutex
	live int
}

func (c *liveCounter) Alloc(n int) (kernel.Buf, error) {
	b, err := c.TransferCounter.Alloc(n)
	if err == nil && n == c.size {
		c.mu.Lock()
		c.live++
		c.mu.Unlock()
	}
	return b, err
}

func (c *liveCounter) Free(b kernel.Buf) {
	if b.Len() == c.size {
		c.mu.Lock()
		c.live--
		c.mu.Unlock()
	}
	c.TransferCounter.Free(b)
}

// TestHeldImages runs the tower through the device seam on images held on
// the device (autograd.HoldOnDevice), as a SubTTA step does over its three
// passes: a pass without a tape, a recording pass and its backward pass,
// and a second pass without a tape upload the images once between them,
// with the features of a pass without a hold bit for bit (those are the
// CPU's within featureTol); Release frees the copy, and a
// pass after it uploads the images again. Without the hold each pass
// uploads them (TestTowerOnDevice).
func TestHeldImages(t *testing.T) {
	cfg := &weights.CLIPConfig{
		EmbedDim:     24,
		Vision:       weights.VisionConfig{Width: 40, Layers: 2, Heads: 4, MLPWidth: 96, PatchSize: 8, ImageSize: 32},
		LayerNormEps: weights.DefaultLayerNormEps,
		Activation:   "quick_gelu",
	}
	m, err := Random(cfg, 11, Options{})
	if err != nil {
		t.Fatal(err)
	}
	batch, size := 2, cfg.Vision.ImageSize
	rng := rand.New(rand.NewPCG(5, 6))
	px, images := randomImages(rng, batch, size)
	pass := func(record bool) []float32 {
		m.SetTrainable(record)
		defer m.SetTrainable(false)
		f := m.Forward(images, nil)
		out := slices.Clone(f.Value().Data().F32())
		if record {
			f.AccGrad(smat.NewDense[float32](smat.WithShape(batch, cfg.EmbedDim), smat.WithBacking(make([]float32, len(out)))))
			if err := ag.Backward(f); err != nil {
				t.Fatal(err)
			}
			for _, ln := range m.LayerNorms() {
				for _, p := range ln.Parameters() {
					p.ZeroGrad()
				}
			}
		}
		return out
	}
	want := pass(false)

	dev := &liveCounter{TransferCounter: &devicetest.TransferCounter{Device: kernel.Host}, size: len(px)}
	autograd.SetDevice(dev)
	defer autograd.SetDevice(nil)
	// The weights go up; the device's features are the CPU's within
	// featureTol, and the passes over held images must give the device's
	// own bits.
	onDevice := pass(false)
	closeFeatures(t, "a pass through the seam", onDevice, want)
	imagesUp := func() int {
		// The images are the only upload of their size: the weights,
		// LayerNorms, gradients and rows of zeros are far smaller.
		return dev.Up / len(px)
	}
	hold := autograd.HoldOnDevice(images)
	dev.Reset()
	got := [][]float32{pass(false), pass(true), pass(false)}
	if n := imagesUp(); n != 1 {
		t.Errorf("three passes over held images uploaded %d values (%d times the images), want the images once", dev.Up, n)
	}
	for k, g := range got {
		for i := range onDevice {
			if math.Float32bits(g[i]) != math.Float32bits(onDevice[i]) {
				t.Fatalf("pass %d over held images, feature %d: %g, a pass without a hold %g", k, i, g[i], onDevice[i])
			}
		}
	}
	if dev.live != 1 {
		t.Errorf("%d buffers of the images' size live while held, want 1", dev.live)
	}
	hold.Release()
	hold.Release() // a second Release does nothing
	if dev.live != 0 {
		t.Errorf("%d buffers of the images' size live after Release, want 0", dev.live)
	}
	dev.Reset()
	pass(false)
	if n := imagesUp(); n != 1 {
		t.Errorf("a pass after Release uploaded the images %d times, want once", n)
	}

	// Two holds of one tensor: the copy lives until both are released.
	h1, h2 := autograd.HoldOnDevice(images), autograd.HoldOnDevice(images)
	dev.Reset()
	pass(false)
	h1.Release()
	pass(false)
	if n := imagesUp(); n != 1 || dev.live != 1 {
		t.Errorf("two holds, one released: images uploaded %d times, %d live copies; want 1 and 1", n, dev.live)
	}
	h2.Release()
	if dev.live != 0 {
		t.Errorf("%d live copies after both holds were released", dev.live)
	}
}

// TestPrefetchedImages uploads a batch ahead (autograd.DeviceInput.Prefetch,
// on another goroutine, as eval's reader does) and runs the tower on a new
// tensor over the same values (as clip.Model.Images wraps a method's
// pixels): the pass finds the copy, waits for it once (Await: on
// devicetest.LatePrefetcher the values land only then, NaN before), uploads
// the images no more, and gives the features of a pass without a hold bit
// for bit. On a device without kernel.Prefetcher, Prefetch is a plain
// upload. Used tells whether a pass read the copy; Release frees it.
func TestPrefetchedImages(t *testing.T) {
	cfg := &weights.CLIPConfig{
		EmbedDim:     24,
		Vision:       weights.VisionConfig{Width: 40, Layers: 2, Heads: 4, MLPWidth: 96, PatchSize: 8, ImageSize: 32},
		LayerNormEps: weights.DefaultLayerNormEps,
		Activation:   "quick_gelu",
	}
	m, err := Random(cfg, 12, Options{})
	if err != nil {
		t.Fatal(err)
	}
	batch, size := 3, cfg.Vision.ImageSize
	rng := rand.New(rand.NewPCG(7, 8))
	px, images := randomImages(rng, batch, size)
	other, _ := randomImages(rng, batch, size)
	pass := func(x smat.Tensor) []float32 {
		return slices.Clone(m.Forward(x, nil).Value().Data().F32())
	}
	wrap := func(v []float32) smat.Tensor { // a new tensor over v
		return smat.NewDense[float32](smat.WithShape(batch, len(v)/batch), smat.WithBacking(v))
	}
	counter := &liveCounter{TransferCounter: &devicetest.TransferCounter{Device: kernel.Host}, size: len(px)}
	late := &devicetest.LatePrefetcher{Device: counter}
	autograd.SetDevice(late)
	defer autograd.SetDevice(nil)
	want := pass(images)

	hold := autograd.HoldValues(px)
	done := make(chan error)
	go func() { done <- hold.Prefetch() }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	for k := range 2 {
		got := pass(wrap(px))
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("pass %d over the prefetched images, feature %d: %g, a pass without a hold %g", k, i, got[i], want[i])
			}
		}
	}
	if ahead, awaits := late.Calls(); ahead != 1 || awaits != 1 {
		t.Errorf("%d uploads ahead and %d awaits, want 1 and 1 (the first pass waits, the second finds the copy awaited)", ahead, awaits)
	}
	if n := counter.Up / len(px); n != 1 {
		t.Errorf("two passes over prefetched images uploaded the images %d times, want once (the copy landing at Await)", n)
	}
	if !hold.Used() {
		t.Error("Used is false after passes read the copy")
	}
	hold.Release()
	if err := hold.Prefetch(); err != nil { // released: nothing
		t.Fatal(err)
	}
	if late.Live() != 0 || counter.live != 0 {
		t.Errorf("after Release (and a Prefetch after it): %d buffers of UploadAhead, %d of the images' size live; want 0 and 0", late.Live(), counter.live)
	}

	// A hold no pass reads.
	unread := autograd.HoldValues(other)
	if err := unread.Prefetch(); err != nil {
		t.Fatal(err)
	}
	pass(wrap(px))
	if unread.Used() {
		t.Error("Used is true for a copy no pass read")
	}
	unread.Release()
	if late.Live() != 0 {
		t.Errorf("%d buffers of UploadAhead live after Release of an unread hold", late.Live())
	}

	// A device that is no kernel.Prefetcher: an upload at Prefetch.
	autograd.SetDevice(counter)
	pass(images) // the weights go up to this device
	plain := autograd.HoldValues(px)
	counter.Reset()
	if err := plain.Prefetch(); err != nil {
		t.Fatal(err)
	}
	if err := plain.Prefetch(); err != nil { // already there: nothing
		t.Fatal(err)
	}
	got := pass(wrap(px))
	if n := counter.Up / len(px); n != 1 {
		t.Errorf("Prefetch and a pass on a plain device uploaded the images %d times, want once", n)
	}
	if !slices.Equal(got, want) {
		t.Error("the features over images prefetched to a plain device differ")
	}
	plain.Release()
	if counter.live != 0 {
		t.Errorf("%d buffers of the images' size live after Release", counter.live)
	}
}
