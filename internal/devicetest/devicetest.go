// Package devicetest helps tests tell that model code took the device seam
// (autograd.SetDevice): a kernel.Device that counts the backward kernels
// it runs, and one that counts the values it copies each way.
package devicetest

import (
	"sync"
	"sync/atomic"

	"github.com/subtta/subtta/autograd/kernel"
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

// SoftmaxBackward counts the call and passes it on.
func (c *BackwardCounter) SoftmaxBackward(dx, dy, y kernel.Buf, rows, cols int, scale float32) error {
	c.SoftmaxBackwards.Add(1)
	return c.Device.SoftmaxBackward(dx, dy, y, rows, cols, scale)
}

// TransferCounter is a kernel.Device counting the values it copies each
// way and the calls that copy them.
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
