package tta

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"sync"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// imageCounter is a Float64Host (so that the alignment, the projection and
// the optimizer take their device path) counting the uploads of a batch's
// images (the only copies of their size), the live buffers of that size,
// and every copy by its number of float32 values.
type imageCounter struct {
	*devicetest.Float64Host
	size          int
	mu            sync.Mutex
	uploads, live int
	ups, downs    map[int]int
}

func (c *imageCounter) Upload(dst kernel.Buf, src []float32) error {
	c.mu.Lock()
	if len(src) == c.size {
		c.uploads++
	}
	if c.ups == nil {
		c.ups = map[int]int{}
	}
	c.ups[len(src)]++
	c.mu.Unlock()
	return c.Float64Host.Upload(dst, src)
}

func (c *imageCounter) Download(dst []float32, src kernel.Buf) error {
	c.mu.Lock()
	if c.downs == nil {
		c.downs = map[int]int{}
	}
	c.downs[len(dst)]++
	c.mu.Unlock()
	return c.Float64Host.Download(dst, src)
}

func (c *imageCounter) resetCopies() {
	c.mu.Lock()
	c.ups, c.downs = map[int]int{}, map[int]int{}
	c.mu.Unlock()
}

func (c *imageCounter) Alloc(n int) (kernel.Buf, error) {
	b, err := c.Float64Host.Alloc(n)
	if err == nil && n == c.size {
		c.mu.Lock()
		c.live++
		c.mu.Unlock()
	}
	return b, err
}

func (c *imageCounter) Free(b kernel.Buf) {
	if b.Len() == c.size {
		c.mu.Lock()
		c.live--
		c.mu.Unlock()
	}
	c.Float64Host.Free(b)
}

// TestSubTTAImagesUploadedOnce counts the uploads of a batch's images in
// SubTTA's steps with a device set: the alignment's pass, the adaptation's
// and the prediction's read one copy, uploaded at the first (three uploads
// a step before the batch was held on the device), and the copy is freed
// when the step ends.
func TestSubTTAImagesUploadedOnce(t *testing.T) {
	x := fxt.Open(t, "fixtures/subtta.safetensors")
	bsz, _ := x.Dense("b0.F1").Dims()
	px := fxtmodel.Pixels(t, bsz)
	for _, pred := range []Prediction{PredictThirdPass, PredictProjected} {
		s := subttaFromFixture(t, fxtmodel.TinyModel(t, false), x)
		s.cfg.Prediction = pred
		dev := &imageCounter{Float64Host: &devicetest.Float64Host{Device: kernel.Host}, size: len(px[0])}
		autograd.SetDevice(dev)
		steps := 0
		for k := range x.Batches("b", "F1") {
			if _, err := s.Step(px[k], bsz); err != nil {
				autograd.SetDevice(nil)
				t.Fatal(err)
			}
			steps++
			if dev.uploads != steps {
				t.Errorf("prediction %d, step %d: the images uploaded %d times in all, want once a step", pred, k, dev.uploads)
			}
			if dev.live != 0 {
				t.Errorf("prediction %d, step %d: %d buffers of the images' size live after the step, want 0", pred, k, dev.live)
			}
		}
		autograd.SetDevice(nil)
		if steps == 0 || dev.Eigs != steps {
			t.Errorf("prediction %d: %d steps, %d decompositions on the device: the step did not take the device path", pred, steps, dev.Eigs)
		}
	}
}

// hostAdam is a Float64Device on kernel.Host that does not run Adam: the
// optimizer stays on the host (optim.Adam) while the tower, the alignment
// and the projection take the device path, with the same gradients.
type hostAdam struct{ kernel.Float64Device }

// sameBits fails unless a and b hold the same float64 bits.
func sameBits(t *testing.T, what string, a, b []float64) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d and %d values", what, len(a), len(b))
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			t.Fatalf("%s[%d]: %v and %v", what, i, a[i], b[i])
		}
	}
}

// TestSubTTAOptimizerOnDevice runs SubTTA's steps with the optimizer on
// the device (kernel.AdamDevice: autograd.DeviceAdam keeps the LayerNorm
// values, their gradients and the moments there) and with it on the host
// (optim.Adam, the rest on the device alike), over the fixture batches
// with a saved state after each step, a Reset between the second and the
// third, and a fourth step on the CPU (the moments brought back to the
// host optimizer): the logits, losses, saved states (values and moments)
// and the values after Reset agree bit for bit, since the device's Adam gives
// optim.Adam's bits and the gradients are the same. A method restored from
// a state saved on the device continues as the saved one did. A step after
// the first uploads no LayerNorm value and downloads no gradient: each of
// its two optimizer steps downloads the values and the non-finite count
// (one copy), where the host optimizer downloaded the gradients and the
// next pass uploaded the values.
func TestSubTTAOptimizerOnDevice(t *testing.T) {
	x := fxt.Open(t, "fixtures/subtta.safetensors")
	bsz, _ := x.Dense("b0.F1").Dims()
	px := fxtmodel.Pixels(t, bsz)
	var batches []int
	for k := range x.Batches("b", "F1") {
		batches = append(batches, k)
	}
	if len(batches) < 3 {
		t.Fatalf("%d fixture batches, want 3", len(batches))
	}
	type record struct {
		logits, losses []float64
		state          []byte
	}
	run := func(d kernel.Device, onDevice bool, copies func(k int)) ([]record, [][]float64) {
		s := subttaFromFixture(t, fxtmodel.TinyModel(t, false), x)
		autograd.SetDevice(d)
		defer autograd.SetDevice(nil)
		var recs []record
		var afterReset [][]float64
		for i, k := range append(batches[:3:3], batches[0]) {
			if i == 3 { // on the CPU: the moments come back to the host optimizer
				autograd.SetDevice(nil)
				onDevice = false
			}
			if i == 2 {
				if err := s.Reset(); err != nil {
					t.Fatal(err)
				}
				afterReset = s.tr.values()
			}
			if copies != nil {
				copies(i)
			}
			res, err := s.Step(px[k], bsz)
			if err != nil {
				t.Fatal(err)
			}
			if dev := s.tr.(*lnTrainer[float32]).dev; (dev != nil) != onDevice {
				t.Fatalf("step %d: optimizer on the device %v, want %v", i, dev != nil, onDevice)
			}
			st, err := s.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, record{res.Logits.RawMatrix().Data, []float64{res.Diag.Losses["align"], res.Diag.Losses["mint"]}, st})
		}
		return recs, afterReset
	}
	dev := &imageCounter{Float64Host: &devicetest.Float64Host{Device: kernel.Host}, size: len(px[0])}
	var ups, downs map[int]int
	got, gotReset := run(dev, true, func(i int) {
		if i == 1 {
			dev.resetCopies()
		} else if i == 2 {
			ups, downs = maps.Clone(dev.ups), maps.Clone(dev.downs)
		}
	})
	want, wantReset := run(hostAdam{&devicetest.Float64Host{Device: kernel.Host}}, false, nil)
	for i := range want {
		sameBits(t, fmt.Sprintf("step %d logits", i), got[i].logits, want[i].logits)
		sameBits(t, fmt.Sprintf("step %d losses", i), got[i].losses, want[i].losses)
		if !bytes.Equal(got[i].state, want[i].state) {
			t.Errorf("step %d: the state saved with the optimizer on the device differs from the host optimizer's", i)
		}
	}
	src := subttaFromFixture(t, fxtmodel.TinyModel(t, false), x).tr.values()
	for i := range src {
		sameBits(t, "values after Reset, on the device", gotReset[i], src[i])
		sameBits(t, "values after Reset, on the host", wantReset[i], src[i])
	}

	// The copies of the second step.
	names := subttaFromFixture(t, fxtmodel.TinyModel(t, false), x).tr.values()
	n, w := 0, len(names[0])
	for _, v := range names {
		n += len(v)
	}
	if downs[n+1] != 2 || downs[n] != 0 {
		t.Errorf("second step: %d downloads of the %d values and the count, %d of %d values (the gradients); want 2 and 0", downs[n+1], n, downs[n], n)
	}
	// Uploads of a LayerNorm's size: the row of zeros of each of the two
	// backward passes, no value.
	if ups[w] != 2 {
		t.Errorf("second step: %d uploads of %d values, want 2 (the backward passes' rows of zeros, no LayerNorm value)", ups[w], w)
	}

	// Restored from the state saved on the device after the first step,
	// a method continues as the saved one did.
	s := subttaFromFixture(t, fxtmodel.TinyModel(t, false), x)
	autograd.SetDevice(dev)
	defer autograd.SetDevice(nil)
	if err := s.UnmarshalBinary(got[0].state); err != nil {
		t.Fatal(err)
	}
	res, err := s.Step(px[batches[1]], bsz)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "resumed step's logits", res.Logits.RawMatrix().Data, got[1].logits)
	st, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(st, got[1].state) {
		t.Error("the resumed method's state differs from the uninterrupted one's")
	}
}
