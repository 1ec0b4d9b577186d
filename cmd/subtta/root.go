package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/internal/flagfile"
)

// The command line is a cobra command tree built from the commands table.
// A command is built by its own constructor (newConvertCmd and the like),
// which binds its flags to the fields of an options struct and whose RunE
// calls the options' run; cobra parses the flags (GNU style: --name, flags
// anywhere, "--" ends them). The tree adds what every command shares: the
// exit status and "subtta CMD: message" of an error (finish), a panic
// reported as an error, the --config file read before the command runs,
// usage errors naming the flags of similar spelling, and the standard flag
// package's -name read as --name.

// exitStatus is returned through cobra by a command that has already
// reported its outcome; run exits with status.
type exitStatus struct{ status int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.status) }

// newRoot builds the command tree. Commands whose name has a space
// ("eval merge") become subcommands of the command named by the words
// before the last.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "subtta",
		Short: "CLIP and test-time adaptation from the command line",
		Long: "subtta runs CLIP and test-time adaptation (TTA) from the command line.\n\n" +
			"Run 'subtta help COMMAND' or 'subtta COMMAND --help' for a command's flags.",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	version := root.Flags().Bool("version", false, "print the build, the CPU and whether CUDA is available")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if *version {
			printVersion(stdout)
			return nil
		}
		root.SetOut(stderr)
		root.Help()
		return exitStatus{2}
	}
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help prints the flags and the use of any command.",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			cmd, _, err := root.Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, sub.Name()+"\t"+sub.Short)
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			switch {
			case err != nil:
				return usageError{err.Error()}
			case len(rest) > 0:
				return usageError{fmt.Sprintf("unknown help topic %q", strings.Join(args, " "))}
			}
			return cmd.Help()
		},
	})
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if _, ok := commands[commandPath(c)]; !ok {
			return usageError{err.Error()} // run reports it
		}
		return finish(c, commandPath(c), flagError(c.Flags(), err), stderr)
	})

	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	// Parents before their subcommands.
	sort.Slice(names, func(i, j int) bool {
		wi, wj := strings.Count(names[i], " "), strings.Count(names[j], " ")
		if wi != wj {
			return wi < wj
		}
		return names[i] < names[j]
	})
	byName := map[string]*cobra.Command{"": root}
	for _, name := range names {
		parentName, leaf := "", name
		if i := strings.LastIndexByte(name, ' '); i >= 0 {
			parentName, leaf = name[:i], name[i+1:]
		}
		parent, ok := byName[parentName]
		if !ok {
			panic(fmt.Sprintf("subtta: command %q has no parent command %q", name, parentName))
		}
		c := wrapCommand(name, commands[name](stdout, stderr), stderr)
		if c.Name() != leaf {
			panic(fmt.Sprintf("subtta: command %q is named %q by its constructor", name, c.Name()))
		}
		parent.AddCommand(c)
		byName[name] = c
	}
	// cobra's completion command prints its help, successfully, when
	// given a shell it does not know ("completion bsh"): built here
	// rather than at Execute, it runs its help only without arguments, so
	// that an unknown shell is the usage error of an unknown command.
	root.InitDefaultCompletionCmd()
	if comp, _, err := root.Find([]string{"completion"}); err == nil && comp != root && comp.RunE == nil && comp.Run == nil {
		comp.RunE = func(c *cobra.Command, args []string) error { return c.Help() }
	}
	return root
}

// wrapCommand gives c, the command named path built by its constructor,
// what every command shares: its --config file read (configFlags) before
// it runs, a panic reported as an error rather than a crash, and its
// outcome reported by finish.
func wrapCommand(path string, c *cobra.Command, stderr io.Writer) *cobra.Command {
	runE := c.RunE
	if runE == nil {
		panic(fmt.Sprintf("subtta: command %q has no RunE", path))
	}
	c.SilenceErrors, c.SilenceUsage = true, true
	c.RunE = func(cmd *cobra.Command, args []string) error {
		err := readConfigFile(cmd.Flags())
		if err == nil {
			err = callRun(path, func([]string, io.Writer, io.Writer) error { return runE(cmd, args) }, args, nil, stderr)
		}
		return finish(cmd, path, err, stderr)
	}
	return c
}

// parseCommandLine parses args into the flags of c, built by its
// constructor, as the command line does (-name read as --name, a flag
// error a usage error, the --config file read), and returns the
// positional arguments: for callers that run a command's options without
// Execute (serveMain).
func parseCommandLine(c *cobra.Command, args []string) ([]string, error) {
	fs := c.Flags()
	err := fs.Parse(doubleDash(fs, args))
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return nil, err
	case err != nil:
		return nil, flagError(fs, err)
	}
	return fs.Args(), readConfigFile(fs)
}

// commandLineKey is the context key of the command line after the
// command's name, as typed: what results record (report.Command).
type commandLineKey struct{}

// commandLine is the command line after the command's name, as typed.
func commandLine(ctx context.Context) []string {
	args, _ := ctx.Value(commandLineKey{}).([]string)
	return args
}

// commandPath is the name of c as the commands table spells it: its path
// without "subtta ".
func commandPath(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// flagError is the usage error of err, pflag's error parsing the flags
// fs, in subtta's wording: an invalid value as `invalid value "x" for
// --reps: invalid syntax`, an unknown flag with the flags of similar
// spelling.
func flagError(fs *pflag.FlagSet, err error) error {
	var iv *pflag.InvalidValueError
	if errors.As(err, &iv) {
		cause := iv.Unwrap()
		var num *strconv.NumError
		if errors.As(cause, &num) {
			cause = num.Err // "invalid syntax", not strconv's function
		}
		return usagef("invalid value %q for --%s: %v", iv.GetValue(), iv.GetFlag().Name, cause)
	}
	return usageError{err.Error() + suggestFlag(fs, err)}
}

// callRun runs a command; a panic inside it is reported as an error
// rather than a crash.
func callRun(path string, run func([]string, io.Writer, io.Writer) error, args []string, stdout, stderr io.Writer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(*autograd.DeviceError); ok {
				// The GPU failed (out of memory, a CUDA error): not a bug.
				err = e
				return
			}
			// A bug, not bad input: one line for the user, the stack only
			// when asked for (SUBTTA_TRACE=1).
			err = fmt.Errorf("internal error: %v (please report it; SUBTTA_TRACE=1 prints the stack)", r)
			if os.Getenv("SUBTTA_TRACE") == "1" {
				stderr.Write(debug.Stack())
			}
		}
	}()
	return run(args, stdout, stderr)
}

// finish reports the outcome of the command named path and returns the
// exitStatus run exits with: 0 on success or help, 1 on an error, 2 on
// bad usage, 130 when interrupted.
func finish(cmd *cobra.Command, path string, err error, stderr io.Writer) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pflag.ErrHelp):
		cmd.Help()
		return nil
	case errors.Is(err, errConfigPrinted):
		return nil
	case errors.Is(err, errInterrupted):
		return exitStatus{130} // as a shell reports a process ended by SIGINT
	}
	// Package errors start with the package's name, often the command's:
	// "subtta eval: eval: …" says it twice.
	last := path[strings.LastIndexByte(path, ' ')+1:]
	msg := strings.TrimPrefix(err.Error(), last+": ")
	fmt.Fprintf(stderr, "subtta %s: %s\n", path, msg)
	var ue usageError
	if errors.As(err, &ue) {
		return exitStatus{2}
	}
	return exitStatus{1}
}

// run executes one command line and returns the exit status: 0 on
// success, 1 on an error, 2 on bad usage, 130 when interrupted.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	ctx := context.Background()
	if c, rest, err := root.Find(args); err == nil && c.HasParent() {
		ctx = context.WithValue(ctx, commandLineKey{}, rest)
		args = doubleDash(c.Flags(), args)
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var st exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &st):
		return st.status
	}
	// cobra's own errors: an unknown command or a bad flag of the root.
	fmt.Fprintf(stderr, "subtta: %s\n", strings.TrimRight(err.Error(), "\n"))
	fmt.Fprintln(stderr, "Run 'subtta --help' for usage.")
	return 2
}

// doubleDash rewrites the standard flag package's -name (and -name=value)
// as --name for the flags of fs whose names are longer than a letter, up
// to "--", leaving alone the values of flags.
func doubleDash(fs *pflag.FlagSet, args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, hasValue := strings.Cut(name, "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if a[1] != '-' && len(name) > 1 {
			out[i] = "-" + a
		}
		if !hasValue && f.NoOptDefVal == "" {
			i++ // the flag's value, whatever it looks like
		}
	}
	return out
}

// suggestFlag names the flags of fs spelled like the unknown one that
// err reports, as " (did you mean --x?)", or "".
func suggestFlag(fs *pflag.FlagSet, err error) string {
	msg := err.Error()
	const prefix = "unknown flag: --"
	if !strings.HasPrefix(msg, prefix) {
		return ""
	}
	typed := msg[len(prefix):]
	var near []string
	fs.VisitAll(func(f *pflag.Flag) {
		if d := flagfile.EditDistance(typed, f.Name); d <= 2 || (len(typed) >= 3 && strings.HasPrefix(f.Name, typed)) {
			near = append(near, "--"+f.Name)
		}
	})
	if len(near) == 0 {
		return ""
	}
	return " (did you mean " + strings.Join(near, " or ") + "?)"
}
