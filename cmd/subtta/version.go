package main

import (
	"fmt"
	"io"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/gpu"
	"github.com/subtta/subtta/report"
)

// runVersion prints the build and the machine, as eval records them.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version takes no arguments")
	}
	env := report.CurrentEnvironment()
	cpu := env.CPU
	if cpu == "" {
		cpu = "(model not known)"
	}
	build := env.Build
	if build == "unknown" {
		build = "(revision not recorded: go run, or a build with -buildvcs=false)"
	}
	fmt.Fprintf(stdout, "subtta %s, built with %s for %s/%s\n", build, env.Go, env.OS, env.Arch)
	fmt.Fprintf(stdout, "cpu: %s, %d threads, GEMM kernel %s\n", cpu, env.Threads, kernel.Kernel())
	if ok, why := gpu.Available(); ok {
		fmt.Fprintln(stdout, "cuda: available")
	} else {
		fmt.Fprintf(stdout, "cuda: %s\n", why)
	}
	return nil
}
