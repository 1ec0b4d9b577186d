package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/report"
)

func evalArgs(t *testing.T, out string, extra ...string) []string {
	return append([]string{"eval",
		"--model", fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"),
		"--model-config", fixture.ModelConfig(t, "fixtures/clip-tiny.openai.safetensors"),
		"--vocab", fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz"),
		"--dataset", "cifar10-c",
		"--data", fixture.Path(t, "assets/cifar10/test-jpg.tar.gz"),
		"--out", out, "--quiet",
	}, extra...)
}

func TestEvalCommand(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := evalArgs(t, out, "--methods", "source,subtta-m", "--corruptions", "gaussian_noise,contrast",
		"--limit", "8", "--batch-size", "4", "--plot")
	if st := run(args, &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	for _, want := range []string{"source", "subtta-m", "Mean"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, f := range []string{"results.md", "results.csv", "results.json", "results.jsonl", "plots/accuracy.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stderr.String(), "4 domains computed, 0 taken from earlier runs") {
		t.Errorf("stderr: %s", stderr.String())
	}

	// The same run from a config file, one more method given as a flag:
	// only the new method's domains are computed.
	cfg := map[string]any{"methods": []string{"source", "subtta-m"}, "corruptions": []string{"gaussian_noise", "contrast"},
		"limit": 8, "batch_size": 4} // seeds default to 1, as on the command line
	b, _ := json.Marshal(cfg)
	path := filepath.Join(t.TempDir(), "eval.json")
	os.WriteFile(path, b, 0o644)
	stdout.Reset()
	stderr.Reset()
	if st := run(evalArgs(t, out, "--config", path, "--methods", "source,subtta-m,tent"), &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if !strings.Contains(stderr.String(), "2 domains computed, 4 taken from earlier runs") || !strings.Contains(stdout.String(), "tent") {
		t.Errorf("resumed run: stderr %s\nstdout %s", stderr.String(), stdout.String())
	}
}

func TestEvalBadInput(t *testing.T) {
	dir := t.TempDir()
	badCfg := filepath.Join(dir, "bad.json")
	os.WriteFile(badCfg, []byte(`{"methodz": ["source"]}`), 0o644)
	resultsJSON := filepath.Join(dir, "results.json")
	os.WriteFile(resultsJSON, []byte(`{"config": {"methods": ["source"]}}`), 0o644)
	twoDocs := filepath.Join(dir, "two.yaml")
	os.WriteFile(twoDocs, []byte("methods: source\n---\nlimit: 5\n"), 0o644)
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"eval", "--data", dir}, 2, "--dataset is required with --data"},
		{[]string{"eval", "--dataset", "imagenet-c"}, 2, "--data is required for imagenet-c"},
		{evalArgs(t, dir, "--severities", "x"), 2, `"x" is not an integer`},
		// A value no run takes is bad usage, whichever check finds it.
		{evalArgs(t, dir, "--corruptions", "rain"), 2, `unknown corruption "rain"`},
		{evalArgs(t, dir, "--methods", "sourc"), 2, `unknown method "sourc"`},
		{evalArgs(t, dir, "--severities", "6"), 2, "severity 6 is not in 1…5"},
		{evalArgs(t, dir, "--methods", "tent", "--set", "tent.lr=-1"), 2, "tent.lr=-1: out of range"},
		{evalArgs(t, dir, "--methods", "source", "--set", "tent.lr=1"), 2, `method options for "tent": no method of this run is tent`},
		{evalArgs(t, dir, "--protocol", "episodic", "--batch-size", "4"), 2, "the episodic protocol adapts to one sample at a time: batch size 4"},
		{[]string{"eval", "--options", "sourc"}, 2, `unknown method "sourc"`},
		{evalArgs(t, dir, "--views", "1"), 2, "--views 1: want at least 2 views per image (the base view and a random one), or 0 for the paper's"},
		{evalArgs(t, dir, "--views", "-2"), 2, "--views -2: want at least 2 views per image"},
		// One option given twice, as one method given twice.
		{evalArgs(t, dir, "--methods", "tent", "--set", "tent.batch_size=40", "--set", "tent.batch_size=10", "--corruptions", "fog", "--limit", "4"), 2,
			`--set "tent.batch_size=10": option "tent.batch_size" given twice (first as "tent.batch_size=40")`},
		{evalArgs(t, dir, "--config", twoDocs, "--corruptions", "fog", "--limit", "4"), 2, "config " + twoDocs + ": more than one YAML document: the second (after ---) would not be read"},
		{evalArgs(t, dir, "--data", filepath.Join(dir, "missing")), 1, "no such file or folder"},
		{evalArgs(t, dir, "--config", badCfg), 2, "unknown key methodz; did you mean methods?"},
		{evalArgs(t, dir, "stray"), 2, `unexpected argument "stray" (all inputs are flags)`},
		{[]string{"eval", "merg", "a", "b"}, 2, `unexpected argument "merg": did you mean subtta eval merge?`},
		{evalArgs(t, dir, "--limit", "-5"), 2, "--limit -5: must not be negative"},
		{evalArgs(t, dir, "--diag-workers", "-2"), 2, "--diag-workers -2: want -1 (none)"},
		// Duplicates and empty entries in lists are usage errors alike.
		{evalArgs(t, dir, "--severities", "5,5"), 2, `--severities "5,5": severity "5" given twice`},
		{evalArgs(t, dir, "--methods", "source,source"), 2, `--methods "source,source": method "source" given twice`},
		{evalArgs(t, dir, "--corruptions", "fog,fog"), 2, `--corruptions "fog,fog": corruption "fog" given twice`},
		{evalArgs(t, dir, "--corruptions", "all,fog"), 2, `corruption "fog" given twice (all stands for the 15)`},
		{evalArgs(t, dir, "--seeds", "1,1"), 2, `--seeds "1,1": seed 1 given twice`},
		{evalArgs(t, dir, "--class-names", "cat,dog,cat"), 2, `--class-names "cat,dog,cat": class "cat" given twice`},
		{evalArgs(t, dir, "--methods", "source,,tent"), 2, `--methods "source,,tent": entry 2 is empty`},
		{evalArgs(t, dir, "--corruptions", "fog,"), 2, `--corruptions "fog,": entry 2 is empty`},
		{evalArgs(t, dir, "--seeds", "1,,2"), 2, `--seeds "1,,2": entry 2 is empty`},
		// An explicitly empty value where empty means nothing.
		{evalArgs(t, dir, "--options", ""), 2, `--options "": give a method`},
		{evalArgs(t, dir, "--protocol", ""), 2, `--protocol "": want reset, continual, mixed, episodic, gradual`},
		{evalArgs(t, dir, "--protocol", "bogus"), 2, `--protocol "bogus": want reset, continual, mixed, episodic, gradual`},
		{evalArgs(t, dir, "--dataset", ""), 2, `--dataset "": give a dataset`},
		{evalArgs(t, dir, "--out", ""), 2, `--out "": give a results folder`},
		// Fewer than 2 classes, and flags the run would ignore.
		{evalArgs(t, dir, "--classes", "1"), 2, "--classes 1: want at least 2 classes"},
		{evalArgs(t, dir, "--class-names", "cat"), 2, `--class-names "cat": want at least 2 classes`},
		{evalArgs(t, dir, "--classes", "2", "--class-names", "cat,dog"), 2, "give one of them"},
		{evalArgs(t, dir, "--class-seed", "3"), 2, "--class-seed draws the classes of --classes N"},
		{evalArgs(t, dir, "--subset", badCfg), 2, "--subset lists ImageNet images (<wnid>/<file>): it applies to --dataset imagenet-c, not cifar10-c"},
		{evalArgs(t, dir, "--order", badCfg, "--no-shuffle"), 2, "--order gives every stream's order in place of the shuffle: leave out --no-shuffle"},
		{evalArgs(t, dir, "--seeds", "1,2", "--no-shuffle"), 2, "--seeds with --no-shuffle: the seeds would all stream the same order"},
		{evalArgs(t, dir, "--seeds", "1,2", "--order", badCfg, "--methods", "tent"), 2, "--seeds with --order: the seeds would all stream the same order, and no method draws random views (tent)"},
		{[]string{"eval", "--config", resultsJSON, "--print-config"}, 2, `whose "config" member eval --config reads as it is; --print-config prints only files of flags`},
		// Missing files are named by their flag.
		{evalArgs(t, dir, "--subset", filepath.Join(dir, "x")), 1, "--subset " + filepath.Join(dir, "x") + ": no such file or folder"},
		{evalArgs(t, dir, "--vocab", filepath.Join(dir, "x")), 1, "--vocab " + filepath.Join(dir, "x") + ": no such file or folder"},
		{evalArgs(t, dir, "--order", filepath.Join(dir, "x")), 1, "--order " + filepath.Join(dir, "x") + ": no such file or folder"},
	} {
		var stdout, stderr bytes.Buffer
		st := run(tc.args, &stdout, &stderr)
		if st != tc.status || !strings.Contains(stderr.String(), tc.stderr) || strings.Count(strings.TrimSpace(stderr.String()), "\n") > 2 ||
			strings.Contains(stderr.String(), "eval: eval:") {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tc.args[1:], st, stderr.String(), tc.status, tc.stderr)
		}
	}
}

// TestEvalViews: --views 0 is the default, each method's views from the
// paper, as the help and --print-config (# views: 0) say: given, it is
// taken as that (it was refused, "want at least 2 views per image").
func TestEvalViews(t *testing.T) {
	for _, tc := range []struct {
		value string
		views int
		err   string
	}{
		{"0", 0, ""},
		{"4", 4, ""},
		{"1", 0, "--views 1: want at least 2 views per image"},
		{"-1", 0, "--views -1: want at least 2 views per image"},
	} {
		fs := pflag.NewFlagSet("eval", pflag.ContinueOnError)
		f := newEvalFlags(fs)
		if err := fs.Parse([]string{"--methods", "tpt", "--views", tc.value}); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config()
		switch {
		case tc.err == "" && (err != nil || cfg.Views != tc.views):
			t.Errorf("--views %s: %v, views %d; want %d", tc.value, err, cfg.Views, tc.views)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("--views %s: %v; want %q", tc.value, err, tc.err)
		}
	}
}

// TestEvalInterruptedOnce: an interrupted run says "subtta eval:
// interrupted during ...", eval's prefix once (it said "subtta eval:
// eval: interrupted"), and what the folder keeps.
func TestEvalInterruptedOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := eval.Config{
		Model:       fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"),
		ModelConfig: fixture.ModelConfig(t, "fixtures/clip-tiny.openai.safetensors"),
		Vocab:       fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz"),
		Dataset:     "cifar10-c",
		Data:        fixture.Path(t, "assets/cifar10/test-jpg.tar.gz"),
		Methods:     []string{"source"},
		Corruptions: []string{"contrast"},
		Limit:       8,
		BatchSize:   4,
		Out:         t.TempDir(),
	}
	var stderr bytes.Buffer
	_, err := evalOnce(ctx, cfg, eval.Options{}, true, &stderr)
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("err = %v, want an interruption", err)
	}
	if want := "subtta eval: interrupted during source; no domain of source had finished"; !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "eval: eval:") {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
}

// TestEvalSeedsWithoutShuffle: --seeds with --no-shuffle or --order is
// refused where the seed changes nothing (TestEvalBadInput), allowed with
// a mixed protocol's --order (the seed still shuffles its pool), and
// allowed with a warning naming the methods it does not change where some
// draw random views with it.
func TestEvalSeedsWithoutShuffle(t *testing.T) {
	for _, tc := range []struct {
		cfg  eval.Config
		warn string
	}{
		{eval.Config{NoShuffle: true, Methods: []string{"source", "vte"}}, "draw only the random views of vte; the results of source are the same"},
		{eval.Config{NoShuffle: true, Methods: []string{"zero"}}, ""},
		{eval.Config{Order: "o.txt", Protocol: "mixed", Methods: []string{"tent"}}, ""},
		{eval.Config{Methods: []string{"tent"}}, ""},
	} {
		var stderr bytes.Buffer
		if err := seedMatters(tc.cfg, &stderr); err != nil || !strings.Contains(stderr.String(), tc.warn) || (tc.warn == "") != (stderr.Len() == 0) {
			t.Errorf("%+v: err %v, stderr %q; want %q", tc.cfg, err, stderr.String(), tc.warn)
		}
	}
	for _, c := range []eval.Config{{NoShuffle: true}, {Order: "o.txt", Protocol: "mixed", NoShuffle: true, Methods: []string{"tent"}}} {
		if err := seedMatters(c, io.Discard); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// TestEvalFrostUnused: --frost on a run without frost warns (a file of
// flags may give it every run) and runs.
func TestEvalFrostUnused(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := evalArgs(t, out, "--methods", "source", "--corruptions", "contrast", "--limit", "4", "--frost", t.TempDir())
	if st := run(args, &stdout, &stderr); st != 0 || !strings.Contains(stderr.String(), "is not used: this run computes no frost corruption") {
		t.Errorf("status %d, stderr %s", st, stderr.String())
	}
}

// TestEvalBuiltin runs eval as a new user does, with no model and no data:
// the built-in model on the embedded CIFAR-10 images, here on few images
// of two domains, the clean one among them.
func TestEvalBuiltin(t *testing.T) {
	t.Setenv("SUBTTA_CACHE", t.TempDir())
	t.Setenv("SUBTTA_FROST", "")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"eval", "--methods", "source,tent", "--corruptions", "clean,gaussian_noise", "--limit", "40", "--out", out, "--quiet"}
	if st := run(args, &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	for _, want := range []string{"source", "tent", "clean", "Gauss."} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	recs, err := report.ReadRecordsFile(filepath.Join(out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range recs {
		if r.Method == "source" && r.Domain == "clean" {
			found = true
			// Chance is 10%; the built-in model classifies most clean images.
			if r.Accuracy < 50 {
				t.Errorf("built-in model, clean images: accuracy %.1f%%", r.Accuracy)
			}
		}
	}
	if !found {
		t.Errorf("no record of source on the clean domain in %+v", recs)
	}
}

// TestClassifyBuiltin classifies an embedded image with the built-in model:
// CIFAR-10's ten classes, probabilities summing to one.
func TestClassifyBuiltin(t *testing.T) {
	subset, _, err := builtin.Extract(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ds, err := data.OpenFolder(subset, data.FolderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := ds.Item(0)
	ds.Close()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "img.png")
	f, _ := os.Create(path)
	rgba := image.NewNRGBA(image.Rect(0, 0, img.W, img.H))
	for i := range img.W * img.H {
		copy(rgba.Pix[4*i:4*i+3], img.Pix[3*i:3*i+3])
		rgba.Pix[4*i+3] = 255
	}
	if err := png.Encode(f, rgba); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var stdout, stderr bytes.Buffer
	if st := run([]string{"classify", "--json", path}, &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	var res []struct {
		Probs []struct {
			Label string
			Prob  float64
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || len(res) != 1 || len(res[0].Probs) != len(data.CIFAR10Classes) {
		t.Fatalf("classify output %q: %v", stdout.String(), err)
	}
	var sum float64
	for i, c := range data.CIFAR10Classes {
		if res[0].Probs[i].Label != c {
			t.Errorf("label %d is %q, want %q", i, res[0].Probs[i].Label, c)
		}
		sum += res[0].Probs[i].Prob
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Errorf("probabilities of CIFAR-10's classes sum to %g", sum)
	}
}

// TestEvalAllInList: "all" in a list of corruptions stands for the 15.
func TestEvalAllInList(t *testing.T) {
	t.Setenv("SUBTTA_CACHE", t.TempDir())
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"eval", "--methods", "source", "--corruptions", "clean,all", "--limit", "4", "--out", out, "--quiet"}
	if st := run(args, &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if !strings.Contains(stderr.String(), "16 domains computed") {
		t.Errorf("clean,all: %s", stderr.String())
	}
}

// TestEvalShards runs the two shards of a small built-in run, one from
// --shard and one from a Kubernetes Indexed Job's environment, merges them
// with eval merge, and checks the flags' refusals.
func TestEvalShards(t *testing.T) {
	t.Setenv("SUBTTA_CACHE", t.TempDir())
	t.Setenv("SUBTTA_FROST", "")
	dir := t.TempDir()
	base := []string{"eval", "--methods", "source,subtta-m", "--corruptions", "gaussian_noise,contrast", "--limit", "16", "--quiet"}
	var stdout, stderr bytes.Buffer
	if st := run(append(base, "--shard", "0/2", "--out", filepath.Join(dir, "s0")), &stdout, &stderr); st != 0 {
		t.Fatalf("shard 0/2: status %d: %s", st, stderr.String())
	}
	t.Setenv("JOB_COMPLETION_INDEX", "1")
	if st := run(append(base, "--shard-from-env", "--shard-count", "2", "--out", filepath.Join(dir, "s1")), &stdout, &stderr); st != 0 {
		t.Fatalf("shard from JOB_COMPLETION_INDEX: status %d: %s", st, stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	merged := filepath.Join(dir, "merged")
	if st := run([]string{"eval", "merge", "--plot", merged, filepath.Join(dir, "s0"), filepath.Join(dir, "s1")}, &stdout, &stderr); st != 0 {
		t.Fatalf("merge: status %d: %s", st, stderr.String())
	}
	if plots, _ := filepath.Glob(filepath.Join(merged, "plots", "*.png")); len(plots) == 0 {
		t.Errorf("merge --plot wrote no plots")
	}
	if !strings.Contains(stdout.String(), "subtta-m") || !strings.Contains(stderr.String(), "4 records of 2 shards merged") {
		t.Errorf("merge: stdout %s\nstderr %s", stdout.String(), stderr.String())
	}
	stderr.Reset()
	if st := run(append(base, "--out", merged), &stdout, &stderr); st != 0 || !strings.Contains(stderr.String(), "0 domains computed, 4 taken from earlier runs") {
		t.Errorf("eval on the merged folder: status %d: %s", st, stderr.String())
	}
	t.Setenv("JOB_COMPLETION_INDEX", "")
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--shard", "2/2"}, "bad shard 2/2: want I/N"},
		{[]string{"--shard", "1"}, "want I/N"},
		{[]string{"--shard", "0/2", "--shard-from-env"}, "--shard names the shard"},
		{[]string{"--shard-count", "2"}, "--shard-count goes with --shard-from-env"},
		{[]string{"--shard-from-env"}, "neither $SLURM_ARRAY_TASK_ID nor $JOB_COMPLETION_INDEX"},
	} {
		stderr.Reset()
		args := append(append(slices.Clone(base), "--out", filepath.Join(dir, "bad")), tc.args...)
		if st := run(args, &stdout, &stderr); st != 2 || !strings.Contains(stderr.String(), tc.stderr) || strings.Contains(stderr.String(), "eval: eval:") {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", tc.args, st, stderr.String(), tc.stderr)
		}
	}
	stderr.Reset()
	if st := run([]string{"eval", "merge", filepath.Join(dir, "m2"), filepath.Join(dir, "s0")}, &stdout, &stderr); st != 1 ||
		!strings.HasPrefix(stderr.String(), "subtta eval merge: units of the run are missing: ") || strings.Contains(stderr.String(), "eval:") {
		t.Errorf("merge of one shard of two: status %d, stderr %q", st, stderr.String())
	}
	// A merge stopped by a folder where results.md goes says so without
	// "eval: merge:", and runs again once it is gone.
	m3 := filepath.Join(dir, "m3")
	os.MkdirAll(filepath.Join(m3, "results.md"), 0o755)
	stderr.Reset()
	shards := []string{filepath.Join(dir, "s0"), filepath.Join(dir, "s1")}
	if st := run(append([]string{"eval", "merge", m3}, shards...), &stdout, &stderr); st != 1 ||
		stderr.String() != "subtta eval merge: "+filepath.Join(m3, "results.md")+" is a folder, where the merge writes a file: remove it, or merge into a new folder\n" {
		t.Errorf("merge into a folder holding a folder results.md: status %d, stderr %q", st, stderr.String())
	}
	os.Remove(filepath.Join(m3, "results.md"))
	stderr.Reset()
	if st := run(append([]string{"eval", "merge", m3}, shards...), &stdout, &stderr); st != 0 {
		t.Errorf("merge again: status %d, stderr %q", st, stderr.String())
	}
	// eval without --shard on a shard's folder: refused as bad usage,
	// the folder left a shard's.
	stderr.Reset()
	if st := run(append(slices.Clone(base), "--out", filepath.Join(dir, "s0")), &stdout, &stderr); st != 2 ||
		!strings.Contains(stderr.String(), "subtta eval: "+filepath.Join(dir, "s0")+" holds shard 0/2 of a run") ||
		!strings.Contains(stderr.String(), "give --shard 0/2") {
		t.Errorf("eval without --shard on shard 0/2's folder: status %d, stderr %q", st, stderr.String())
	}
	stderr.Reset()
	if st := run([]string{"eval", "merge", filepath.Join(dir, "m4"), filepath.Join(dir, "s0"), filepath.Join(dir, "s1")}, &stdout, &stderr); st != 0 {
		t.Errorf("merge after the refused run: status %d, stderr %q", st, stderr.String())
	}
}
