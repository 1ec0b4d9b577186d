package main

import (
	"errors"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd/kernel"
)

// precisionHelp is the help of --precision, the same in every command that
// takes it (embed, classify, eval, serve, bench).
const precisionHelp = "arithmetic of the linear layers in passes without gradients: fp32, bf16 (AVX512_BF16 or AMX-BF16) or int8 (AVX2 or better: AVX-VNNI, AVX512-VNNI, AMX; weights per output channel, activations per row); adaptation's passes stay fp32"

// precisionFlag is the value of --precision.
type precisionFlag struct{ name *string }

// addPrecisionFlag adds --precision to fs: the one definition of the flag.
func addPrecisionFlag(fs *pflag.FlagSet) precisionFlag {
	return precisionFlag{fs.String("precision", "fp32", precisionHelp)}
}

// choose decides the precision once for the command: a known name, a CPU
// with a kernel for it (kernel.Select), and device, where the model runs
// ("cpu" for a command that runs nowhere else), the CPU: a device's
// products are float32, and there is no silent fallback to them.
func (p precisionFlag) choose(device string) (kernel.Choice, error) {
	prec, err := kernel.ParsePrecision(*p.name)
	if err != nil {
		return kernel.Choice{}, usagef("--precision %q: want fp32, bf16 or int8", *p.name)
	}
	if prec != kernel.FP32 && device != "cpu" {
		return kernel.Choice{}, usagef("--precision %s runs on the CPU only: leave out --device %s", prec, device)
	}
	c, err := kernel.Select(prec)
	if err != nil {
		return c, usagef("--precision %s: %v", prec, errors.Unwrap(err))
	}
	return c, nil
}
