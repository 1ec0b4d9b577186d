package autograd

import (
	"fmt"
	"sync"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// DeviceInput keeps a tower's input on the device across the passes of
// its owner (HoldOnDevice): a test-time adaptation step encodes the same
// images in two or three passes, and with the images held they go up once,
// at the first pass (or earlier, Prefetch), rather than once per pass.
// Release frees the copy.
//
// The hold is explicit rather than a compare of the values at each pass
// (as resident parameters are checked): the images of a batch are tens of
// megabytes (38 MB for 64 images of 224 pixels), so a compare would cost a
// pass over them on the host at each use, and their owner knows when they
// stop being used. While a tensor is held its values must not change.
type DeviceInput struct {
	v    []float32 // nil: nothing is held (not float32, or empty)
	mu   sync.Mutex
	refs int
	d    kernel.Device
	buf  kernel.Buf
	// ahead: buf came from kernel.Prefetcher.UploadAhead and no pass has
	// awaited it yet. used: a pass read buf.
	ahead, used bool
}

// heldKey identifies held values by their memory: a tensor wrapping the
// same values (clip.Model.Images wraps the caller's pixels) finds the hold.
type heldKey struct {
	p *float32
	n int
}

// heldInputs are the values held on the device, by their memory.
var heldInputs struct {
	mu sync.Mutex
	m  map[heldKey]*DeviceInput
}

// HoldOnDevice marks t, a tower's input (the images of VisionTowerOnDevice),
// as kept on the device until Release: the first pass on a device uploads
// it (or Prefetch did), the following ones read that copy. Nothing is
// uploaded before a pass runs or Prefetch is called, so holding costs
// nothing without a device. A tensor that is not a float32 matrix (a
// float64 model) is not held, and its handle's Release does nothing.
// Holding values already held, through this tensor or another over the
// same memory (HoldValues), returns the same handle, and the copy lives
// until each hold is released. The caller must not write into t's values
// until Release.
func HoldOnDevice(t smat.Tensor) *DeviceInput {
	if _, ok := t.(*smat.Dense[float32]); !ok {
		return &DeviceInput{}
	}
	return HoldValues(values[float32](t))
}

// HoldValues is HoldOnDevice for the values of a tensor yet to be made:
// the preprocessed images of a batch that a method's Step will wrap (its
// passes find the hold by the values' memory). The caller must not write
// into v until Release.
func HoldValues(v []float32) *DeviceInput {
	if len(v) == 0 {
		return &DeviceInput{}
	}
	k := heldKey{&v[0], len(v)}
	heldInputs.mu.Lock()
	defer heldInputs.mu.Unlock()
	if heldInputs.m == nil {
		heldInputs.m = make(map[heldKey]*DeviceInput)
	}
	h := heldInputs.m[k]
	if h == nil {
		h = &DeviceInput{v: v}
		heldInputs.m[k] = h
	}
	h.refs++
	return h
}

// Prefetch uploads the held values to the current device (SetDevice) now,
// rather than at the first pass that reads them, so that the caller can
// do it beside the device's work on something else: eval's reader uploads
// the next batch while the method steps on the current one. On a device
// that is a kernel.Prefetcher (package gpu) the copy runs beside the work
// queued on the device, and the first pass that reads it waits for it
// there; on another device it is an upload like a pass's. Without a
// device, for values not held (or released), or already on the device,
// it does nothing.
func (h *DeviceInput) Prefetch() error {
	d := CurrentDevice()
	if h == nil || h.v == nil || d == nil {
		return nil
	}
	heldInputs.mu.Lock()
	released := h.refs == 0
	heldInputs.mu.Unlock()
	if released { // nothing would free the copy
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf != nil && h.d == d {
		return nil
	}
	h.drop()
	var b kernel.Buf
	var err error
	p, ahead := d.(kernel.Prefetcher)
	if ahead {
		b, err = p.UploadAhead(h.v)
	} else if b, err = d.Alloc(len(h.v)); err == nil {
		if err = d.Upload(b, h.v); err != nil {
			d.Free(b)
		}
	}
	if err != nil {
		return fmt.Errorf("autograd: uploading a tower's input ahead (%d values) to %s: %w", len(h.v), d.Name(), err)
	}
	h.d, h.buf, h.ahead = d, b, ahead
	return nil
}

// Used reports whether a pass has read the held copy: a caller that
// prefetches a method's batches can stop when the method's passes do not
// read them (a method that encodes views made from the batch).
func (h *DeviceInput) Used() bool {
	if h == nil || h.v == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.used
}

// drop frees the device copy. Called with h.mu held.
func (h *DeviceInput) drop() {
	if h.buf != nil {
		h.d.Free(h.buf)
		h.d, h.buf, h.ahead = nil, nil, false
	}
}

// Release ends one hold of the tensor and, with the last, frees its copy
// on the device. A second Release of a handle whose holds are all released
// does nothing.
func (h *DeviceInput) Release() {
	if h == nil || h.v == nil {
		return
	}
	k := heldKey{&h.v[0], len(h.v)}
	heldInputs.mu.Lock()
	if h.refs == 0 {
		heldInputs.mu.Unlock()
		return
	}
	h.refs--
	last := h.refs == 0
	if last && heldInputs.m[k] == h {
		delete(heldInputs.m, k)
	}
	heldInputs.mu.Unlock()
	if !last {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drop()
}

// input returns t's values on the run's device: the held copy when t is
// held (uploaded at its first pass on this device), otherwise an upload
// that the run frees.
func (r *devRun) input(t smat.Tensor) kernel.Buf { return r.inputInto(t, nil) }

// inputInto is input uploading into dst (when not nil) where t is not
// held; where it is, the held copy is returned as by input.
func (r *devRun) inputInto(t smat.Tensor, dst kernel.Buf) kernel.Buf {
	if r.err != nil {
		return nil
	}
	v := values[float32](t)
	var h *DeviceInput
	if _, ok := t.(*smat.Dense[float32]); ok && len(v) > 0 {
		heldInputs.mu.Lock()
		h = heldInputs.m[heldKey{&v[0], len(v)}]
		heldInputs.mu.Unlock()
	}
	if h == nil {
		if dst == nil {
			return r.upload(v)
		}
		r.do(func() error { return r.d.Upload(dst, v) })
		return dst
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf == nil || h.d != r.d {
		h.drop() // another device since: move the copy
		b, err := r.d.Alloc(len(v))
		if err != nil {
			r.err = err
			return nil
		}
		if r.err = r.d.Upload(b, v); r.err != nil {
			r.d.Free(b)
			return nil
		}
		h.d, h.buf = r.d, b
	}
	if h.ahead {
		if r.err = r.d.(kernel.Prefetcher).Await(h.buf); r.err != nil {
			return nil
		}
		h.ahead = false
	}
	h.used = true
	return h.buf
}
