package main

import (
	"errors"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/gpu"
)

// precisionCPU lists --precision's values on the CPU, for help texts.
const precisionCPU = "fp32, bf16 (AVX512_BF16 or AMX-BF16) or int8 (AVX2 or better: AVX-VNNI, AVX512-VNNI, AMX; weights per output channel, activations per row)"

// precisionHelp is the help of --precision, the same in every command that
// takes it with --device (embed, classify, eval, bench); serve, which has
// no --device, has its own (addCPUPrecisionFlag).
const precisionHelp = "arithmetic of the linear layers in passes without gradients: " + precisionCPU + "; adaptation's passes stay fp32. With --device cuda: tf32, bf16 or fp16, every product of the GPU on tensor cores with float32 sums (docs/gpu.md)"

// precisionFlag is the value of --precision.
type precisionFlag struct {
	name *string
	// cpuOnly: the command has no --device and runs on the CPU, so that
	// its errors name no GPU precision and no --device.
	cpuOnly bool
}

// addPrecisionFlag adds --precision to fs: the one definition of the flag.
func addPrecisionFlag(fs *pflag.FlagSet) precisionFlag {
	return precisionFlag{name: fs.String("precision", "fp32", precisionHelp)}
}

// addCPUPrecisionFlag adds --precision to the flags fs of a command that
// has no --device (serve): help says what it applies to and is followed by
// the CPU's values; choose refuses the GPU's values as this command's
// mistake, rather than asking for a --device the command does not take.
func addCPUPrecisionFlag(fs *pflag.FlagSet, help string) precisionFlag {
	return precisionFlag{name: fs.String("precision", "fp32", help+": "+precisionCPU), cpuOnly: true}
}

// choose decides the precision once for the command: a known name and,
// for the CPU's bf16 and int8, a CPU with a kernel for it (kernel.Select)
// with the model on the CPU (device "cpu"; "cpu" too for a command that
// runs nowhere else, whose flag of addCPUPrecisionFlag takes the CPU's
// values only): there is no silent fallback to float32. With device
// "cuda", tf32, bf16 and fp16 are the arithmetic of the GPU's products
// (g, for gpu.Options.Precision: deviceOptions.use) and the model stays
// float32 here: the choice is kernel.FP32's. g is gpu.FP32 otherwise.
func (p precisionFlag) choose(device string) (c kernel.Choice, g gpu.Precision, err error) {
	if p.cpuOnly {
		if _, err := kernel.ParsePrecision(*p.name); err != nil {
			if gp, err := gpu.ParsePrecision(*p.name); err == nil && gp != gpu.FP32 {
				return kernel.Choice{}, gpu.FP32, usagef("--precision %s is an arithmetic of the GPU, and this command runs on the CPU only: want fp32, bf16 or int8", *p.name)
			}
			return kernel.Choice{}, gpu.FP32, usagef("--precision %q: want fp32, bf16 or int8", *p.name)
		}
		device = "cpu"
	}
	if gp, err := gpu.ParsePrecision(*p.name); err == nil && gp != gpu.FP32 {
		if device == "cuda" {
			c, err := kernel.Select(kernel.FP32)
			return c, gp, err
		}
		if gp != gpu.BF16 {
			return kernel.Choice{}, gpu.FP32, usagef("--precision %s needs --device cuda", *p.name)
		}
	}
	prec, err := kernel.ParsePrecision(*p.name)
	if err != nil {
		return kernel.Choice{}, gpu.FP32, usagef("--precision %q: want fp32, bf16 or int8 (on the CPU), or tf32, bf16 or fp16 with --device cuda", *p.name)
	}
	if prec != kernel.FP32 && device != "cpu" {
		return kernel.Choice{}, gpu.FP32, usagef("--precision %s runs on the CPU only: leave out --device %s", prec, device)
	}
	if c, err = kernel.Select(prec); err != nil {
		return c, gpu.FP32, usagef("--precision %s: %v", prec, errors.Unwrap(err))
	}
	return c, gpu.FP32, nil
}

// devicePrecisionID names the GPU's products in records of results when
// they are not float32 (--precision tf32, bf16 or fp16 with --device cuda,
// or --tf32), "" otherwise: another precision is another model.
func devicePrecisionID() string {
	if g := gpu.PrecisionOf(autograd.CurrentDevice()); g != gpu.FP32 {
		return "GPU products in " + g.String()
	}
	return ""
}

// withDevicePrecision is c.ID() followed by devicePrecisionID: the
// precision a bulk embedding's settings record.
func withDevicePrecision(c kernel.Choice) string {
	ids := []string{c.ID(), devicePrecisionID()}
	return strings.Join(slices.DeleteFunc(ids, func(s string) bool { return s == "" }), ", ")
}
