package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/gpu"
)

// deviceFlag adds --device to fs.
func deviceFlag(fs *flag.FlagSet) *string {
	return fs.String("device", "cpu", "where the model runs: cpu, or cuda (an NVIDIA GPU, in a binary built with -tags cuda; docs/gpu.md)")
}

// parseOnDevice parses args and opens the device that fs's --device flag
// (device) names; release gives it back.
func parseOnDevice(fs *flag.FlagSet, device *string, args []string, stderr io.Writer) (release func(), err error) {
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	return useDevice(*device, stderr)
}

// useDevice puts the model on the --device value: nothing to do for cpu;
// for cuda, the GPU becomes autograd's device until the returned function
// is called. A GPU that cannot be used (a binary built without the tag, no
// CUDA libraries, no device) is a usage error saying why, before any work.
func useDevice(name string, stderr io.Writer) (release func(), err error) {
	switch name {
	case "cpu":
		return func() {}, nil
	case "cuda":
	default:
		return nil, usagef("--device %q: want cpu or cuda", name)
	}
	if ok, why := gpu.Available(); !ok {
		return nil, usagef("--device cuda: %s", why)
	}
	d, err := gpu.Open(gpu.Options{})
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	fmt.Fprintf(stderr, "device: %s\n", d.Name())
	autograd.SetDevice(d)
	return func() {
		autograd.SetDevice(nil)
		if c, ok := d.(interface{ Close() error }); ok {
			c.Close()
		}
	}, nil
}
