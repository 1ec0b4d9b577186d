package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/gpu"
)

// precisionHelp is the help of --precision.
const precisionHelp = "arithmetic of the linear layers in passes without gradients: fp32, bf16 (AVX512_BF16 or AMX-BF16) or int8 (AVX2 or better: AVX-VNNI, AVX512-VNNI, AMX; weights per output channel, activations per row); adaptation's passes stay fp32. With --device cuda: tf32, bf16 or fp16, every product of the GPU on tensor cores with float32 sums (docs/gpu.md)"

// precisionFlag adds --precision to fs.
func precisionFlag(fs *flag.FlagSet) *string { return fs.String("precision", "fp32", precisionHelp) }

// parsePrecision checks the value of --precision: a known name and, for
// the CPU's bf16 and int8, a CPU with a kernel for it and no device. With
// --device cuda, tf32, bf16 and fp16 are the arithmetic of the GPU's
// products (gpu.Options.Precision, set by parseOnDevice): the model stays
// float32 here, and the result is kernel.FP32.
func parsePrecision(name string, device deviceFlags) (kernel.Precision, error) {
	if g, err := gpu.ParsePrecision(name); err == nil && g != gpu.FP32 {
		if *device.name == "cuda" {
			return kernel.FP32, nil
		}
		if g != gpu.BF16 {
			return kernel.FP32, usagef("--precision %s needs --device cuda", name)
		}
	}
	p, err := kernel.ParsePrecision(name)
	if err != nil {
		return p, usagef("--precision %q: want fp32, bf16 or int8 (on the CPU), or tf32, bf16 or fp16 with --device cuda", name)
	}
	if p == kernel.FP32 {
		return p, nil
	}
	if *device.name != "cpu" {
		return p, usagef("--precision %s runs on the CPU only: leave out --device %s", p, *device.name)
	}
	if err := kernel.CheckPrecision(p); err != nil {
		return p, usagef("--precision %s: %v", p, errors.Unwrap(err))
	}
	return p, nil
}

// precisionID names prec in records of results, "" for fp32: its name,
// and how this CPU's kernel computes it where that differs from the
// AVX-512 kernels (kernel.LowArithmetic), whose results differ in their
// last bits.
func precisionID(prec kernel.Precision) string {
	if prec == kernel.FP32 {
		return ""
	}
	if a := kernel.LowArithmetic(prec); a != "" {
		return prec.String() + " (" + a + ")"
	}
	return prec.String()
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

// withDevicePrecision is precisionID(prec) followed by devicePrecisionID.
func withDevicePrecision(prec kernel.Precision) string {
	ids := []string{precisionID(prec), devicePrecisionID()}
	return strings.Join(slices.DeleteFunc(ids, func(s string) bool { return s == "" }), ", ")
}

// setPrecision converts m's linear layers to p (nothing for fp32).
func setPrecision(m *clip.Model, p kernel.Precision) error {
	if p == kernel.FP32 {
		return nil
	}
	if err := m.SetPrecision(p); err != nil {
		return fmt.Errorf("--precision %s: %w", p, err)
	}
	return nil
}
