package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/gpu"
)

// deviceFlags are the values of --device and --tf32.
type deviceFlags struct {
	name *string
	tf32 *bool
}

// deviceFlag adds --device and --tf32 to fs.
func deviceFlag(fs *flag.FlagSet) deviceFlags {
	return deviceFlags{
		name: fs.String("device", "cpu", deviceHelp),
		tf32: fs.Bool("tf32", false, tf32Help),
	}
}

// deviceHelp and tf32Help are the help of every --device and --tf32 flag.
const (
	deviceHelp = "where the model runs: cpu, or cuda (an NVIDIA GPU, in a binary built with -tags cuda; docs/gpu.md)"
	tf32Help   = "with --device cuda: let cuBLAS use TF32 tensor cores (faster, about 1e-3 relative instead of float32's 1e-7)"
)

// parseOnDevice parses args and opens the device that fs's --device flag
// (device) names; release gives it back.
func parseOnDevice(fs *flag.FlagSet, device deviceFlags, args []string, stderr io.Writer) (release func(), err error) {
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	return useDevice(*device.name, gpu.Options{TF32: *device.tf32}, stderr)
}

// useDevice puts the model on the --device value: nothing to do for cpu;
// for cuda, the GPU opened with opt becomes autograd's device until the
// returned function is called. A GPU that cannot be used (a binary built
// without the tag, no CUDA libraries, no device) is a usage error saying
// why, before any work.
func useDevice(name string, opt gpu.Options, stderr io.Writer) (release func(), err error) {
	switch name {
	case "cpu":
		if opt.TF32 {
			return nil, usagef("--tf32 needs --device cuda")
		}
		return func() {}, nil
	case "cuda":
	default:
		return nil, usagef("--device %q: want cpu or cuda", name)
	}
	if ok, why := gpu.Available(); !ok {
		return nil, usagef("--device cuda: %s", why)
	}
	d, err := gpu.Open(opt)
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
