package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/gpu"
)

// deviceOptions are the values of --device, --tf32 and --cuda-graphs
// (addDeviceFlags).
type deviceOptions struct {
	name   string
	tf32   bool
	graphs bool
}

// addDeviceFlags adds --device, --tf32 and --cuda-graphs to f.
func addDeviceFlags(f *pflag.FlagSet, o *deviceOptions) {
	f.StringVar(&o.name, "device", "cpu", deviceHelp)
	f.BoolVar(&o.tf32, "tf32", false, tf32Help)
	f.BoolVar(&o.graphs, "cuda-graphs", true, graphsHelp)
}

// deviceHelp, tf32Help and graphsHelp are the help of --device, --tf32
// and --cuda-graphs.
const (
	deviceHelp = "where the model runs: cpu, or cuda (an NVIDIA GPU, in a binary built with -tags cuda; docs/gpu.md)"
	tf32Help   = "with --device cuda: let cuBLAS use TF32 tensor cores (faster, about 1e-3 relative instead of float32's 1e-7)"
	graphsHelp = "with --device cuda: replay the image tower's passes without gradients from a CUDA Graph, recorded at the second pass of each batch size (one launch in place of one per operation, the same results); false runs every pass op by op"
)

// use opens the device the flags name (useDevice); release gives it back.
// g is the arithmetic of the GPU's products that the command's
// --precision chose (precisionFlag.choose; gpu.FP32 for a command
// without the flag).
func (o *deviceOptions) use(g gpu.Precision, stderr io.Writer) (release func(), err error) {
	if o.tf32 && g != gpu.FP32 && g != gpu.TF32 {
		return nil, usagef("--tf32 with --precision %s: give one of them", g)
	}
	if !o.graphs && o.name != "cuda" {
		return nil, usagef("--cuda-graphs=false needs --device cuda")
	}
	return useDevice(o.name, gpu.Options{TF32: o.tf32, Precision: g, NoGraphs: !o.graphs}, stderr)
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
	autograd.GraphFailed = func(err error) {
		fmt.Fprintf(stderr, "warning: %v; those passes run op by op (the same results, more launches)\n", err)
	}
	return func() {
		autograd.SetDevice(nil)
		autograd.GraphFailed = nil
		if c, ok := d.(interface{ Close() error }); ok {
			c.Close()
		}
	}, nil
}
