package flagfile

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testFlags is a flag set with a flag of every kind Write and Apply treat
// apart.
type testFlags struct {
	fs        *flag.FlagSet
	model     *string
	methods   *string
	limit     *int
	seed      *uint64
	lr        *float64
	wait      *time.Duration
	plot      *bool
	set       KeyValues
	templates list
}

// list is a repeatable flag as commands define them.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }
func (l *list) Get() any           { return []string(*l) }

func newTestFlags() *testFlags {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &testFlags{fs: fs}
	fs.String("config", "", "config file")
	f.model = fs.String("model", "", "checkpoint")
	f.methods = fs.String("methods", "", "comma-separated methods")
	f.limit = fs.Int("limit", 0, "images per domain")
	f.seed = fs.Uint64("seed", 1, "shuffle seed")
	f.lr = fs.Float64("lr", 1e-3, "learning rate")
	f.wait = fs.Duration("max-wait", 2*time.Second, "longest wait")
	f.plot = fs.Bool("plot", false, "write plots")
	fs.Var(&f.set, "set", "METHOD.KEY=VALUE")
	fs.Var(&f.templates, "templates", "prompt templates,\nrepeated")
	return f
}

var opt = Options{Skip: []string{"config"}, Aliases: map[string]string{"method_options": "set"}}

func apply(t *testing.T, f *testFlags, file string, args ...string) error {
	t.Helper()
	if err := f.fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	v, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return Apply(GoFlags(f.fs), v, opt)
}

func TestApply(t *testing.T) {
	f := newTestFlags()
	err := apply(t, f, `
model: m.safetensors
limit: 50
seed: 18446744073709551615
lr: 5e-4
max_wait: 3s
plot: true
method_options: {subtta: {rank: 4, align: false}, tent: {lr: 0.0005}}
templates: ["a photo of a {}.", "a {}, drawn"]
`, "--limit", "7")
	if err != nil {
		t.Fatal(err)
	}
	if *f.model != "m.safetensors" || *f.limit != 7 || *f.seed != 1<<64-1 || *f.lr != 5e-4 || *f.wait != 3*time.Second || !*f.plot {
		t.Errorf("model %q limit %d seed %d lr %g wait %v plot %v", *f.model, *f.limit, *f.seed, *f.lr, *f.wait, *f.plot)
	}
	if want := []string{"subtta.align=false", "subtta.rank=4", "tent.lr=0.0005"}; !slices.Equal(f.set, want) {
		t.Errorf("set %q, want %q", f.set, want)
	}
	if want := []string{"a photo of a {}.", "a {}, drawn"}; !slices.Equal(f.templates, want) {
		t.Errorf("templates %q, want %q", f.templates, want)
	}
}

// A list given to a comma-separated flag is joined with commas; a key
// equal to the default sets its flag all the same (as on the command
// line), and null leaves it unset.
func TestApplyListAndDefault(t *testing.T) {
	f := newTestFlags()
	if err := apply(t, f, "methods: [a, b]\nseed: 1\nmax-wait: 2000ms\nlimit: null\n"); err != nil {
		t.Fatal(err)
	}
	if *f.methods != "a,b" {
		t.Errorf("methods %q", *f.methods)
	}
	var set []string
	f.fs.Visit(func(fl *flag.Flag) { set = append(set, fl.Name) })
	if want := []string{"max-wait", "methods", "seed"}; !slices.Equal(set, want) {
		t.Errorf("flags set: %q, want %q", set, want)
	}
}

func TestApplyErrors(t *testing.T) {
	for _, tc := range []struct {
		file string
		err  error
		msg  string
	}{
		{"frost_di: x\n", ErrUnknownKey, "unknown key frost_di (not a flag of test)"},
		{"modle: x\n", ErrUnknownKey, "unknown key modle; did you mean model?"},
		{"limits: 3\n", ErrUnknownKey, "unknown key limits; did you mean limit?"},
		{"config: other.yaml\n", ErrUnknownKey, "unknown key config: --config is not read from a file"},
		{"limit: x\n", ErrBadValue, `limit: bad value: "x" (want a whole number)`},
		{"max-wait: soon\n", ErrBadValue, `max-wait: bad value: "soon" (want a duration such as 250ms or 2s)`},
		{"limit: {a: 1}\n", ErrBadValue, "limit: bad value: a block, but --limit takes a value"},
		{"max_wait: 1s\nmax-wait: 2s\n", ErrTwice, "max-wait and max_wait both name --max-wait"},
		{"set: [norank]\n", ErrBadValue, `set: bad value: "norank"`},
		{"templates: [[a]]\n", ErrBadValue, "templates: bad value: a list or block"},
		{"model: [a, b]\n", ErrBadValue, "model: bad value: a list, but --model takes one value"},
		{"methods: [a, \"b, c\"]\n", ErrBadValue, `methods: bad value: list element "b, c" holds a comma, which --methods splits on`},
	} {
		err := apply(t, newTestFlags(), tc.file)
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: error %v, want %v containing %q", tc.file, err, tc.err, tc.msg)
		}
	}
	if _, err := Parse([]byte("limit: 1\nlimit: 2\n")); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("a key given twice: error %v, want one naming the key", err)
	}
	if _, err := Parse([]byte("- a\n- b\n")); !errors.Is(err, ErrNotMapping) {
		t.Errorf("a list: error %v, want %v", err, ErrNotMapping)
	}
}

// TestParseOneDocument: a file of more than one YAML document is refused
// (only the first would be read: limit: 5 was silently left out); one
// document, with or without its markers, is read.
func TestParseOneDocument(t *testing.T) {
	for _, tc := range []struct {
		file string
		keys int // read, when not refused
		err  error
		msg  string
	}{
		{"methods: source\n---\nlimit: 5\n", 0, ErrDocuments, "the second (after ---) would not be read"},
		{"methods: source\n---\n", 0, ErrDocuments, "the second (after ---) would not be read"},
		{"methods: source\n--- # the rest\n# limit: 5\n", 0, ErrDocuments, "the second"},
		{"methods: source\n...\nlimit: 5\n", 0, ErrDocuments, "after the first"},
		{"---\nmethods: source\nlimit: 5\n", 2, nil, ""},
		{"methods: source\nlimit: 5\n...\n", 2, nil, ""},
		{"%YAML 1.1\n---\nmethods: source\n", 1, nil, ""},
		{`{"methods": "source", "limit": 5}`, 2, nil, ""},
		{"methods: |\n  a\n  ---\n  b\n", 1, nil, ""}, // a marker indented is text
		{"# nothing\n", 0, nil, ""},
	} {
		v, err := Parse([]byte(tc.file))
		if tc.err != nil {
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%q: error %v, want %v containing %q", tc.file, err, tc.err, tc.msg)
			}
			continue
		}
		if err != nil || len(v) != tc.keys {
			t.Errorf("%q: %v, %v; want %d keys", tc.file, v, err, tc.keys)
		}
	}
}

// Write writes every flag; Apply reads it back into the same values,
// whatever the strings hold.
func TestWriteRoundTrip(t *testing.T) {
	f := newTestFlags()
	args := []string{"--model", "yes", "--limit", "0", "--seed", "18446744073709551615", "--lr", "0.1",
		"--max-wait", "90s", "--plot", "--set", "subtta-m.rank=8", "--set", "tent.lr=1e-4",
		"--templates", "a: {}, # not a comment", "--templates", "5"}
	if err := f.fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, GoFlags(f.fs), "test: every flag", opt); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"# test: every flag\n", "# prompt templates,\n# repeated\ntemplates:\n", "set:\n  subtta-m:\n    rank: \"8\"\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("Write lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "config") {
		t.Errorf("Write lists a skipped flag:\n%s", out)
	}
	g := newTestFlags()
	if err := apply(t, g, out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var again bytes.Buffer
	Write(&again, GoFlags(g.fs), "test: every flag", opt)
	if again.String() != out {
		t.Errorf("read back and written again:\n%s\nwant\n%s", again.String(), out)
	}
	g.fs.VisitAll(func(fl *flag.Flag) {
		if want := f.fs.Lookup(fl.Name).Value.String(); fl.Value.String() != want {
			t.Errorf("--%s = %q, want %q", fl.Name, fl.Value.String(), want)
		}
	})
}

// Entries whose keys do not nest are written as a list.
func TestWriteEntriesAsList(t *testing.T) {
	f := newTestFlags()
	f.fs.Parse([]string{"--set", "a.b=1", "--set", "a=2"})
	var b bytes.Buffer
	Write(&b, GoFlags(f.fs), "", opt)
	if !strings.Contains(b.String(), "set:\n- a.b=1\n- a=2\n") {
		t.Errorf("got\n%s", b.String())
	}
	g := newTestFlags()
	if err := apply(t, g, b.String()); err != nil || !slices.Equal(g.set, f.set) {
		t.Errorf("read back: %q, %v; want %q", g.set, err, f.set)
	}
}

// newPFlags is a pflag set (cobra's) with a flag of every kind.
func newPFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("ptest", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("model", "", "checkpoint")
	fs.Int("limit", 0, "images per domain")
	fs.Uint64("seed", 1, "shuffle seed")
	fs.Float64("lr", 1e-3, "learning rate")
	fs.Duration("max-wait", 2*time.Second, "longest wait")
	fs.Bool("plot", false, "write plots")
	fs.CountP("verbose", "v", "more output")
	fs.StringArray("templates", nil, "prompt templates")
	fs.StringSlice("methods", []string{"source"}, "methods")
	fs.Var(new(KeyValues), "set", "METHOD.KEY=VALUE")
	return fs
}

// A pflag set reads a file as the same command line sets it, and Write
// round-trips.
func TestPFlags(t *testing.T) {
	args := newPFlags()
	err := args.Parse([]string{"--model", "m", "--limit", "5", "--seed", "9", "--lr", "0.5", "--max-wait", "1m",
		"--plot", "-vv", "--templates", "a {}, b", "--templates", "c {}", "--methods", "tent,sar", "--set", "tent.lr=1"})
	if err != nil {
		t.Fatal(err)
	}
	values, err := Parse([]byte(`
model: m
limit: 5
seed: 9
lr: 0.5
max_wait: 1m
plot: true
verbose: 2
templates: ["a {}, b", "c {}"]
methods: [tent, sar]
set: {tent: {lr: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	file := newPFlags()
	if err := Apply(PFlags(file), values, Options{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Write(&out, PFlags(file), "", Options{}); err != nil {
		t.Fatal(err)
	}
	again := newPFlags()
	values, err = Parse(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(PFlags(again), values, Options{}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	args.VisitAll(func(f *pflag.Flag) {
		for _, fs := range []*pflag.FlagSet{file, again} {
			g := fs.Lookup(f.Name)
			if g.Value.String() != f.Value.String() || g.Changed != f.Changed {
				t.Errorf("--%s = %q (changed %v), want %q (changed %v)\n%s", f.Name, g.Value.String(), g.Changed, f.Value.String(), f.Changed, out.String())
			}
		}
	})
	if !strings.Contains(out.String(), "verbose: 2\n") || !strings.Contains(out.String(), "seed: 9\n") {
		t.Errorf("not typed:\n%s", out.String())
	}
}
