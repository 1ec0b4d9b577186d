package devicetest

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/symeig"
)

// BackwardCounter is a kernel.Device counting its LayerNorm and softmax
// backward calls: a block recording for backward ran its backward pass on
// the device only if they are counted there.
type BackwardCounter struct {
	kernel.Device
	LayerNormBackwards, SoftmaxBackwards atomic.Int32
}

// LayerNormBackward counts the call and passes it on.
func (c *BackwardCounter) LayerNormBackward(dx, dgamma, dbeta, dy, x kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	c.LayerNormBackwards.Add(1)
	return c.Device.LayerNormBackward(dx, dgamma, dbeta, dy, x, rows, cols, gamma, mean, rstd)
}

// LayerNormBackwardResidual counts the call as a LayerNormBackward (the
// same backward pass, with a residual's gradient added) and passes it on.
func (c *BackwardCounter) LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	c.LayerNormBackwards.Add(1)
	return c.Device.LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res, rows, cols, gamma, mean, rstd)
}

// SoftmaxBackward counts the call and passes it on.
func (c *BackwardCounter) SoftmaxBackward(dx, dy, y kernel.Buf, rows, cols int, scale float32) error {
	c.SoftmaxBackwards.Add(1)
	return c.Device.SoftmaxBackward(dx, dy, y, rows, cols, scale)
}

// TransferCounter is a kernel.Device counting the values it copies each
// way and the calls that copy them. It runs Adam (kernel.AdamDevice) when
// the device it wraps does.
type TransferCounter struct {
	kernel.Device
	mu                 sync.Mutex
	Up, Down           int // values
	Uploads, Downloads int // calls
}

// Upload counts the copy and passes it on.
func (c *TransferCounter) Upload(dst kernel.Buf, src []float32) error {
	c.mu.Lock()
	c.Up += len(src)
	c.Uploads++
	c.mu.Unlock()
	return c.Device.Upload(dst, src)
}

// Download counts the copy and passes it on.
func (c *TransferCounter) Download(dst []float32, src kernel.Buf) error {
	c.mu.Lock()
	c.Down += len(dst)
	c.Downloads++
	c.mu.Unlock()
	return c.Device.Download(dst, src)
}

// Reset sets the counts to zero.
func (c *TransferCounter) Reset() {
	c.mu.Lock()
	c.Up, c.Down, c.Uploads, c.Downloads = 0, 0, 0, 0
	c.mu.Unlock()
}

// Float64Host is a kernel.Float64Device on kernel.Host (or the device it
// wraps): Host's Dgemm and internal/symeig's decomposition, counting the
// float64 values that Upload and Download copy (half their float32 places)
// and the decompositions of more than one row (not the 1×1 with which
// feature.Aligner probes a device). SubTTA's alignment and projection take their
// device path on it, as they do on a GPU.
type Float64Host struct {
	kernel.Device
	mu             sync.Mutex
	Up, Down, Eigs int
}

// Upload counts the copy, in float64 values, and passes it on.
func (h *Float64Host) Upload(dst kernel.Buf, src []float32) error {
	h.mu.Lock()
	h.Up += len(src) / 2
	h.mu.Unlock()
	return h.Device.Upload(dst, src)
}

// Download counts the copy, in float64 values, and passes it on.
func (h *Float64Host) Download(dst []float32, src kernel.Buf) error {
	h.mu.Lock()
	h.Down += len(dst) / 2
	h.mu.Unlock()
	return h.Device.Download(dst, src)
}

// Dgemm is the wrapped device's (Host's) float64 product.
func (h *Float64Host) Dgemm(transA, transB bool, m, n, k int, alpha float64, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float64, c kernel.Buf, ldc int) error {
	d, ok := h.Device.(interface {
		Dgemm(bool, bool, int, int, int, float64, kernel.Buf, int, kernel.Buf, int, float64, kernel.Buf, int) error
	})
	if !ok {
		return fmt.Errorf("devicetest: %s has no Dgemm: %w", h.Device.Name(), kernel.ErrUnsupported)
	}
	return d.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SymEigInto decomposes a with internal/symeig, through host memory.
func (h *Float64Host) SymEigInto(values, vectors, a kernel.Buf, n int) error {
	if n > 1 {
		h.mu.Lock()
		h.Eigs++
		h.mu.Unlock()
	}
	full := make([]float64, n*n)
	if err := h.Device.Download(kernel.Float64Bits(full), a); err != nil {
		return err
	}
	dec, err := symeig.Factorize(mat.NewSymDense(n, full))
	if err != nil {
		return err
	}
	if err := h.Device.Upload(values, kernel.Float64Bits(dec.Values)); err != nil {
		return err
	}
	return h.Device.Upload(vectors, kernel.Float64Bits(mat.DenseCopyOf(dec.Vectors).RawMatrix().Data))
}

// ResetCounts sets the counts to zero.
func (h *Float64Host) ResetCounts() {
	h.mu.Lock()
	h.Up, h.Down, h.Eigs = 0, 0, 0
	h.mu.Unlock()
}

// adam returns d as a kernel.AdamDevice, or an error saying it is not one.
func adam(d kernel.Device) (kernel.AdamDevice, error) {
	a, ok := d.(kernel.AdamDevice)
	if !ok {
		return nil, fmt.Errorf("devicetest: %s does not run Adam: %w", d.Name(), kernel.ErrUnsupported)
	}
	return a, nil
}

// NonFinite is the wrapped device's, so that the optimizer of a method runs
// on the counter as on the device (kernel.AdamDevice).
func (c *TransferCounter) NonFinite(flag, x kernel.Buf, n int) error {
	a, err := adam(c.Device)
	if err != nil {
		return err
	}
	return a.NonFinite(flag, x, n)
}

// AdamStep is the wrapped device's.
func (c *TransferCounter) AdamStep(p, g, m, v kernel.Buf, n int, s kernel.AdamScalars, skip kernel.Buf) error {
	a, err := adam(c.Device)
	if err != nil {
		return err
	}
	return a.AdamStep(p, g, m, v, n, s, skip)
}

// NonFinite is the wrapped device's (Host's), so that a method's optimizer
// runs on the device here as on a GPU (kernel.AdamDevice).
func (h *Float64Host) NonFinite(flag, x kernel.Buf, n int) error {
	a, err := adam(h.Device)
	if err != nil {
		return err
	}
	return a.NonFinite(flag, x, n)
}

// AdamStep is the wrapped device's (Host's).
func (h *Float64Host) AdamStep(p, g, m, v kernel.Buf, n int, s kernel.AdamScalars, skip kernel.Buf) error {
	a, err := adam(h.Device)
	if err != nil {
		return err
	}
	return a.AdamStep(p, g, m, v, n, s, skip)
}

// LatePrefetcher is a kernel.Prefetcher over a device that is not one (or
// whose own is not to be used): UploadAhead's values reach the buffer only
// at Await, and until then it holds NaN, as a copy on a GPU's second stream
// may land only once something waits for it. A pass that reads such a
// buffer without Await gives NaN. It counts the calls, and the buffers of
// UploadAhead not yet freed.
type LatePrefetcher struct {
	kernel.Device
	mu      sync.Mutex
	pending []lateCopy // copies not yet awaited
	live    []kernel.Buf
	// ahead and awaits count the calls (an Await of a buffer already
	// awaited included): Calls.
	ahead, awaits int
}

type lateCopy struct {
	b kernel.Buf
	v []float32
}

// sameBuf tells whether a and b are one buffer (kernel.HostBuf is a slice).
func sameBuf(a, b kernel.Buf) bool {
	ha, ok1 := a.(kernel.HostBuf)
	hb, ok2 := b.(kernel.HostBuf)
	if ok1 || ok2 {
		return ok1 && ok2 && len(ha) == len(hb) && unsafe.SliceData(ha) == unsafe.SliceData(hb)
	}
	return a == b
}

// UploadAhead allocates the buffer, fills it with NaN and keeps a copy of
// src for Await.
func (p *LatePrefetcher) UploadAhead(src []float32) (kernel.Buf, error) {
	b, err := p.Device.Alloc(len(src))
	if err != nil {
		return nil, err
	}
	nan := make([]float32, len(src))
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	if err := p.Device.Upload(b, nan); err != nil {
		p.Device.Free(b)
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ahead++
	p.pending = append(p.pending, lateCopy{b, slices.Clone(src)})
	p.live = append(p.live, b)
	return b, nil
}

// Await copies b's values in, the first time.
func (p *LatePrefetcher) Await(b kernel.Buf) error {
	p.mu.Lock()
	p.awaits++
	var v []float32
	for i, c := range p.pending {
		if sameBuf(c.b, b) {
			v = c.v
			p.pending = slices.Delete(p.pending, i, i+1)
			break
		}
	}
	p.mu.Unlock()
	if v == nil {
		return nil
	}
	return p.Device.Upload(b, v)
}

// Free forgets an UploadAhead buffer and passes the call on.
func (p *LatePrefetcher) Free(b kernel.Buf) {
	p.mu.Lock()
	p.pending = slices.DeleteFunc(p.pending, func(c lateCopy) bool { return sameBuf(c.b, b) })
	p.live = slices.DeleteFunc(p.live, func(l kernel.Buf) bool { return sameBuf(l, b) })
	p.mu.Unlock()
	p.Device.Free(b)
}

// Live is the number of UploadAhead buffers not yet freed.
func (p *LatePrefetcher) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.live)
}

// Calls returns the number of calls to UploadAhead and to Await.
func (p *LatePrefetcher) Calls() (ahead, awaits int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ahead, p.awaits
}
