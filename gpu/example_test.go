//go:build !cuda

package gpu_test

import (
	"fmt"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/gpu"
)

// Example is how a program takes the GPU when it can: Available says why it
// cannot, Open returns the device to put under the model with
// autograd.SetDevice. In the default build (no -tags cuda, as here) there is
// no CUDA device, and both say how to build a binary that has one.
func Example() {
	ok, why := gpu.Available()
	fmt.Println("available:", ok)
	fmt.Println("why not:", why)
	dev, err := gpu.Open(gpu.Options{})
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	fmt.Println("device:", dev.Name())
	autograd.SetDevice(dev)
	defer autograd.SetDevice(nil)
	// Output:
	// available: false
	// why not: this binary was built without -tags cuda (go build -tags cuda ./cmd/subtta)
	// open: gpu: this binary was built without -tags cuda (go build -tags cuda ./cmd/subtta)
}
