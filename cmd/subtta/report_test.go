package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/report"
)

// seedArgs is a small run of the built-in model on the built-in images:
// two methods, two corruptions, 50 images of each.
func seedArgs(out string, extra ...string) []string {
	return append([]string{"eval", "--methods", "source,tent", "--corruptions", "gaussian_noise,contrast",
		"--limit", "50", "--batch-size", "10", "--out", out, "--quiet"}, extra...)
}

// handSpread is the mean and sample standard deviation of xs, written
// out.
func handSpread(xs []float64) (mean, std float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs)-1))
}

// TestEvalSeedsReport runs three seeds with eval --seeds and checks the
// report's every cell, mean and difference to source against a hand
// computation from the seeds' results.jsonl; then that the run resumes,
// that subtta report prints the same table, and that folders of another
// limit or model are refused, naming the field.
func TestEvalSeedsReport(t *testing.T) {
	t.Setenv("SUBTTA_CACHE", t.TempDir())
	t.Setenv("SUBTTA_FROST", "")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if st := run(seedArgs(out, "--seeds", "1,2,3", "--plot"), &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	table := stdout.String()

	// By hand: accuracies per method and domain, one per seed.
	acc := map[string][]float64{}
	means := map[string][]float64{}
	for _, s := range []int{1, 2, 3} {
		recs, err := report.ReadRecordsFile(filepath.Join(out, fmt.Sprintf("seed-%d", s), eval.ResultsFile))
		if err != nil || len(recs) != 4 {
			t.Fatalf("seed %d: %d records, %v", s, len(recs), err)
		}
		sum := map[string]float64{}
		for _, r := range recs {
			acc[r.Method+" "+r.Corruption] = append(acc[r.Method+" "+r.Corruption], float64(r.Correct)*100/float64(r.Samples))
			sum[r.Method] += r.Accuracy / 2
		}
		for m, v := range sum {
			means[m] = append(means[m], v)
		}
	}
	cell := func(xs []float64) string {
		m, s := handSpread(xs)
		return fmt.Sprintf("%.2f ± %.2f", m, s)
	}
	diffs := make([]float64, 3)
	for i := range diffs {
		diffs[i] = means["tent"][i] - means["source"][i]
	}
	for _, m := range []string{"source", "tent"} {
		want := fmt.Sprintf("| %-6s |     3 |  %12s |    %12s | %12s |", m,
			cell(acc[m+" gaussian_noise"]), cell(acc[m+" contrast"]), cell(means[m]))
		if !strings.Contains(table, want) {
			t.Errorf("no row %q in\n%s", want, table)
		}
	}
	dm, ds := handSpread(diffs)
	if want := fmt.Sprintf("%+.2f ± %.2f |\n", dm, ds); !strings.Contains(table, want) {
		t.Errorf("tent's difference to source %q not in\n%s", want, table)
	}
	if _, s := handSpread(acc["source gaussian_noise"]); s == 0 {
		t.Errorf("the seeds gave the same accuracies %v: the shuffle seed was not used", acc["source gaussian_noise"])
	}

	// The JSON holds the same numbers, unrounded (1e-9: float64 sums of
	// three numbers below 100).
	b, err := os.ReadFile(filepath.Join(out, eval.SeedJSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var c report.Comparison
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	src := c.Tables[0].Rows[0]
	m, s := handSpread(acc["source gaussian_noise"])
	if src.Method != "source" || math.Abs(src.Cells[0].Mean-m) > 1e-9 || math.Abs(src.Cells[0].Std-s) > 1e-9 || src.Cells[0].Seeds != 3 {
		t.Errorf("report.json's source on gaussian_noise: %+v; want mean %v, std %v", src.Cells[0], m, s)
	}
	for _, f := range []string{eval.SeedMarkdownFile, eval.SeedCSVFile, eval.SeedPlotFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}

	// Resumed: nothing computed again, the same table.
	stdout.Reset()
	stderr.Reset()
	if st := run(seedArgs(out, "--seeds", "1,2,3"), &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if strings.Count(stderr.String(), "0 domains computed, 4 taken from earlier runs") != 3 || stdout.String() != table {
		t.Errorf("resumed: %s\n%s", stderr.String(), stdout.String())
	}

	// subtta report on the folders.
	dirs := []string{filepath.Join(out, "seed-1"), filepath.Join(out, "seed-2"), filepath.Join(out, "seed-3")}
	stdout.Reset()
	if st := run(append([]string{"report", "--out", t.TempDir()}, dirs...), &stdout, &stderr); st != 0 || stdout.String() != table {
		t.Errorf("report: status %d, %s\n%s", st, stderr.String(), stdout.String())
	}

	// --out a plain file is named by its flag; the folder eval --seeds
	// wrote is refused with the advice to pass its seed folders.
	afile := filepath.Join(t.TempDir(), "afile")
	os.WriteFile(afile, nil, 0o644)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{append([]string{"report", "--out", afile}, dirs...), "subtta report: --out: mkdir " + afile + ": not a directory\n"},
		{[]string{"report", "--out", t.TempDir(), out}, "subtta report: " + out + " is not a results folder (no run.json) but holds the seed folders of eval --seeds: pass those (" +
			filepath.Join(out, "seed-*") + ")\n"},
	} {
		stderr.Reset()
		if st := run(tc.args, &stdout, &stderr); st != 1 || stderr.String() != tc.msg {
			t.Errorf("%q: status %d, %q; want 1 and %q", tc.args, st, stderr.String(), tc.msg)
		}
	}

	// Another limit, another model: refused by name.
	other := filepath.Join(t.TempDir(), "limit40")
	if st := run(seedArgs(other, "--seed", "4", "--limit", "40"), &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	tiny := filepath.Join(t.TempDir(), "tiny")
	if st := run(seedArgs(tiny, "--seed", "5", "--model", fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"),
		"--model-config", fixture.ModelConfig(t, "fixtures/clip-tiny.openai.safetensors"),
		"--vocab", fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")), &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	for _, tc := range []struct {
		dirs  []string
		field string
	}{
		{[]string{dirs[0], other}, "limit differs (50 in "},
		{[]string{dirs[0], dirs[1], tiny}, "model differs (\"built-in, sha256 "},
		{[]string{dirs[0], dirs[0]}, "both hold seed 1"},
	} {
		stderr.Reset()
		st := run(append([]string{"report", "--out", t.TempDir()}, tc.dirs...), &stdout, &stderr)
		if st != 1 || !strings.HasPrefix(stderr.String(), "subtta report: "+tc.dirs[0]+" and ") ||
			!strings.Contains(stderr.String(), "not seeds of one run") || !strings.Contains(stderr.String(), tc.field) ||
			strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("report %q: status %d, %q; want 1 and one line naming %q", tc.dirs, st, stderr.String(), tc.field)
		}
	}
}

// TestReportBadInput: no folder, a folder that holds no run: one line and
// a non-zero exit.
func TestReportBadInput(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"report"}, 2, "want at least one results folder"},
		{[]string{"report", "--out", t.TempDir(), empty}, 1, "is not a results folder (no run.json)"},
		{[]string{"report", "--plots"}, 2, "unknown flag: --plots"},
	} {
		var stdout, stderr bytes.Buffer
		st := run(tc.args, &stdout, &stderr)
		if st != tc.status || !strings.Contains(stderr.String(), tc.stderr) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("run(%q) = %d, %q; want %d and one line with %q", tc.args, st, stderr.String(), tc.status, tc.stderr)
		}
	}
}

// TestReportRefusesWhatSeedsCannotShow runs tiny built-in runs and checks
// that report refuses seeds of --no-shuffle runs whose methods draw no
// random views as eval --seeds does, refuses seeds made with other methods
// as such (not as an unfinished run), and removes, saying so, the plot an
// earlier report left in --out.
func TestReportRefusesWhatSeedsCannotShow(t *testing.T) {
	t.Setenv("SUBTTA_CACHE", t.TempDir())
	t.Setenv("SUBTTA_FROST", "")
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	tiny := func(name string, extra ...string) string {
		out := filepath.Join(dir, name)
		args := append([]string{"eval", "--methods", "source", "--corruptions", "fog", "--limit", "20", "--quiet", "--out", out}, extra...)
		if st := run(args, &stdout, &stderr); st != 0 {
			t.Fatalf("%q: status %d: %s", args, st, stderr.String())
		}
		return out
	}
	ns1, ns2 := tiny("ns1", "--no-shuffle", "--seed", "1"), tiny("ns2", "--no-shuffle", "--seed", "2")
	r1, r2 := tiny("r1", "--seed", "1"), tiny("r2", "--seed", "2")
	q2 := tiny("q2", "--seed", "2", "--methods", "source,tent")

	// As eval --seeds refuses --no-shuffle of source alone.
	stderr.Reset()
	if st := run([]string{"eval", "--methods", "source", "--corruptions", "fog", "--limit", "20", "--no-shuffle", "--seeds", "1,2", "--out", filepath.Join(dir, "nss")}, &stdout, &stderr); st != 2 ||
		!strings.Contains(stderr.String(), "every seed's results would be the same") {
		t.Errorf("eval --no-shuffle --seeds: status %d, %q", st, stderr.String())
	}
	for _, tc := range []struct {
		dirs []string
		says string
	}{
		{[]string{ns1, ns2}, "every seed's results are the same: the runs were made with --no-shuffle, so every seed streamed the same order, and no method draws random views (source)"},
		{[]string{r1, q2}, "are not seeds of one run: they were run with other methods (source in " + r1 + "; source, tent in " + q2 + "), and seeds are compared on the same ones"},
	} {
		stderr.Reset()
		stdout.Reset()
		st := run(append([]string{"report", "--out", filepath.Join(dir, "refused")}, tc.dirs...), &stdout, &stderr)
		if st != 1 || !strings.Contains(stderr.String(), tc.says) || strings.Contains(stderr.String(), "finish its run") ||
			strings.Count(stderr.String(), "\n") != 1 || stdout.Len() != 0 {
			t.Errorf("report %q: status %d, %q; want 1 and one line with %q", tc.dirs, st, stderr.String(), tc.says)
		}
	}

	rs := filepath.Join(dir, "rs")
	stderr.Reset()
	if st := run([]string{"report", "--out", rs, "--plot", r1, r2}, &stdout, &stderr); st != 0 || !strings.Contains(stderr.String(), "(4 files)") {
		t.Fatalf("report --plot: status %d, %q", st, stderr.String())
	}
	stderr.Reset()
	if st := run([]string{"report", "--out", rs, r1, r2}, &stdout, &stderr); st != 0 ||
		!strings.Contains(stderr.String(), "removed "+filepath.Join(rs, eval.SeedPlotFile)+": an earlier report's plot") ||
		!strings.Contains(stderr.String(), "(3 files)") {
		t.Errorf("report without --plot over one with: status %d, %q", st, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(rs, eval.SeedPlotFile)); err == nil {
		t.Errorf("the earlier report's %s is still in %s", eval.SeedPlotFile, rs)
	}
}

// TestEvalSeedsWarnsOnce: eval --seeds of a fixed order where only some
// methods draw random views says once that the others' results are the
// same for every seed (before the runs), not again beside the table; report
// over the same folders says it.
func TestEvalSeedsWarnsOnce(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "seeds")
	var stdout, stderr bytes.Buffer
	args := []string{"eval", "--methods", "source,zero", "--set", "zero.views=4", "--corruptions", "fog", "--severities", "5",
		"--limit", "8", "--batch-size", "4", "--no-shuffle", "--seeds", "1,2", "--out", out, "--quiet"}
	if st := run(args, &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if n := strings.Count(stderr.String(), "the same for every seed"); n != 1 {
		t.Errorf("eval --seeds warned %d times that results are the same for every seed, want once:\n%s", n, stderr.String())
	}
	stderr.Reset()
	if st := run([]string{"report", "--out", filepath.Join(dir, "r"), filepath.Join(out, "seed-1"), filepath.Join(out, "seed-2")}, &stdout, &stderr); st != 0 ||
		strings.Count(stderr.String(), "the same for every seed") != 1 {
		t.Errorf("report: status %d, stderr %q; want 0 and the warning once", st, stderr.String())
	}
}
