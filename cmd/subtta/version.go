package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/gpu"
	"github.com/subtta/subtta/report"
)

// newVersionCmd is `subtta version`: the build and the machine, as eval
// records them.
func newVersionCmd(stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "the build, the CPU and whether CUDA is available",
		Long:  "the build, the CPU and whether CUDA is available",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("version takes no arguments")
			}
			printVersion(stdout)
			return nil
		},
	}
}

// printVersion prints the build and the machine.
func printVersion(stdout io.Writer) {
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
}
