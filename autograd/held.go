package autograd

import (
	"sync"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// DeviceInput keeps a tower's input on the device across the passes of
// its owner (HoldOnDevice): a test-time adaptation step encodes the same
// images in two or three passes, and with the images held they go up once,
// at the first pass, rather than once per pass. Release frees the copy.
//
// The hold is explicit rather than a compare of the values at each pass
// (as resident parameters are checked): the images of a batch are tens of
// megabytes (38 MB for 64 images of 224 pixels), so a compare would cost a
// pass over them on the host at each use, and their owner knows when they
// stop being used. While a tensor is held its values must not change.
type DeviceInput struct {
	t    *smat.Dense[float32] // nil: nothing is held (not float32)
	mu   sync.Mutex
	refs int
	d    kernel.Device
	buf  kernel.Buf
}

// heldInputs are the tensors held on the device, by tensor.
var heldInputs struct {
	mu sync.Mutex
	m  map[*smat.Dense[float32]]*DeviceInput
}

// HoldOnDevice marks t, a tower's input (the images of VisionTowerOnDevice),
// as kept on the device until Release: the first pass on a device uploads
// it, the following ones read that copy. Nothing is uploaded before a pass
// runs, so holding costs nothing without a device. A tensor that is not a
// float32 matrix (a float64 model) is not held, and its handle's Release
// does nothing. Holding a tensor already held returns the same handle, and
// the copy lives until each hold is released. The caller must not write
// into t's values until Release.
func HoldOnDevice(t smat.Tensor) *DeviceInput {
	dense, ok := t.(*smat.Dense[float32])
	if !ok || len(values[float32](t)) == 0 {
		return &DeviceInput{}
	}
	heldInputs.mu.Lock()
	defer heldInputs.mu.Unlock()
	if heldInputs.m == nil {
		heldInputs.m = make(map[*smat.Dense[float32]]*DeviceInput)
	}
	h := heldInputs.m[dense]
	if h == nil {
		h = &DeviceInput{t: dense}
		heldInputs.m[dense] = h
	}
	h.refs++
	return h
}

// Release ends one hold of the tensor and, with the last, frees its copy
// on the device. A second Release of a handle whose holds are all released
// does nothing.
func (h *DeviceInput) Release() {
	if h == nil || h.t == nil {
		return
	}
	heldInputs.mu.Lock()
	if h.refs == 0 {
		heldInputs.mu.Unlock()
		return
	}
	h.refs--
	last := h.refs == 0
	if last && heldInputs.m[h.t] == h {
		delete(heldInputs.m, h.t)
	}
	heldInputs.mu.Unlock()
	if !last {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf != nil {
		h.d.Free(h.buf)
		h.d, h.buf = nil, nil
	}
}

// input returns t's values on the run's device: the held copy when t is
// held (uploaded at its first pass on this device), otherwise an upload
// that the run frees.
func (r *devRun) input(t smat.Tensor) kernel.Buf {
	if r.err != nil {
		return nil
	}
	dense, ok := t.(*smat.Dense[float32])
	var h *DeviceInput
	if ok {
		heldInputs.mu.Lock()
		h = heldInputs.m[dense]
		heldInputs.mu.Unlock()
	}
	if h == nil {
		return r.upload(values[float32](t))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v := values[float32](t)
	if h.buf != nil && h.d == r.d && h.buf.Len() == len(v) {
		return h.buf
	}
	if h.buf != nil { // another device since: move the copy
		h.d.Free(h.buf)
		h.d, h.buf = nil, nil
	}
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
	return b
}
