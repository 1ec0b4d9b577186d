package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/report"
)

// splitConfigs are configurations of several kinds for the split's tests:
// carried-state methods (SubTTA, RoTTA) next to independent ones, every
// protocol, several severities and the clean domain.
func splitConfigs() map[string]Config {
	all := []string{"source", "tent", "batclip", "mint", "subtta-s", "subtta-m", "watt-s", "watt-lite", "tda", "ecalp",
		"vte", "zero", "dmn", "tpt", "memo", "rotta", "sts"}
	return map[string]Config{
		"reset":      {Dataset: "cifar10-c", Methods: all},
		"imagenet":   {Dataset: "imagenet-c", Methods: []string{"source", "tent", "subtta-m", "vte", "watt-s"}, Corruptions: []string{"clean", "all"}, Severities: []int{1, 3, 5}},
		"continual":  {Dataset: "cifar10-c", Methods: []string{"source", "tent", "subtta-m"}, Protocol: "continual"},
		"mixed":      {Dataset: "cifar100-c", Methods: []string{"source", "mint", "subtta-b"}, Protocol: "mixed"},
		"episodic":   {Dataset: "cifar10-c", Methods: []string{"source", "tent", "subtta-s", "tda"}, Protocol: "episodic"},
		"one method": {Dataset: "cifar10-c", Methods: []string{"subtta-m"}},
	}
}

func TestSplitShards(t *testing.T) {
	for name, cfg := range splitConfigs() {
		if slices.Contains(cfg.Corruptions, "all") {
			cfg.Corruptions = append([]string{"clean"}, namesOfCorruptions()...)
		}
		full, err := cfg.planDefaults()
		if err != nil {
			t.Fatal(err)
		}
		units := runUnits(full)
		for _, n := range []int{1, 2, 3, 4, 7, 64} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				parts, err := SplitShards(cfg, n)
				if err != nil {
					t.Fatal(err)
				}
				if len(parts) != n {
					t.Fatalf("%d parts, want %d", len(parts), n)
				}
				// Every unit in exactly one shard, each shard's in run order.
				owner := map[Unit]int{}
				for i, p := range parts {
					for _, u := range p.Units {
						if j, ok := owner[u]; ok {
							t.Fatalf("%s in shards %d and %d", u, j, i)
						}
						owner[u] = i
					}
					if !slices.IsSortedFunc(p.Units, func(a, b Unit) int { return slices.Index(units, a) - slices.Index(units, b) }) {
						t.Errorf("shard %d: units not in run order: %v", i, p.Units)
					}
				}
				if len(owner) != len(units) {
					t.Fatalf("%d units split, the run has %d", len(owner), len(units))
				}
				// Carried-state methods whole.
				var maxChain float64
				for _, m := range full.Methods {
					p, _ := full.preset(m)
					per := p.Cost()
					if !full.carries(p) {
						maxChain = max(maxChain, per)
						continue
					}
					maxChain = max(maxChain, per*float64(len(planDomains(full))))
					shards := map[int]bool{}
					for _, u := range units {
						if u.Method == m {
							shards[owner[u]] = true
						}
					}
					if len(shards) != 1 {
						t.Errorf("%s carries state from domain to domain but is split over shards %v", m, shards)
					}
				}
				// Balanced: the most and the least loaded shard differ by
				// at most one chain (the greedy split's bound).
				lo, hi := parts[0].Cost, parts[0].Cost
				for _, p := range parts {
					lo, hi = min(lo, p.Cost), max(hi, p.Cost)
				}
				if hi-lo > maxChain+1e-9 {
					t.Errorf("shard costs from %.2f to %.2f, more apart than the costliest chain (%.2f)", lo, hi, maxChain)
				}
				// Stable: the same for the same configuration, whatever the
				// model, data and results folder.
				other := cfg
				other.Model, other.Data, other.Out, other.Workers = "elsewhere.safetensors", "/data", "out-7", 3
				again, err := SplitShards(other, n)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(again, parts) {
					t.Errorf("the split changed with the model, data or folder")
				}
			})
		}
	}
}

func namesOfCorruptions() []string {
	cfg, _ := Config{Dataset: "cifar10-c"}.planDefaults()
	return cfg.Corruptions
}

// TestSplitBalancesCost checks that the split weighs units by their
// method's cost: a multi-view method's 15 domains spread over shards of
// their own while the cheap methods share one.
func TestSplitBalancesCost(t *testing.T) {
	cfg := Config{Dataset: "imagenet-c", Methods: []string{"source", "tent", "vte"}}
	parts, err := SplitShards(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	var costs []float64
	for _, p := range parts {
		costs = append(costs, p.Cost)
	}
	// VTE's 64 views cost 64 passes per image, source 1 and TENT 2.03: 15
	// domains each, 1,020.45 in all; the best split of whole units puts 4
	// VTE domains (256) in three shards and the rest in the fourth.
	total := 0.0
	for _, c := range costs {
		total += c
	}
	if want := 15 * (64 + 1 + 2.03); total < want-1e-9 || total > want+1e-9 {
		t.Fatalf("total cost %.2f, want %.2f", total, want)
	}
	if hi := slices.Max(costs); hi > total/4+64 {
		t.Errorf("shard costs %v: the most loaded is more than one VTE domain over the mean %.2f", costs, total/4)
	}
}

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		ok   bool
	}{
		{"0/1", Shard{0, 1}, true}, {"3/4", Shard{3, 4}, true}, {" 2 / 5 ", Shard{2, 5}, true},
		{"4/4", Shard{}, false}, {"-1/4", Shard{}, false}, {"0/0", Shard{}, false}, {"1", Shard{}, false},
		{"a/b", Shard{}, false}, {"", Shard{}, false},
	} {
		got, err := ParseShard(tc.in)
		if tc.ok != (err == nil) || tc.ok && got != tc.want {
			t.Errorf("ParseShard(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadShard) {
			t.Errorf("ParseShard(%q): %v does not wrap ErrBadShard", tc.in, err)
		}
	}
}

func TestShardFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		count int
		want  Shard
		err   string
	}{
		{"slurm count", map[string]string{"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, 0, Shard{2, 4}, ""},
		{"slurm min max", map[string]string{"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4"}, 0, Shard{2, 4}, ""},
		{"slurm all three", map[string]string{"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_COUNT": "4"}, 4, Shard{0, 4}, ""},
		{"slurm step", map[string]string{"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "6", "SLURM_ARRAY_TASK_COUNT": "4"}, 0, Shard{}, "not one per index"},
		{"slurm old step", map[string]string{"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "4", "SLURM_ARRAY_TASK_STEP": "2"}, 0, Shard{}, "steps by 2 ($SLURM_ARRAY_TASK_STEP is 2; $SLURM_ARRAY_TASK_MIN \"0\", $SLURM_ARRAY_TASK_MAX \"4\")"},
		{"slurm step with count", map[string]string{"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "4", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_STEP": "2"}, 0, Shard{}, "steps by 2"},
		{"slurm step 1", map[string]string{"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4", "SLURM_ARRAY_TASK_STEP": "1"}, 0, Shard{2, 4}, ""},
		{"slurm step not a number", map[string]string{"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_STEP": "x"}, 0, Shard{}, `$SLURM_ARRAY_TASK_STEP is "x"`},
		{"slurm count disagrees", map[string]string{"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, 3, Shard{}, "count given is 3"},
		{"slurm no size", map[string]string{"SLURM_ARRAY_TASK_ID": "1"}, 0, Shard{}, "SLURM_ARRAY_TASK_COUNT"},
		{"slurm not a number", map[string]string{"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "4"}, 0, Shard{}, `"x", not an integer`},
		{"kubernetes", map[string]string{"JOB_COMPLETION_INDEX": "5"}, 8, Shard{5, 8}, ""},
		{"kubernetes no count", map[string]string{"JOB_COMPLETION_INDEX": "5"}, 0, Shard{}, "shard count"},
		{"kubernetes out of range", map[string]string{"JOB_COMPLETION_INDEX": "8"}, 8, Shard{}, "8/8"},
		{"nothing", nil, 4, Shard{}, "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShardFromEnv(func(k string) string { return tc.env[k] }, tc.count)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrBadShard) {
				t.Fatalf("err = %v, want ErrBadShard mentioning %q", err, tc.err)
			}
		})
	}
}

// builtinRun is a small run on the built-in model and images, with its
// options: carried-state methods (SubTTA-M, RoTTA updating every few
// images) next to reset baselines.
func builtinRun(t *testing.T, out string) (Config, Options) {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "subtta-eval-test-builtin")
	subset, frost, err := builtin.Extract(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Model: builtin.ModelName, Dataset: "cifar10-c", Data: subset, FrostDir: frost,
		Methods:     []string{"source", "tent", "subtta-m", "tda", "rotta"},
		Corruptions: []string{"gaussian_noise", "frost", "contrast"},
		Limit:       24, BatchSize: 8, Seed: 1, CorruptSeed: 1, Out: out,
	}
	opt := Options{Model: m, ModelID: "built-in " + builtin.ModelSHA256(), Tokenizer: builtin.Tokenizer()}
	return cfg, opt
}

// perProcess are the fields of a record that measure the process that
// computed it rather than the result: its wall time, its rate, its time
// per batch phase and when it finished. Everything else must be the same
// bits in a sharded run.
var perProcess = []string{"Seconds", "ImagesPerSecond", "BatchSeconds", "Finished"}

// withoutTimings is a results.md without the per-process columns of its
// diagnostics table (t_Sub, t_TTA and the batch time, the table's last
// three), which measure the process, not the result.
func withoutTimings(md string) string {
	lines := strings.Split(md, "\n")
	diag := false
	for i, l := range lines {
		if strings.HasPrefix(l, "#") {
			diag = strings.Contains(l, "Diagnostics")
		}
		if diag && strings.HasPrefix(l, "|") {
			cells := strings.Split(l, "|")
			if len(cells) > 5 {
				lines[i] = strings.Join(cells[:len(cells)-4], "|")
			}
		}
	}
	return strings.Join(lines, "\n")
}

func withoutPerProcess(r report.Record) report.Record {
	v := reflect.ValueOf(&r).Elem()
	for _, f := range perProcess {
		fv := v.FieldByName(f)
		fv.Set(reflect.Zero(fv.Type()))
	}
	return r
}

// runShards runs the shards of cfg into dir/shard-I and returns the
// folders.
func runShards(t *testing.T, cfg Config, opt Options, dir string, n int) []string {
	t.Helper()
	var folders []string
	for i := range n {
		c := cfg
		c.Shard = &Shard{i, n}
		c.Out = filepath.Join(dir, fmt.Sprintf("shard-%d", i))
		if _, err := Run(context.Background(), c, opt); err != nil {
			t.Fatal(err)
		}
		folders = append(folders, c.Out)
	}
	return folders
}

// singleAndMerged runs cfg in one process (into cfg.Out) and in three
// shards under dir, merges the shards into merged, and returns the
// records of both and the merge's summary.
func singleAndMerged(t *testing.T, cfg Config, opt Options, dir, merged string) (single, fromShards []report.Record, sum *Summary) {
	t.Helper()
	if _, err := Run(context.Background(), cfg, opt); err != nil {
		t.Fatal(err)
	}
	folders := runShards(t, cfg, opt, dir, 3)
	sum, err := Merge(merged, folders, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if single, err = report.ReadRecordsFile(filepath.Join(cfg.Out, ResultsFile)); err != nil {
		t.Fatal(err)
	}
	if fromShards, err = report.ReadRecordsFile(filepath.Join(merged, ResultsFile)); err != nil {
		t.Fatal(err)
	}
	return single, fromShards, sum
}

// TestShardedRunEqualsSingle runs a configuration in one process and in
// three shards, merges the shards, and checks that the merged
// results.jsonl holds the single run's records in its order, the same bits
// but for the per-process fields, that the Markdown table is the same
// file, and that a run on the merged folder finds everything done.
func TestShardedRunEqualsSingle(t *testing.T) {
	dir := t.TempDir()
	cfg, opt := builtinRun(t, filepath.Join(dir, "single"))
	merged := filepath.Join(dir, "merged")
	want, got, sum := singleAndMerged(t, cfg, opt, dir, merged)
	if len(got) != len(want) || len(sum.Records) != len(want) {
		t.Fatalf("merged %d records (summary %d), the single run %d", len(got), len(sum.Records), len(want))
	}
	for i := range want {
		if g, w := withoutPerProcess(got[i]), withoutPerProcess(want[i]); !reflect.DeepEqual(g, w) {
			t.Errorf("record %d: merged %+v\nsingle %+v", i, g, w)
		}
	}
	a, _ := os.ReadFile(filepath.Join(cfg.Out, MarkdownFile))
	b, _ := os.ReadFile(filepath.Join(merged, MarkdownFile))
	if len(a) == 0 || withoutTimings(string(a)) != withoutTimings(string(b)) {
		t.Errorf("results.md differs:\n%s\nsingle:\n%s", b, a)
	}
	// run.json names the classes as the single run's does.
	var singleRun, mergedRun runFile
	for _, x := range []struct {
		dir string
		rf  *runFile
	}{{cfg.Out, &singleRun}, {merged, &mergedRun}} {
		b, err := os.ReadFile(filepath.Join(x.dir, RunFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, x.rf); err != nil {
			t.Fatal(err)
		}
	}
	if len(singleRun.Classes) == 0 || !reflect.DeepEqual(mergedRun.Classes, singleRun.Classes) {
		t.Errorf("merged run.json classes %q, the single run's %q", mergedRun.Classes, singleRun.Classes)
	}
	// The merged folder resumes as the single run's folder does.
	c := cfg
	c.Out = merged
	again, err := Run(context.Background(), c, opt)
	if err != nil {
		t.Fatal(err)
	}
	if again.Computed != 0 || again.Resumed != len(want) {
		t.Errorf("a run on the merged folder computed %d and found %d done, want 0 and %d", again.Computed, again.Resumed, len(want))
	}
}

// TestMergeRefuses checks that Merge refuses, naming the cause, shards of
// other identities and builds, units held twice and units held by none.
func TestMergeRefuses(t *testing.T) {
	dir := t.TempDir()
	cfg, opt := builtinRun(t, "")
	cfg.Methods = []string{"source", "subtta-m"}
	cfg.Corruptions = []string{"gaussian_noise", "contrast"}
	cfg.Limit = 8
	folders := runShards(t, cfg, opt, dir, 2)
	if _, err := Merge(filepath.Join(dir, "ok"), folders, MergeOptions{}); err != nil {
		t.Fatalf("the shards as they are: %v", err)
	}
	// copyShards copies the shard folders for one case to damage.
	copyShards := func(t *testing.T) []string {
		var out []string
		for _, f := range folders {
			to := filepath.Join(t.TempDir(), filepath.Base(f))
			os.MkdirAll(to, 0o755)
			for _, name := range []string{RunFile, ResultsFile, BatchesFile} {
				b, err := os.ReadFile(filepath.Join(f, name))
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(to, name), b, 0o644)
			}
			out = append(out, to)
		}
		return out
	}
	edit := func(t *testing.T, path string, f func(string) string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(f(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines := func(t *testing.T, dir string) []string {
		b, _ := os.ReadFile(filepath.Join(dir, ResultsFile))
		return strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, s []string) []string
		target error
		says   string
	}{
		{"identity", func(t *testing.T, s []string) []string {
			edit(t, filepath.Join(s[1], RunFile), func(b string) string { return strings.Replace(b, `"limit": 8`, `"limit": 9`, 1) })
			return s
		}, ErrShardMismatch, "limit was 8, now 9"},
		{"configuration", func(t *testing.T, s []string) []string {
			edit(t, filepath.Join(s[1], RunFile), func(b string) string {
				return strings.Replace(b, `"contrast"`, `"fog"`, 1)
			})
			return s
		}, ErrShardMismatch, "split other configurations"},
		{"build", func(t *testing.T, s []string) []string {
			edit(t, filepath.Join(s[1], ResultsFile), func(b string) string {
				return strings.Replace(b, `"build":"`, `"build":"other-`, 1)
			})
			return s
		}, ErrShardMismatch, `by build "other-`},
		{"domain not its corruption's", func(t *testing.T, s []string) []string {
			edit(t, filepath.Join(s[1], ResultsFile), func(b string) string { return strings.Replace(b, `"severity":5`, `"severity":4`, 1) })
			return s
		}, nil, ": line 1: the record of "},
		{"more samples than the limit", func(t *testing.T, s []string) []string {
			edit(t, filepath.Join(s[1], ResultsFile), func(b string) string {
				return strings.Replace(b, `"samples":8,`, `"samples":9,`, 1)
			})
			return s
		}, nil, "(9 samples, more than the run's limit of 8 images a domain)"},
		{"same shard twice", func(t *testing.T, s []string) []string {
			return []string{s[0], s[1], s[1]}
		}, ErrDuplicateUnit, "are both shard 1/2"},
		{"unit in two shards", func(t *testing.T, s []string) []string {
			first := lines(t, s[0])[0]
			edit(t, filepath.Join(s[1], ResultsFile), func(b string) string { return b + first })
			return s
		}, ErrDuplicateUnit, " is in "},
		{"missing unit", func(t *testing.T, s []string) []string {
			l := lines(t, s[0])
			os.WriteFile(filepath.Join(s[0], ResultsFile), []byte(strings.Join(l[1:], "")), 0o644)
			return s
		}, ErrMissingUnit, "1 of 4: "},
		{"missing shard", func(t *testing.T, s []string) []string {
			return s[:1]
		}, ErrMissingUnit, "(shard 1/2)"},
		{"not a shard", func(t *testing.T, s []string) []string {
			edit(t, filepath.Join(s[0], RunFile), func(b string) string {
				return strings.Replace(b, `"shard": {`, `"unused": {`, 1)
			})
			return s
		}, ErrShardMismatch, "not a shard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.damage(t, copyShards(t))
			out := filepath.Join(t.TempDir(), "merged")
			_, err := Merge(out, s, MergeOptions{})
			if err == nil {
				t.Fatal("merged")
			}
			if tc.target != nil && !errors.Is(err, tc.target) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.target, tc.says)
			}
			if exists(filepath.Join(out, ResultsFile)) {
				t.Errorf("a refused merge wrote %s", ResultsFile)
			}
		})
	}
	// A folder that holds a run is not merged into.
	if _, err := Merge(folders[0], folders, MergeOptions{}); err == nil || !strings.Contains(err.Error(), "holds a run already") {
		t.Errorf("merge into a shard's folder: %v", err)
	}
}

// TestShardFolderRefusesOtherShard runs shard 1/2, and the whole run
// without a shard, into the folder of shard 0/2: both are refused with
// ErrShardFolder, the folder left as it was (a run of the whole would
// make it a run of its own, which Merge refuses).
func TestShardFolderRefusesOtherShard(t *testing.T) {
	cfg, opt := builtinRun(t, t.TempDir())
	cfg.Methods, cfg.Corruptions, cfg.Limit = []string{"source"}, []string{"gaussian_noise", "contrast"}, 8
	cfg.Shard = &Shard{0, 2}
	if _, err := Run(context.Background(), cfg, opt); err != nil {
		t.Fatal(err)
	}
	before := map[string][]byte{}
	for _, name := range []string{RunFile, ResultsFile} {
		before[name], _ = os.ReadFile(filepath.Join(cfg.Out, name))
	}
	cfg.Shard = &Shard{1, 2}
	if _, err := Run(context.Background(), cfg, opt); !errors.Is(err, ErrShardFolder) || !strings.Contains(err.Error(), "holds shard 0/2 of the run, not shard 1/2") {
		t.Fatalf("err = %v", err)
	}
	cfg.Shard = nil
	_, err := Run(context.Background(), cfg, opt)
	if !errors.Is(err, ErrShardFolder) || !strings.Contains(err.Error(), cfg.Out+" holds shard 0/2 of a run") ||
		!strings.Contains(err.Error(), "give --shard 0/2") || !strings.Contains(err.Error(), "another --out") {
		t.Fatalf("a run without a shard: err = %v", err)
	}
	for name, b := range before {
		if after, _ := os.ReadFile(filepath.Join(cfg.Out, name)); !bytes.Equal(after, b) {
			t.Errorf("a refused run changed %s", name)
		}
	}
}

// TestShardIntoWholeRunRefused: a shard is not run into the folder of a
// run of the whole (the whole run's records would stay beside the
// shard's), and the folder is left as it was.
func TestShardIntoWholeRunRefused(t *testing.T) {
	cfg, opt := builtinRun(t, t.TempDir())
	cfg.Methods, cfg.Corruptions, cfg.Limit = []string{"source"}, []string{"gaussian_noise", "contrast"}, 8
	if _, err := Run(context.Background(), cfg, opt); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(cfg.Out, ResultsFile))
	cfg.Shard = &Shard{0, 2}
	_, err := Run(context.Background(), cfg, opt)
	if !errors.Is(err, ErrShardFolder) || !strings.Contains(err.Error(), cfg.Out+" holds a run of the whole, not a shard") {
		t.Fatalf("err = %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(cfg.Out, ResultsFile)); !bytes.Equal(after, before) {
		t.Error("a refused shard changed the results")
	}
}

// TestMergeRerun: a merge that stopped (a folder where results.md goes;
// killed before run.json) is finished by running it again, as is one that
// finished; the obstacle is refused before anything is written; a folder
// holding another run's files is refused.
func TestMergeRerun(t *testing.T) {
	dir := t.TempDir()
	cfg, opt := builtinRun(t, "")
	cfg.Methods, cfg.Corruptions, cfg.Limit = []string{"source"}, []string{"gaussian_noise", "contrast"}, 8
	folders := runShards(t, cfg, opt, dir, 2)
	out := filepath.Join(dir, "merged")

	// results.md is a folder: refused, nothing written.
	if err := os.MkdirAll(filepath.Join(out, MarkdownFile), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Merge(out, folders, MergeOptions{})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(out, MarkdownFile)+" is a folder, where the merge writes a file") {
		t.Fatalf("results.md a folder: %v", err)
	}
	for _, name := range []string{RunFile, ResultsFile, BatchesFile} {
		if exists(filepath.Join(out, name)) {
			t.Errorf("a refused merge wrote %s", name)
		}
	}
	os.Remove(filepath.Join(out, MarkdownFile))
	// plots a file, with --plot: refused.
	os.WriteFile(filepath.Join(out, PlotsDir), nil, 0o644)
	if _, err := Merge(out, folders, MergeOptions{Plot: true}); err == nil || !strings.Contains(err.Error(), "where the merge writes the plots' folder") {
		t.Fatalf("plots a file: %v", err)
	}
	os.Remove(filepath.Join(out, PlotsDir))

	var log strings.Builder
	if _, err := Merge(out, folders, MergeOptions{Log: &log}); err != nil {
		t.Fatalf("merge after the obstacle went: %v", err)
	}
	if strings.Contains(log.String(), "earlier merge") || strings.Contains(log.String(), "merged before") {
		t.Errorf("a fresh merge said %q", log.String())
	}
	want, _ := os.ReadFile(filepath.Join(out, ResultsFile))
	wantRun, _ := os.ReadFile(filepath.Join(out, RunFile))

	// Stopped before run.json and the tables: finished by the same merge.
	for _, name := range []string{RunFile, MarkdownFile, CSVFile, JSONFile} {
		os.Remove(filepath.Join(out, name))
	}
	log.Reset()
	if _, err := Merge(out, folders, MergeOptions{Log: &log}); err != nil {
		t.Fatalf("merge again after one stopped before run.json: %v", err)
	}
	if !strings.Contains(log.String(), "finishing an earlier merge of these shards that stopped before run.json") {
		t.Errorf("log %q", log.String())
	}
	got, _ := os.ReadFile(filepath.Join(out, ResultsFile))
	gotRun, _ := os.ReadFile(filepath.Join(out, RunFile))
	if !bytes.Equal(got, want) || !bytes.Equal(gotRun, wantRun) || !exists(filepath.Join(out, MarkdownFile)) {
		t.Errorf("the finished merge differs from the first")
	}
	// Finished: the same merge again (the folder named otherwise) writes
	// the same.
	log.Reset()
	if _, err := Merge(out+string(filepath.Separator), folders, MergeOptions{Log: &log}); err != nil {
		t.Fatalf("merge again after one finished: %v", err)
	}
	if !strings.Contains(log.String(), "merged before from these shards") {
		t.Errorf("log %q", log.String())
	}
	// A results.jsonl other than the merge's, with or without run.json,
	// is kept and refused.
	lines := strings.SplitAfter(string(want), "\n")
	other := []byte(lines[0])
	os.WriteFile(filepath.Join(out, ResultsFile), other, 0o644)
	if _, err := Merge(out, folders, MergeOptions{}); err == nil || !strings.Contains(err.Error(), "holds a results.jsonl other than the one this merge writes") {
		t.Errorf("another results.jsonl beside the merge's run.json: %v", err)
	}
	os.Remove(filepath.Join(out, RunFile))
	if _, err := Merge(out, folders, MergeOptions{}); err == nil || !strings.Contains(err.Error(), "holds a results.jsonl other than the one this merge writes") {
		t.Errorf("another results.jsonl without run.json: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, ResultsFile)); !bytes.Equal(b, other) {
		t.Errorf("a refused merge overwrote results.jsonl")
	}
}
