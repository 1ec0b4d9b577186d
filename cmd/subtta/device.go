package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/gpu"
)

// deviceOptions are the values of --device and --tf32 (addDeviceFlags).
type deviceOptions struct {
	name string
	tf32 bool
}

// addDeviceFlags adds --device and --tf32 to f.
func addDeviceFlags(f *pflag.FlagSet, o *deviceOptions) {
	f.StringVar(&o.name, "device", "cpu", deviceHelp)
	f.BoolVar(&o.tf32, "tf32", false, tf32Help)
}

// deviceHelp and tf32Help are the help of --device and --tf32.
const (
	deviceHelp = "where the model runs: cpu, or cuda (an NVIDIA GPU, in a binary built with -tags cuda; docs/gpu.md)"
	tf32Help   = "with --device cuda: let cuBLAS use TF32 tensor cores (faster, about 1e-3 relative instead of float32's 1e-7)"
)

// use opens the device the flags name (useDevice); release gives it back.
// g is the arithmetic of the GPU's products that the command's
// --precision chose (precisionFlag.choose; gpu.FP32 for a command
// without the flag).
func (o *deviceOptions) use(g gpu.Precision, stderr io.Writer) (release func(), err error) {
	if o.tf32 && g != gpu.FP32 && g != gpu.TF32 {
		return nil, usagef("--tf32 with --precision %s: give one of them", g)
	}
	return useDevice(o.name, gpu.Options{TF32: o.tf32, Precision: g}, stderr)
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
