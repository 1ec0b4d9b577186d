package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/gpu"
)

// TestDeviceFlag: --device cuda where no GPU can be used (in the default
// build: always) is a one-line usage error saying why, before any work, in
// every command that takes it; an unknown device is one too, and --tf32
// without --device cuda.
func TestDeviceFlag(t *testing.T) {
	ok, why := gpu.Available()
	for _, cmd := range []string{"eval", "bench", "classify", "embed", "train"} {
		var out, errb bytes.Buffer
		st := run([]string{cmd, "--device", "tpu"}, &out, &errb)
		if want := `--device "tpu": want cpu or cuda`; st != 2 || !strings.Contains(errb.String(), want) {
			t.Errorf("%s --device tpu: status %d, stderr %q; want 2 and %q", cmd, st, errb.String(), want)
		}
		errb.Reset()
		st = run([]string{cmd, "--tf32"}, &out, &errb)
		if want := "--tf32 needs --device cuda"; st != 2 || !strings.Contains(errb.String(), want) {
			t.Errorf("%s --tf32: status %d, stderr %q; want 2 and %q", cmd, st, errb.String(), want)
		}
		if ok {
			continue // a usable GPU: nothing to refuse
		}
		out.Reset()
		errb.Reset()
		st = run([]string{cmd, "--device", "cuda"}, &out, &errb)
		want := "subtta " + cmd + ": --device cuda: " + why + "\n"
		if st != 2 || errb.String() != want {
			t.Errorf("%s --device cuda: status %d, stderr %q; want 2 and %q", cmd, st, errb.String(), want)
		}
	}
	if !ok && !strings.Contains(why, "-tags cuda") && !strings.Contains(why, "not found") && !strings.Contains(why, "device") {
		t.Errorf("reason %q names neither the build nor a library nor the device", why)
	}
}

// TestDeviceErrorIsNotABug: a device that fails inside a pass (its error
// arrives as a panic) is reported as that error, without the words of an
// internal error.
func TestDeviceErrorIsNotABug(t *testing.T) {
	commands["failing-device"] = func(io.Writer, io.Writer) *cobra.Command {
		return &cobra.Command{Use: "failing-device", Short: "a device that fails", RunE: func(*cobra.Command, []string) error {
			panic(&autograd.DeviceError{Device: "GPU 0", Err: errors.New("gpu: cudaMalloc: cudaErrorMemoryAllocation (2)")})
		}}
	}
	defer delete(commands, "failing-device")
	var out, errb bytes.Buffer
	st := run([]string{"failing-device"}, &out, &errb)
	want := "subtta failing-device: autograd: device GPU 0: gpu: cudaMalloc: cudaErrorMemoryAllocation (2)\n"
	if st != 1 || errb.String() != want {
		t.Errorf("status %d, stderr %q; want 1 and %q", st, errb.String(), want)
	}
}
