package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/flagfile"
	"github.com/subtta/subtta/report"
)

// configCommands are the commands that take --config.
var configCommands = []string{"eval", "serve", "train", "embed", "classify"}

// otherValue is a value of f other than its default, as a config file
// holds it and as command-line arguments.
func otherValue(t *testing.T, f flagfile.Flag) (file any, args []string) {
	flagArg := func(v string) []string { return []string{"--" + f.Name + "=" + v} }
	switch f.Kind {
	case flagfile.Map:
		return map[string]any{"m": map[string]any{"k": "v"}, "n.k2": 3},
			[]string{"--" + f.Name, "m.k=v", "--" + f.Name, "n.k2=3"}
	case flagfile.Bool:
		v := !f.Value.(bool)
		return v, flagArg(fmt.Sprint(v))
	case flagfile.Int, flagfile.Uint:
		n := 7
		if f.DefValue == "7" {
			n = 8
		}
		return n, flagArg(fmt.Sprint(n))
	case flagfile.Float:
		return 0.25, flagArg("0.25")
	case flagfile.Duration:
		return "3s", flagArg("3s")
	case flagfile.String:
		return "x-" + f.Name, flagArg("x-" + f.Name)
	case flagfile.List:
		return []any{"a {}", "b, c"}, []string{"--" + f.Name, "a {}", "--" + f.Name, "b, c"}
	}
	t.Fatalf("--%s: no test value for kind %v", f.Name, f.Kind)
	return nil, nil
}

// configurable is a new flag set of the command name, and parse, which
// reads a command line into it as the command does, its --config file
// included.
func configurable(t *testing.T, name string) (fs flagfile.FlagSet, parseArgs func([]string) error) {
	newCmd, ok := commands[name]
	if !ok {
		t.Fatalf("no command %s", name)
	}
	f := newCmd(io.Discard, io.Discard).Flags()
	return flagfile.PFlags(f), func(args []string) error {
		if err := f.Parse(args); err != nil {
			return err
		}
		return readConfigFile(f)
	}
}

// flagState is every flag's value, and the names of those set.
func flagState(fs flagfile.FlagSet) (values map[string]string, set []string) {
	values = map[string]string{}
	fs.VisitAll(func(f flagfile.Flag) {
		values[f.Name] = fmt.Sprint(f.Value)
		if fs.Changed(f.Name) {
			set = append(set, f.Name)
		}
	})
	delete(values, "config")
	set = slices.DeleteFunc(set, func(n string) bool { return n == "config" })
	slices.Sort(set)
	return values, set
}

// TestConfigEveryFlag writes a config file with every flag of a command's
// help as a key (with "_" for "-" in every other one), each to a value
// other than its default, and checks that it sets the flags as the same
// values on the command line do.
func TestConfigEveryFlag(t *testing.T) {
	for _, name := range configCommands {
		t.Run(name, func(t *testing.T) {
			fromFile, parseFile := configurable(t, name)
			fromArgs, parseArgs := configurable(t, name)
			if _, ok := fromFile.Lookup("config"); !ok {
				t.Fatalf("%s has no --config", name)
			}
			if _, ok := fromFile.Lookup("print-config"); !ok {
				t.Fatalf("%s has no --print-config", name)
			}
			file := map[string]any{}
			var args []string
			i := 0
			fromFile.VisitAll(func(f flagfile.Flag) {
				if f.Name == "config" || f.Name == "print-config" {
					return // the file's own flags
				}
				v, a := otherValue(t, f)
				key := f.Name
				if i%2 == 1 {
					key = strings.ReplaceAll(key, "-", "_")
				}
				i++
				file[key] = v
				args = append(args, a...)
			})
			b, err := yaml.Marshal(file)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "every.yaml")
			os.WriteFile(path, b, 0o644)
			if err := parseFile([]string{"--config", path}); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if err := parseArgs(args); err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			gotV, gotSet := flagState(fromFile)
			wantV, wantSet := flagState(fromArgs)
			for n, want := range wantV {
				if gotV[n] != want {
					t.Errorf("--%s from the file %q, from the command line %q", n, gotV[n], want)
				}
				if f, _ := fromArgs.Lookup(n); n != "print-config" && want == f.DefValue {
					t.Errorf("--%s: the test value %q is the default", n, want)
				}
			}
			if !slices.Equal(gotSet, wantSet) || len(gotSet) != len(wantV)-1 {
				t.Errorf("flags set from the file %q, from the command line %q", gotSet, wantSet)
			}
		})
	}
}

// TestPrintConfigRoundTrip: --print-config writes a file that --config
// reads back into the same configuration, for every command with
// --config: the same values and the same flags given (eval's --limit 0
// on the built-in images, all of them, is not its default of 1,000).
func TestPrintConfigRoundTrip(t *testing.T) {
	args := map[string][]string{
		"eval": {"--methods", "source,tent", "--corruptions", "fog,contrast", "--limit", "0", "--set", "tent.lr=5e-4",
			"--set", "subtta-m.rank=8", "--templates", "a photo of a {}.", "--templates", "t3", "--seed", "18446744073709551615", "--plot"},
		"serve":    {"--addr", "127.0.0.1:9", "--max-wait", "250ms", "--template", "a {}, drawn", "--guard-max-loss", "2.5"},
		"train":    {"--epochs", "3", "--lr", "0.001", "--out", "t: x", "--plot"},
		"embed":    {"--text", "yes", "--text", "no", "--normalize"},
		"classify": {"--labels", "a dog,a cat", "--template", "# {}"},
	}
	for _, name := range configCommands {
		t.Run(name, func(t *testing.T) {
			var first, stderr bytes.Buffer
			if st := run(append(append([]string{name}, args[name]...), "--print-config"), &first, &stderr); st != 0 {
				t.Fatalf("status %d: %s", st, stderr.String())
			}
			path := filepath.Join(t.TempDir(), "run.yaml")
			os.WriteFile(path, first.Bytes(), 0o644)
			var again bytes.Buffer
			if st := run([]string{name, "--config", path, "--print-config"}, &again, &stderr); st != 0 {
				t.Fatalf("status %d: %s\n%s", st, stderr.String(), first.String())
			}
			if again.String() != first.String() {
				t.Errorf("printed from the file:\n%s\nfrom the flags:\n%s", again.String(), first.String())
			}
			// The flags given, and only they, are keys (typed); every
			// other flag is there as its default, commented out.
			var m map[string]any
			if err := yaml.Unmarshal(first.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			var given []string
			for _, a := range args[name] {
				if n, ok := strings.CutPrefix(a, "--"); ok && !slices.Contains(given, n) {
					given = append(given, n)
				}
			}
			if keys := slices.Sorted(maps.Keys(m)); !slices.Equal(keys, slices.Sorted(slices.Values(given))) {
				t.Errorf("keys %q, want the flags given %q:\n%s", keys, given, first.String())
			}
		})
	}
}

// TestEvalConfigRuns: the YAML of the example (flags' names as
// keys) runs; --print-config of a run then runs the same thing (every
// domain resumed); results.json states the command line and the file.
func TestEvalConfigRuns(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	example := fmt.Sprintf(`model: %s
model_config: %s
vocab: %s
dataset: cifar10-c
data: %s
frost: %s
methods: [source, tent]
corruptions: gaussian_noise,contrast
limit: 8
batch-size: 4
out: %s
quiet: true
`, fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"), fixture.ModelConfig(t, "fixtures/clip-tiny.openai.safetensors"),
		fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz"), fixture.Path(t, "assets/cifar10/test-jpg.tar.gz"), dir, out)
	path := filepath.Join(dir, "example.yaml")
	os.WriteFile(path, []byte(example), 0o644)
	var stdout, stderr bytes.Buffer
	if st := run([]string{"eval", "--config", path}, &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if !strings.Contains(stderr.String(), "4 domains computed, 0 taken") || !strings.Contains(stdout.String(), "tent") {
		t.Errorf("stderr %s\nstdout %s", stderr.String(), stdout.String())
	}
	b, err := os.ReadFile(filepath.Join(out, eval.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Command report.Command `json:"command"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if want := []string{"subtta", "eval", "--config", path}; !slices.Equal(sum.Command.Args, want) || sum.Command.ConfigFile != path || sum.Command.ConfigText != example {
		t.Errorf("results.json's command: %+v; want args %q and the file", sum.Command, want)
	}

	// The configuration printed, with the file and a flag, runs the same:
	// nothing is computed again.
	stdout.Reset()
	if st := run([]string{"eval", "--config", path, "--seed", "1", "--print-config"}, &stdout, &stderr); st != 0 {
		t.Fatalf("--print-config: status %d: %s", st, stderr.String())
	}
	printed := filepath.Join(dir, "printed.yaml")
	os.WriteFile(printed, stdout.Bytes(), 0o644)
	stderr.Reset()
	if st := run([]string{"eval", "--config", printed}, io.Discard, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if !strings.Contains(stderr.String(), "0 domains computed, 4 taken from earlier runs") {
		t.Errorf("the printed configuration ran another thing: %s", stderr.String())
	}

	// A method_options block (results.json's name) is --set, frost_dir
	// --frost.
	opts := filepath.Join(dir, "options.yaml")
	os.WriteFile(opts, []byte("methods: [tent]\nmethod_options: {tent: {lr: 0.0005}}\nfrost_dir: overlays\n"), 0o644)
	fs := newEvalCmd(io.Discard, io.Discard).Flags()
	if err := fs.Parse([]string{"--config", opts}); err != nil {
		t.Fatal(err)
	}
	if err := readConfigFile(fs); err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("set").Value.String(); got != "tent.lr=0.0005" {
		t.Errorf("method_options gave --set %q", got)
	}
	if got := fs.Lookup("frost").Value.String(); got != "overlays" {
		t.Errorf("frost_dir gave --frost %q", got)
	}

	// The run.json and results.json (which states the command) of a
	// results folder are still config files.
	for _, f := range []string{eval.RunFile, eval.JSONFile} {
		stderr.Reset()
		if st := run([]string{"eval", "--config", filepath.Join(out, f)}, io.Discard, &stderr); st != 0 ||
			!strings.Contains(stderr.String(), "0 domains computed, 4 taken from earlier runs") {
			t.Errorf("--config %s: status %d, %s", f, st, stderr.String())
		}
	}
}

// TestConfigBadInput: a bad file is one line naming the key, exit 2.
func TestConfigBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"eval", "--config", write("typo.yaml", "frost_di: x\n")}, "unknown key frost_di; did you mean frost?"},
		{[]string{"eval", "--config", write("old.yaml", "frost_dri: x\n")}, "unknown key frost_dri; did you mean frost?"},
		{[]string{"train", "--config", write("nested.yaml", "config: other.yaml\n")}, "unknown key config: --config is not read from a file"},
		{[]string{"serve", "--config", write("block.yaml", "addr: {a: 1}\n")}, "addr: bad value: a block, but --addr takes a value"},
		{[]string{"eval", "--config", write("twice.yaml", "batch_size: 4\nbatch-size: 5\n")}, "key given twice"},
		{[]string{"eval", "--config", write("limit.yaml", "limit: many\n")}, `limit: bad value: "many"`},
		{[]string{"eval", "--config", write("list.yaml", "- a\n")}, "not a mapping of flag names to values"},
		{[]string{"embed", "--config", filepath.Join(dir, "missing.yaml")}, "--config: open"},
		{[]string{"eval", "--seeds", "1,x"}, `--seeds "1,x": "x" is not a seed`},
		{[]string{"eval", "--seeds", "1,2", "--seed", "3"}, "leave out --seed"},
	} {
		var stdout, stderr bytes.Buffer
		st := run(tc.args, &stdout, &stderr)
		if st != 2 || !strings.Contains(stderr.String(), tc.stderr) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and one line with %q", tc.args, st, stderr.String(), tc.stderr)
		}
	}
}
