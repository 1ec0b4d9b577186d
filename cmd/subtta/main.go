// Command subtta runs CLIP and test-time adaptation from the command line.
//
// Usage:
//
//	subtta <command> [flags] [arguments]
//
// Commands:
//
//	tokenize   CLIP BPE token ids of texts (JSON)
//	embed      image and text features of a model (JSON)
//	classify   zero-shot classification of images against labels
//	convert    rewrite a checkpoint as OpenAI-named safetensors (fp16/bf16, zstd)
//	pull       download a Hugging Face checkpoint into the cache
//	eval       test-time adaptation over a corrupted benchmark: the paper's table, CSV, JSON, plots
//	bench      images/s of the ViT-B/32 vision tower, forward and forward+backward
//	corrupt    write CIFAR-10/100-C or ImageNet-C from a clean dataset
//	train      train a small CLIP from scratch on CIFAR-10 (checkpoints, resume, log)
//	serve      HTTP classifier that adapts to each client's image stream (subtta-m)
//	loadtest   requests/s and latency of a subtta serve on this machine
//	version    the build, the CPU and whether CUDA is available
//
// Run `subtta <command> -h` for a command's flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/subtta/subtta/autograd"
)

type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"tokenize": {"CLIP BPE token ids of texts (JSON)", runTokenize},
	"embed":    {"image and text features of a model (JSON)", runEmbed},
	"classify": {"zero-shot classification of images against labels", runClassify},
	"convert":  {"rewrite a checkpoint as OpenAI-named safetensors (fp16/bf16, zstd)", runConvert},
	"pull":     {"download a Hugging Face checkpoint into the cache", runPull},
	"eval":     {"test-time adaptation over a corrupted benchmark: the paper's table, CSV, JSON, plots", runEval},
	"bench":    {"images/s of the ViT-B/32 vision tower, forward and forward+backward", runBench},
	"corrupt":  {"write CIFAR-10/100-C or ImageNet-C from a clean dataset", runCorrupt},
	"train":    {"train a small CLIP from scratch on CIFAR-10 (checkpoints, resume, log)", runTrain},
	"serve":    {"HTTP classifier that adapts to each client's image stream (subtta-m)", runServe},
	"loadtest": {"requests/s and latency of a subtta serve on this machine", runLoadtest},
	"version":  {"the build, the CPU and whether CUDA is available", runVersion},
}

func main() {
	// Nearly all of subtta's heap is pointer-free float buffers, so a
	// collection costs well under a millisecond of marking, while Go's default
	// GOGC=100 lets the heap grow to twice the live data before collecting.
	// A TTA step (about 1.4 GB live on ViT-B/32 at batch 64) then peaked at
	// 2.9 GB resident; at 25 it peaks at 2.0 GB, no slower. GOGC in the
	// environment still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// defaultGCPercent is the GOGC subtta runs with unless the environment sets one.
const defaultGCPercent = 25

// run executes one command and returns the exit status: 0 on success, 1 on
// an error, 2 on bad usage. A panic inside a command is reported as an
// error rather than a crash.
func run(args []string, stdout, stderr io.Writer) (status int) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "subtta: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(*autograd.DeviceError); ok {
				// The GPU failed (out of memory, a CUDA error): not a bug.
				fmt.Fprintf(stderr, "subtta %s: %v\n", args[0], e)
				status = 1
				return
			}
			// A bug, not bad input: one line for the user, the stack only
			// when asked for (SUBTTA_TRACE=1).
			fmt.Fprintf(stderr, "subtta %s: internal error: %v (please report it; SUBTTA_TRACE=1 prints the stack)\n", args[0], r)
			if os.Getenv("SUBTTA_TRACE") == "1" {
				stderr.Write(debug.Stack())
			}
			status = 1
		}
	}()
	if err := cmd.run(args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if errors.Is(err, errInterrupted) {
			return 130 // as a shell reports a process ended by SIGINT
		}
		// Package errors start with the package's name, often the
		// command's: "subtta eval: eval: …" says it twice.
		msg := strings.TrimPrefix(err.Error(), args[0]+": ")
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "subtta %s: %s\n", args[0], msg)
			return 2
		}
		fmt.Fprintf(stderr, "subtta %s: %s\n", args[0], msg)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: subtta <command> [flags] [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s  %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'subtta <command> -h' for the flags of a command.")
}

// errInterrupted is returned by a command that stopped on SIGINT or SIGTERM
// after saving its work; the message is already printed.
var errInterrupted = errors.New("interrupted")

// usageError marks a bad invocation (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name, args string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: subtta %s [flags] %s\n", name, args)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags, which may come before, between or after the
// positional arguments (`convert SRC DST --dtype f16`); "--" ends the
// flags. A flag error is a usage error.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(interspersed(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

// interspersed reorders args so that every flag (with its value) comes
// before the positional arguments, as the standard flag package expects.
func interspersed(fs *flag.FlagSet, args []string) []string {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // the flag package reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(append(flags, "--"), positional...)
}
