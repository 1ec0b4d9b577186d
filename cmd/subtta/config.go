package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/internal/flagfile"
	"github.com/subtta/subtta/report"
)

// A command with --config reads its flags from a file whose keys are its
// long flag names (internal/flagfile), and --print-config writes the
// flags it would run with in that form: file, command line and defaults.
// configFlags adds both flags; readConfigFile reads the file, and prints.

// errConfigPrinted is what readConfigFile returns once --print-config has printed
// the configuration: the command stops there, successfully.
var errConfigPrinted = errors.New("configuration printed")

// configFile is the value of a --config flag, and what readConfigFile needs to
// read the file and print the configuration.
type configFile struct {
	path   string
	print  *bool
	stdout io.Writer
	opt    flagfile.Options
	// own, if not nil, reports whether the command reads a file itself
	// (eval's run.json), and the part of it that it reads: readConfigFile then
	// leaves it alone.
	own func(contents []byte) (part []byte, ok bool)

	text  []byte // the file's contents (of an own file, the part read), once read
	isOwn bool   // whether own claimed it
}

func (c *configFile) String() string {
	if c == nil {
		return ""
	}
	return c.path
}

func (c *configFile) Set(v string) error { c.path = v; return nil }

// Type names the flag's value in help.
func (c *configFile) Type() string { return "string" }

// configFlags adds --config and --print-config to f, the flags of a
// command whose configuration --print-config prints to stdout.
func configFlags(f *pflag.FlagSet, stdout io.Writer) *configFile {
	c := newConfigFile(stdout)
	f.Var(c, "config", configHelp)
	c.print = f.Bool("print-config", false, printConfigHelp)
	return c
}

// newConfigFile is the value of a --config flag printing to stdout.
func newConfigFile(stdout io.Writer) *configFile {
	return &configFile{stdout: stdout, opt: flagfile.Options{Skip: []string{"config", "print-config", "help"}},
		own: func([]byte) ([]byte, bool) { return nil, false }}
}

// configHelp and printConfigHelp are the help of --config and --print-config.
const (
	configHelp = "YAML (or JSON) file of flags: keys are the long flag names (- or _), values as on the command line,\n" +
		"lists for comma-separated or repeated flags, nested blocks for --set; flags given on the command line win"
	printConfigHelp = "print the configuration (--config, flags and defaults) as a --config file, and exit"
)

// read applies the --config file (if any) to fs, then with --print-config
// prints fs's configuration and returns errConfigPrinted.
func (c *configFile) read(fs flagfile.FlagSet) error {
	if c.path != "" {
		b, err := os.ReadFile(c.path)
		if err != nil {
			return usagef("--config: %v", err)
		}
		c.text = b
		if part, ok := c.own(b); ok {
			// Not the whole file: a results.json holds the command it ran
			// from, which would nest in the next one.
			c.text, c.isOwn = part, true
		} else {
			values, err := flagfile.Parse(b)
			if err == nil {
				err = flagfile.Apply(fs, values, c.opt)
			}
			if err != nil {
				return usagef("config %s: %v", c.path, err)
			}
		}
	}
	if !*c.print {
		return nil
	}
	if c.isOwn {
		return usagef("--print-config: %s is a results folder's file, whose \"config\" member eval --config reads as it is; --print-config prints only files of flags: leave it out to run that configuration", c.path)
	}
	header := fmt.Sprintf("subtta %s: the flags it runs with (--config, command line, defaults); run it with\n"+
		"subtta %s --config FILE. A key left out, or set to its flag's default, keeps the default.", fs.Name(), fs.Name())
	if err := flagfile.Write(c.stdout, fs, header, c.opt); err != nil {
		return fmt.Errorf("--print-config: %w", err)
	}
	return errConfigPrinted
}

// command is the command line and config file a command ran with, for
// its results: name is the command's ("eval").
func (c *configFile) command(name string, args []string) *report.Command {
	cmd := &report.Command{Args: append(append([]string{"subtta"}, strings.Fields(name)...), args...)}
	if c.path != "" {
		cmd.ConfigFile, cmd.ConfigText = c.path, string(c.text)
	}
	return cmd
}

// readConfigFile reads the --config file of fs, if the command has that
// flag (configFlags): wrapCommand calls it once the flags are parsed.
func readConfigFile(fs *pflag.FlagSet) error {
	if f := fs.Lookup("config"); f != nil {
		if c, ok := f.Value.(*configFile); ok {
			return c.read(flagfile.PFlags(fs))
		}
	}
	return nil
}

// Get returns the values, as flag.Getter: a config file gives a
// repeatable flag a list (internal/flagfile).
func (s *stringList) Get() any { return []string(*s) }

// Append, Replace and GetSlice make a stringList a pflag.SliceValue,
// which a config file gives a list as well.
func (s *stringList) Append(v string) error { *s = append(*s, v); return nil }

func (s *stringList) Replace(v []string) error { *s = append((*s)[:0], v...); return nil }

func (s *stringList) GetSlice() []string { return []string(*s) }
