package tta

import (
	"sync"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// imageCounter is a Float64Host (so that the alignment and the projection
// take their device path) counting the uploads of a batch's images (the
// only copies of their size) and the live buffers of that size.
type imageCounter struct {
	*devicetest.Float64Host
	size          int
	mu            sync.Mutex
	uploads, live int
}

func (c *imageCounter) Upload(dst kernel.Buf, src []float32) error {
	if len(src) == c.size {
		c.mu.Lock()
		c.uploads++
		c.mu.Unlock()
	}
	return c.Float64Host.Upload(dst, src)
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
