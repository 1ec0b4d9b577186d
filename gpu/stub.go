//go:build !cuda || !cgo

package gpu

import (
	"errors"

	"github.com/subtta/subtta/autograd/kernel"
)

// Available reports whether a CUDA device can be used and, when it cannot,
// why: in this build, never.
func Available() (bool, string) { return false, unavailable }

// Open fails in this build, saying why.
func Open(Options) (kernel.Device, error) { return nil, errors.New("gpu: " + unavailable) }
