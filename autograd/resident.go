package autograd

import (
	"runtime"
	"sync"
	"unsafe"
	"weak"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// residentCheckMax is the largest tensor, in values, whose device copy is
// checked against its values at every use. A larger frozen tensor (the text
// tower's token embedding, 25 million values for ViT-B/32's CLIP) is
// checked by identity only: its backing array and size, as a kept packed
// weight is (LinearParams.KeepPacked).
const residentCheckMax = 1 << 20

// residents are the device copies of tensors made by devRun.resident, one
// per tensor: a cleanup frees a copy once its tensor is unreachable.
var residents struct {
	mu sync.Mutex
	m  map[weak.Pointer[smat.Dense[float32]]]*residentCopy
}

// residentCopy is one tensor's values on a device, and the values last
// uploaded there (shadow) for the change check.
type residentCopy struct {
	mu     sync.Mutex
	d      kernel.Device
	buf    kernel.Buf
	src    *float32
	shadow []float32 // nil when checked by identity only
}

// resident returns t's values on the run's device, uploading them only
// when they are not there yet or have changed since the last upload: a
// frozen weight goes up once; a trainable parameter (LayerNorm γ and β,
// TPT's context) once after each optimizer step rather than at every
// call. Whether the values changed is checked by comparing them bit for bit
// with a host copy of those last uploaded (a pass over the values on the
// host, where an upload would copy them into pinned memory and over the
// bus), for every tensor of up to residentCheckMax values and for every
// one that requires a gradient; a larger frozen tensor is checked by its
// backing array and size. A tensor that is not a float32 matrix of its own
// (a node of the tape) is uploaded for this run only.
//
// Runs that read a copy while another uploads new values into it must not
// overlap: a parameter changes between passes (an optimizer step), not
// during them.
func (r *devRun) resident(t smat.Tensor) kernel.Buf {
	return r.note(r.lookupResident(t))
}

// lookupResident is resident without devRun.note.
func (r *devRun) lookupResident(t smat.Tensor) kernel.Buf {
	if r.err != nil {
		return nil
	}
	if b := r.attachedValues(t); b != nil { // trained on the device (DeviceAdam)
		return b
	}
	v := values[float32](t)
	dense, ok := t.(*smat.Dense[float32])
	if !ok || len(v) == 0 {
		return r.upload(v)
	}
	key := weak.Make(dense)
	residents.mu.Lock()
	if residents.m == nil {
		residents.m = make(map[weak.Pointer[smat.Dense[float32]]]*residentCopy)
	}
	c := residents.m[key]
	if c == nil {
		c = &residentCopy{}
		residents.m[key] = c
		runtime.AddCleanup(dense, dropResident, key)
	}
	residents.mu.Unlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	check := len(v) <= residentCheckMax || t.RequiresGrad()
	switch {
	case c.d != r.d || c.buf == nil || c.buf.Len() != len(v):
		if c.buf != nil {
			c.d.Free(c.buf)
			c.buf, c.shadow = nil, nil
		}
		b, err := r.d.Alloc(len(v))
		if err != nil {
			r.err = err
			return nil
		}
		c.d, c.buf = r.d, b
	case c.src == &v[0] && (check && c.shadow != nil && equalBits(c.shadow, v) || !check && c.shadow == nil):
		return c.buf // unchanged
	}
	if r.err = r.d.Upload(c.buf, v); r.err != nil {
		c.d.Free(c.buf)
		c.buf = nil
		return nil
	}
	c.src = &v[0]
	c.shadow = nil
	if check {
		c.shadow = append(make([]float32, 0, len(v)), v...)
	}
	return c.buf
}

// dropResident frees the device copy of a tensor that is gone.
func dropResident(key weak.Pointer[smat.Dense[float32]]) {
	residents.mu.Lock()
	c := residents.m[key]
	delete(residents.m, key)
	residents.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf != nil {
		c.d.Free(c.buf)
		c.buf = nil
	}
}

// equalBits reports whether a and b hold the same bits (a NaN equals itself,
// −0 differs from +0).
func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	ua := unsafe.Slice((*uint32)(unsafe.Pointer(&a[0])), len(a))
	ub := unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b))
	for i, x := range ua {
		if ub[i] != x {
			return false
		}
	}
	return true
}
