// Package devicetest helps tests tell that model code took the device seam
// (autograd.SetDevice): a kernel.Device that counts the backward kernels
// it runs.
package devicetest

import (
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
