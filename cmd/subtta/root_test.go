package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestMain runs the command itself when the test binary is called as
// subtta (the shell-completion test puts it on PATH under that name).
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "subtta" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestCommandConstructors: every command's constructor names it as its
// table does, with a summary, and cobra parses its flags; every command
// has flags but version.
func TestCommandConstructors(t *testing.T) {
	for name, newCmd := range commands {
		c := newCmd(io.Discard, io.Discard)
		if leaf := name[strings.LastIndexByte(name, ' ')+1:]; c.Name() != leaf {
			t.Errorf("%s: the constructor names it %q", name, c.Name())
		}
		if c.Short == "" || c.RunE == nil || c.DisableFlagParsing {
			t.Errorf("%s: want a summary and RunE, cobra parsing the flags", name)
		}
		if !c.HasAvailableFlags() && name != "version" {
			t.Errorf("%s: no flags", name)
		}
	}
}

func TestCLI(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		status         int
		stdout, stderr []string // each must appear
	}{
		{[]string{"--version"}, 0, []string{"subtta ", "cpu: ", "cuda: "}, nil},
		{[]string{"help", "convert"}, 0, []string{"subtta convert SRC DST [flags]", "--dtype string", `(default "f32")`, "--zstd"}, nil},
		{[]string{"convert", "--help"}, 0, []string{"subtta convert SRC DST [flags]"}, nil},
		{[]string{"convert", "-h"}, 0, []string{"subtta convert SRC DST [flags]"}, nil},
		{[]string{"help", "eval"}, 0, []string{"With no flags: the built-in model", "--batch-size int", "--no-shuffle"}, nil},
		{[]string{"help"}, 0, []string{"Available Commands:", "completion", "tokenize"}, nil},
		{[]string{"help", "evl"}, 2, nil, []string{`unknown command "evl"`, "Did you mean this?\n\teval"}},
		{[]string{"help", "eval", "extra"}, 2, nil, []string{`unknown help topic "eval extra"`}},
		{[]string{"__complete", "help", "tok"}, 0, []string{"tokenize\t"}, nil},
		{[]string{"completion", "bash"}, 0, []string{"__start_subtta"}, nil},
		{[]string{"completion", "zsh"}, 0, []string{"#compdef subtta"}, nil},
		{[]string{"completion", "fish"}, 0, []string{"complete -c subtta"}, nil},
		{[]string{"completion", "powershell"}, 0, []string{"Register-ArgumentCompleter"}, nil},
		{[]string{"__complete", "ev"}, 0, []string{"eval\t"}, nil},
		{[]string{"__complete", "bench", "--ba"}, 0, []string{"--batch\t", "--batch-size\t"}, nil},
		// Flag values.
		{[]string{"__complete", "eval", "--methods", ""}, 0, []string{"subtta-m\n", "tent\n"}, nil},
		{[]string{"__complete", "eval", "--corruptions", "fog,"}, 0, []string{"fog,snow\n"}, nil},
		{[]string{"__complete", "eval", "--dataset", ""}, 0, []string{"imagenet-c\n", "imagenet-r\n"}, nil},
		{[]string{"__complete", "corrupt", "--dataset", ""}, 0, []string{"cifar100\n"}, nil},
		{[]string{"__complete", "serve", "--method", ""}, 0, []string{"subtta-m\n"}, nil},
		{[]string{"serv"}, 2, nil, []string{`unknown command "serv"`, "Did you mean this?", "serve"}},
		{[]string{"--versio"}, 2, nil, []string{"unknown flag: --versio"}},
		// Flags after the arguments; "--" ends them.
		{[]string{"tokenize", "a cat", "--context", "1"}, 2, nil, []string{"--context 1: want 2 to 4096"}},
		{[]string{"tokenize", "--", "--context"}, 1, nil, []string{"/does/not/exist"}},
	} {
		var out, errb bytes.Buffer
		t.Setenv("SUBTTA_VOCAB", "/does/not/exist")
		st := run(tc.args, &out, &errb)
		ok := st == tc.status
		for _, s := range tc.stdout {
			ok = ok && strings.Contains(out.String(), s)
		}
		for _, s := range tc.stderr {
			ok = ok && strings.Contains(errb.String(), s)
		}
		if !ok {
			t.Errorf("subtta %q: status %d, stdout %q, stderr %q; want %d, %q and %q", tc.args, st, out.String(), errb.String(), tc.status, tc.stdout, tc.stderr)
		}
	}
}

// TestSubcommands: a command named with a space is a subcommand of the
// command its first words name, with its own flags.
func TestSubcommands(t *testing.T) {
	var got []string
	newCmd := func(name string) func(io.Writer, io.Writer) *cobra.Command {
		return func(io.Writer, io.Writer) *cobra.Command {
			c := &cobra.Command{Use: name + " ARG...", Short: "a " + name}
			n := c.Flags().Int(name+"-n", 1, "a number")
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if *n < 0 {
					return errors.New("negative")
				}
				got = append(got, name+":"+strings.Join(args, ","))
				return nil
			}
			return c
		}
	}
	commands["outer"] = newCmd("outer")
	commands["outer inner"] = newCmd("inner")
	defer delete(commands, "outer")
	defer delete(commands, "outer inner")
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"outer", "x", "--outer-n", "2"}, {"outer", "inner", "y", "-inner-n=3", "z"}} {
		if st := run(args, &out, &errb); st != 0 {
			t.Fatalf("%q: status %d: %s", args, st, errb.String())
		}
	}
	if want := []string{"outer:x", "inner:y,z"}; !slices.Equal(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
	if st := run([]string{"outer", "inner", "--inner-n", "-1"}, &out, &errb); st != 1 || !strings.Contains(errb.String(), "subtta outer inner: negative") {
		t.Errorf("status %d, stderr %q", st, errb.String())
	}
	errb.Reset()
	if st := run([]string{"outer", "inner", "--inner-m", "1"}, &out, &errb); st != 2 || !strings.Contains(errb.String(), "subtta outer inner: unknown flag: --inner-m (did you mean --inner-n?)") {
		t.Errorf("status %d, stderr %q", st, errb.String())
	}
	out.Reset()
	if st := run([]string{"help", "outer"}, &out, &errb); st != 0 || !strings.Contains(out.String(), "inner") || !strings.Contains(out.String(), "--outer-n int") {
		t.Errorf("help outer: status %d: %s", st, out.String())
	}
}

// TestBashCompletion loads `subtta completion bash` into bash and
// completes a command and a flag through it, the test binary standing in
// for subtta on PATH.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bash is not installed")
		}
		t.Skip("bash is not installed")
	}
	const bashCompletion = "/usr/share/bash-completion/bash_completion" // Debian's bash-completion
	if _, err := os.Stat(bashCompletion); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bash-completion is not installed")
		}
		t.Skip("bash-completion is not installed (apt-get install bash-completion)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(exe, filepath.Join(bin, "subtta")); err != nil {
		t.Fatal(err)
	}
	var script bytes.Buffer
	if st := run([]string{"completion", "bash"}, &script, io.Discard); st != 0 {
		t.Fatalf("completion bash: status %d", st)
	}
	file := filepath.Join(bin, "subtta.bash")
	if err := os.WriteFile(file, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"subtta cl", []string{"classify"}},
		{"subtta eval --batch", []string{"--batch-size"}},
		{"subtta bench --on", []string{"--only"}},
		{"subtta co", []string{"completion", "convert", "corrupt"}},
	} {
		words := strings.Fields(tc.line)
		prog := `source ` + bashCompletion + `; source "$1"; complete -p subtta >/dev/null || exit 3
COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<<"$2"; COMP_CWORD=$((${#COMP_WORDS[@]}-1))
__start_subtta; printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog, "bash", file, tc.line)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		var errb bytes.Buffer
		cmd.Stderr = &errb // compopt says it runs outside a completion
		outb, err := cmd.Output()
		if err != nil {
			t.Fatalf("%q: %v: %s", tc.line, err, errb.String())
		}
		got := strings.Fields(string(outb))
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("completing %q (%d words) gave %q, want %q", tc.line, len(words), got, tc.want)
		}
	}
}
