package eval

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	imagepng "image/png"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/report"
)

// testConfig is a small run on the shared CIFAR-10 test JPEGs with clip-tiny:
// a few images of a few corruptions, corrupted on the fly.
func testConfig(t *testing.T, out string) Config {
	t.Helper()
	return Config{
		Model:       fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"),
		ModelConfig: fixture.ModelConfig(t, "fixtures/clip-tiny.openai.safetensors"),
		Vocab:       fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz"),
		Dataset:     "cifar10-c",
		Data:        fixture.Path(t, "assets/cifar10/test-jpg.tar.gz"),
		Methods:     []string{"subtta-m", "source", "tent"},
		Corruptions: []string{"gaussian_noise", "defocus_blur", "contrast", "pixelate"},
		Severities:  []int{5},
		Limit:       12,
		BatchSize:   4,
		Seed:        1,
		CorruptSeed: 1,
		Out:         out,
	}
}

func TestRunWritesTablesAndPlots(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods = append(cfg.Methods, "watt-lite", "tda", "batclip")
	cfg.Plot = true
	var log strings.Builder
	sum, err := Run(context.Background(), cfg, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	want := len(cfg.Methods) * len(cfg.Corruptions)
	if sum.Computed != want || sum.Resumed != 0 || len(sum.Records) != want {
		t.Fatalf("computed %d, resumed %d, records %d; want %d, 0, %d", sum.Computed, sum.Resumed, len(sum.Records), want, want)
	}
	for _, r := range sum.Records {
		if r.Samples != cfg.Limit || r.Accuracy < 0 || r.Accuracy > 100 {
			t.Errorf("%s %s: %d samples, accuracy %.2f", r.Method, r.Domain, r.Samples, r.Accuracy)
		}
		if r.Method == "subtta-m" && (len(r.PrincipalCosines) == 0 || len(r.SemanticConcentration) == 0 || r.Steps == 0) {
			t.Errorf("%s %s: no diagnostics or steps recorded", r.Method, r.Domain)
		}
	}
	for _, name := range []string{MarkdownFile, CSVFile, JSONFile, ResultsFile, BatchesFile, RunFile} {
		st, err := os.Stat(filepath.Join(cfg.Out, name))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", name, err)
		}
	}
	pngs, _ := filepath.Glob(filepath.Join(cfg.Out, PlotsDir, "*.png"))
	if len(pngs) == 0 {
		t.Error("no plots written")
	}
	md, _ := os.ReadFile(filepath.Join(cfg.Out, MarkdownFile))
	for _, m := range cfg.Methods {
		if !strings.Contains(string(md), m) {
			t.Errorf("results.md does not name %s:\n%s", m, md)
		}
	}
	t.Logf("\n%s", md)

	// results.json says where it was computed, and by which builds.
	var js report.Summary
	if b, err := os.ReadFile(filepath.Join(cfg.Out, JSONFile)); err != nil || json.Unmarshal(b, &js) != nil {
		t.Fatalf("%s: %v", JSONFile, err)
	}
	env := report.CurrentEnvironment()
	if js.Environment == nil || js.Environment.Build != env.Build || js.Environment.Threads < 1 || js.Builds[env.Build] != want {
		t.Errorf("%s: environment %+v, builds %v; want build %q for all %d records", JSONFile, js.Environment, js.Builds, env.Build, want)
	}

	// A second run, configured by the run.json the first one wrote, finds
	// everything done and computes nothing; results.json holds the same
	// configuration.
	again, err := ReadConfig(filepath.Join(cfg.Out, RunFile))
	if err != nil {
		t.Fatal(err)
	}
	if fromResults, err := ReadConfig(filepath.Join(cfg.Out, JSONFile)); err != nil || !reflect.DeepEqual(fromResults, again) {
		t.Errorf("config from %s: %+v (%v)\nfrom %s: %+v", JSONFile, fromResults, err, RunFile, again)
	}
	sum2, err := Run(context.Background(), again, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Computed != 0 || sum2.Resumed != want {
		t.Errorf("rerun computed %d and resumed %d, want 0 and %d", sum2.Computed, sum2.Resumed, want)
	}
}

// killChildEnv makes the test binary a run that blocks mid-way through the
// third domain of its first method, after that domain's first batch was
// checkpointed, waiting to be killed.
const killChildEnv = "SUBTTA_EVAL_KILL_CHILD"

// killVariantEnv names the run of killVariants the child makes.
const killVariantEnv = "SUBTTA_EVAL_KILL_VARIANT"

// killVariants are the runs TestResumeAfterKill kills and resumes: the
// default methods (SubTTA's carried covariance among them), a multi-view
// method with a memory that grows through the domain (DMN, 10 views), and
// the episodic protocol (SubTTA's feature bank, TENT).
var killVariants = map[string]func(*Config){
	"default": func(*Config) {},
	"multi-view memory": func(c *Config) {
		c.Methods, c.BatchSize, c.Views = []string{"dmn"}, 0, 10
	},
	"episodic": func(c *Config) {
		c.Methods, c.BatchSize, c.Protocol = []string{"subtta-s", "tent"}, 0, "episodic"
	},
}

func TestKillChild(t *testing.T) {
	out := os.Getenv(killChildEnv)
	if out == "" {
		t.Skip("helper process of TestResumeAfterKill")
	}
	cfg := testConfig(t, out)
	killVariants[os.Getenv(killVariantEnv)](&cfg)
	stored, batches := 0, 0
	opt := Options{
		CheckpointEvery: time.Nanosecond,
		// The records come two steps behind the method: each checkpoint
		// must hold its batch's state, not the method's current one.
		DiagnosticWorkers: 2,
		AfterDomain:       func(report.Record) { stored++ },
		Progress: func(p Progress) {
			if stored == 2 {
				batches++
			}
			if batches == 2 {
				// The batch's line is written, its checkpoint not yet.
				// Mid-way through the third domain: say so and wait.
				os.WriteFile(filepath.Join(out, "ready"), nil, 0o644)
				time.Sleep(time.Hour)
			}
		},
	}
	Run(context.Background(), cfg, opt)
	t.Fatal("the run finished before it was killed")
}

// TestResumeAfterKill kills a run (SIGKILL) in the middle of a domain and
// shows that running again finishes the work without redoing or losing the
// finished domains or the checkpointed batch of the interrupted one, and
// that the resumed results equal those of a run that was never interrupted
// (SubTTA's carried EMA covariance and its state mid-domain included), for
// every run of killVariants: a multi-view method with memory and the
// episodic protocol too.
func TestResumeAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second process")
	}
	for _, name := range slices.Sorted(maps.Keys(killVariants)) {
		t.Run(name, func(t *testing.T) { resumeAfterKill(t, name) })
	}
}

func resumeAfterKill(t *testing.T, variant string) {
	out := t.TempDir()
	cfg := testConfig(t, out)
	killVariants[variant](&cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+out, killVariantEnv+"="+variant)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !exists(filepath.Join(out, "ready")) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the child run never reached its third domain")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	before, err := report.ReadRecordsFile(filepath.Join(out, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 2 {
		t.Fatalf("killed run left %d records, want 2", len(before))
	}
	sum, err := Run(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	total := len(cfg.Methods) * len(cfg.Corruptions)
	if sum.Resumed != 2 || sum.Computed != total-2 || sum.Continued != 1 {
		t.Errorf("resumed run: %d resumed, %d computed, %d batches continued; want 2, %d and 1", sum.Resumed, sum.Computed, sum.Continued, total-2)
	}
	if len(sum.Records) != total {
		t.Fatalf("%d records after resuming, want %d (each domain once)", len(sum.Records), total)
	}
	for i, r := range before {
		if !sum.Records[i].Finished.Equal(r.Finished) || sum.Records[i].Domain != r.Domain {
			t.Errorf("record %d (%s %s) was redone or lost", i, r.Method, r.Domain)
		}
	}

	// The same run without interruption.
	clean := cfg
	clean.Out = t.TempDir()
	ref, err := Run(context.Background(), clean, Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(r report.Record) string { return r.Method + " " + r.Domain }
	got := map[string]report.Record{}
	for _, r := range sum.Records {
		got[key(r)] = r
	}
	for _, r := range ref.Records {
		g := got[key(r)]
		if g.Correct != r.Correct || g.Steps != r.Steps || !slices.Equal(g.SemanticConcentration, r.SemanticConcentration) {
			t.Errorf("%s: resumed run %d correct (concentration %v), uninterrupted %d (%v)",
				key(r), g.Correct, g.SemanticConcentration, r.Correct, r.SemanticConcentration)
		}
	}
	// Each domain has the batch lines of its stored run only: those of the
	// domain the kill interrupted after its checkpoint are gone.
	if a, b := batchLines(t, out), batchLines(t, clean.Out); !maps.Equal(a, b) {
		t.Errorf("batch lines per method and domain: resumed %v, uninterrupted %v", a, b)
	}
}

// batchLines counts the lines of a results folder's batch log by method and
// stream.
func batchLines(t *testing.T, dir string) map[string]int {
	b, err := os.ReadFile(filepath.Join(dir, BatchesFile))
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var l batchLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: %q: %v", BatchesFile, line, err)
		}
		n[l.Method+" "+l.Stream]++
	}
	return n
}

// TestCancelContinuesMidDomain cancels a run in the middle of its second
// domain: the cancellation checkpoints the domain at once (the interval is
// the default, far longer than the run), and the next run continues after
// the checkpointed batches with the results of an uninterrupted run. A
// checkpoint that is unreadable, or whose batches are missing from the
// batch log, is ignored with a log line and the domain is redone.
func TestCancelContinuesMidDomain(t *testing.T) {
	// Without diagnostic workers the cancelled batch is the last one
	// computed; with two, the method has stepped on two more, whose
	// records are written and checkpointed too.
	for _, workers := range []int{-1, 2} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) { cancelContinuesMidDomain(t, workers, 2+max(workers, 0)) })
	}
}

func cancelContinuesMidDomain(t *testing.T, workers, cut int) {
	base := testConfig(t, "")
	base.Methods, base.Corruptions, base.Limit = []string{"tent"}, []string{"gaussian_noise", "contrast"}, 20
	clean := base
	clean.Out = t.TempDir()
	ref, err := Run(context.Background(), clean, Options{DiagnosticWorkers: -1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		damage    func(t *testing.T, out string)
		continued int
		log       string
	}{
		{"intact", func(*testing.T, string) {}, cut, fmt.Sprint("continuing after batch ", cut)},
		{"garbage checkpoint", func(t *testing.T, out string) {
			files, _ := filepath.Glob(filepath.Join(out, stateDir, "tent.partial.*.bin"))
			if len(files) != 1 {
				t.Fatalf("checkpoints %v, want one", files)
			}
			os.WriteFile(files[0], []byte("not a checkpoint"), 0o644)
		}, 0, "not a partial-domain checkpoint"},
		{"flipped byte", func(t *testing.T, out string) {
			editCheckpoint(t, out, func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b })
		}, 0, "checksum does not match"},
		{"cut short", func(t *testing.T, out string) {
			editCheckpoint(t, out, func(b []byte) []byte { return b[:len(b)-9] })
		}, 0, "checksum does not match"},
		{"cut to its header", func(t *testing.T, out string) {
			editCheckpoint(t, out, func(b []byte) []byte { return b[:len(partialMagic)+10] })
		}, 0, "cut short"},
		{"checkpoint of an earlier build", func(t *testing.T, out string) {
			// The format before checksums: the same, with the v1 magic and
			// no checksum.
			editCheckpoint(t, out, func(b []byte) []byte {
				return append([]byte(partialMagicV1), b[len(partialMagic):len(b)-crcLen]...)
			})
		}, 0, "without a checksum"},
		{"batch log without the domain", func(t *testing.T, out string) {
			if err := pruneBatches(filepath.Join(out, BatchesFile), "tent", func(s string, _ int) bool { return strings.HasPrefix(s, "contrast") }); err != nil {
				t.Fatal(err)
			}
		}, 0, fmt.Sprintf("the batch log lacks some of its %d batches", cut)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Out = t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			_, err := Run(ctx, cfg, Options{DiagnosticWorkers: workers, Progress: func(p Progress) {
				if p.Done == cfg.Limit+8 { // second domain, second batch of 4
					cancel()
				}
			}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want an interruption", err)
			}
			tc.damage(t, cfg.Out)
			var log strings.Builder
			var last Progress
			sum, err := Run(context.Background(), cfg, Options{DiagnosticWorkers: workers, Log: &log, Progress: func(p Progress) { last = p }})
			if err != nil {
				t.Fatal(err)
			}
			// The progress counts what this run computes: the restored
			// batches are neither done nor to do.
			if want := cfg.Limit - 4*tc.continued; last.Done != want || last.Total != want {
				t.Errorf("last progress %d of %d images, want %d of %d", last.Done, last.Total, want, want)
			}
			if sum.Resumed != 1 || sum.Computed != 1 || sum.Continued != tc.continued {
				t.Errorf("%d resumed, %d computed, %d batches continued; want 1, 1, %d", sum.Resumed, sum.Computed, sum.Continued, tc.continued)
			}
			if !strings.Contains(log.String(), tc.log) {
				t.Errorf("log lacks %q:\n%s", tc.log, log.String())
			}
			sameAsUninterrupted(t, sum, ref, cfg.Out, clean.Out)
		})
	}
}

// editCheckpoint replaces the one domain checkpoint of tent in the results
// folder out by edit's result.
func editCheckpoint(t *testing.T, out string, edit func([]byte) []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(out, stateDir, "tent.partial.*.bin"))
	if len(files) != 1 {
		t.Fatalf("checkpoints %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCancelContinuesStream: a continual stream cancelled in its first or
// second domain, and a mixed one, continue on the next run from their
// checkpoint (the method's state carried through the batches before), with
// the results of an uninterrupted run.
func TestCancelContinuesStream(t *testing.T) {
	for _, c := range []struct {
		protocol  string
		cancelAt  int // images done when cancelled
		workers   int // diagnostic workers: the batches stepped beyond the cancelled one
		continued int // batches (of 4 images) the next run takes from the checkpoint
	}{
		{"continual", 8, -1, 2},
		{"continual", 12 + 8, -1, 3 + 2},
		{"mixed", 12 + 8, -1, 5},
		{"continual", 8, 1, 3},      // the first domain's last batch
		{"continual", 12 + 8, 2, 6}, // the second domain's last batch
		{"mixed", 8, 2, 4},
		{"mixed", 12 + 8, 2, 6}, // the stream's last batch
	} {
		t.Run(fmt.Sprintf("%s/%d/workers=%d", c.protocol, c.cancelAt, c.workers), func(t *testing.T) {
			base := testConfig(t, "")
			base.Methods, base.Corruptions, base.Protocol = []string{"subtta-m"}, []string{"gaussian_noise", "contrast"}, c.protocol
			clean := base
			clean.Out = t.TempDir()
			ref, err := Run(context.Background(), clean, Options{DiagnosticWorkers: -1})
			if err != nil {
				t.Fatal(err)
			}
			cfg := base
			cfg.Out = t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			_, err = Run(ctx, cfg, Options{DiagnosticWorkers: c.workers, Progress: func(p Progress) {
				if p.Done == c.cancelAt {
					cancel()
				}
			}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want an interruption", err)
			}
			var log strings.Builder
			sum, err := Run(context.Background(), cfg, Options{DiagnosticWorkers: c.workers, Log: &log})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Computed != 2 || sum.Continued != c.continued {
				t.Errorf("%d computed, %d batches continued; want 2 and %d\n%s", sum.Computed, sum.Continued, c.continued, log.String())
			}
			sameAsUninterrupted(t, sum, ref, cfg.Out, clean.Out)
		})
	}
}

// sameAsUninterrupted fails unless a resumed run (sum, folder dir) has
// the records and the batch lines of an uninterrupted one (ref, refDir),
// and left no checkpoint behind.
func sameAsUninterrupted(t *testing.T, sum, ref *Summary, dir, refDir string) {
	t.Helper()
	for i, r := range ref.Records {
		g := sum.Records[i]
		if g.Domain != r.Domain || g.Correct != r.Correct || g.Samples != r.Samples || !slices.Equal(g.SemanticConcentration, r.SemanticConcentration) {
			t.Errorf("%s: %d of %d correct (concentration %v), uninterrupted %d of %d (%v)",
				r.Domain, g.Correct, g.Samples, g.SemanticConcentration, r.Correct, r.Samples, r.SemanticConcentration)
		}
	}
	if a, b := batchLines(t, dir), batchLines(t, refDir); !maps.Equal(a, b) {
		t.Errorf("batch lines per method and stream: resumed %v, uninterrupted %v", a, b)
	}
	// Every field of results.jsonl but the times, to the last bit (JSON
	// writes float64s exactly).
	if a, b := untimedRecords(t, dir), untimedRecords(t, refDir); !slices.Equal(a, b) {
		t.Errorf("%s differs from the uninterrupted run's but for the times:\n%s\n%s", ResultsFile, strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, stateDir, "*.bin")); len(left) > 0 {
		t.Errorf("checkpoints left after the run: %v", left)
	}
}

func TestCancelKeepsFinishedDomains(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods = []string{"source"}
	ctx, cancel := context.WithCancel(context.Background())
	stored := 0
	_, err := Run(ctx, cfg, Options{AfterDomain: func(report.Record) {
		if stored++; stored == 1 {
			cancel()
		}
	}})
	if err == nil || !strings.Contains(err.Error(), "interrupted") || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want an interruption wrapping context.Canceled", err)
	}
	recs, err := report.ReadRecordsFile(filepath.Join(cfg.Out, ResultsFile))
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d records kept (%v), want 1", len(recs), err)
	}
}

// TestInterruptedSaysWhatIsKept: an interrupted run says what the folder
// keeps: the records of the finished domains, and the checkpoint of the
// domain or stream in progress where there is one; a continual stream's
// records are written at its end, so none is kept but its checkpoint
// (the message said "finished domains are kept in OUT/results.jsonl",
// which did not exist).
func TestInterruptedSaysWhatIsKept(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		cancelAt int // images done
		every    time.Duration
		says     string // after "interrupted during source; ", OUT for the folder
	}{
		{"reset", 16, 0, "1 finished domain of source is kept in OUT/results.jsonl, and contrast/5, in progress, is checkpointed in OUT/state/source.partial.2."},
		{"reset", 4, 0, "no domain of source had finished, so none is stored, and gaussian_noise/5, in progress, is checkpointed in OUT/state/source.partial.1."},
		{"reset", 16, -1, "1 finished domain of source is kept in OUT/results.jsonl, and contrast/5, in progress, has no checkpoint: it is computed again from its start"},
		{"continual", 16, 0, "source's continual stream stores its domains' records only once it ends: none is stored yet, and the stream, in progress, is checkpointed in OUT/state/source.continual."},
	} {
		t.Run(fmt.Sprintf("%s/%d/every=%v", tc.protocol, tc.cancelAt, tc.every), func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			cfg.Methods, cfg.Corruptions, cfg.Protocol = []string{"source"}, []string{"gaussian_noise", "contrast"}, tc.protocol
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := Run(ctx, cfg, Options{DiagnosticWorkers: -1, CheckpointEvery: tc.every, Progress: func(p Progress) {
				if p.Done == tc.cancelAt {
					cancel()
				}
			}})
			want := "eval: interrupted during source; " + strings.ReplaceAll(tc.says, "OUT/", cfg.Out+string(filepath.Separator))
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), want) || !strings.HasSuffix(err.Error(), "; run again to resume") {
				t.Fatalf("err = %v\nwant %q", err, want)
			}
		})
	}
}

func TestRunBadInput(t *testing.T) {
	base := testConfig(t, t.TempDir())
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"missing data", func(c *Config) { c.Data = filepath.Join(t.TempDir(), "nope") }, "no such file"},
		{"unknown corruption", func(c *Config) { c.Corruptions = []string{"gaussian_noise", "rain"} }, `"rain"`},
		{"unknown method", func(c *Config) { c.Methods = []string{"magic"} }, `"magic"`},
		{"unknown dataset", func(c *Config) { c.Dataset = "mnist-c" }, `"mnist-c"`},
		{"bad severity", func(c *Config) { c.Severities = []int{6} }, "severity 6"},
		{"bad protocol", func(c *Config) { c.Protocol = "sometimes" }, `"sometimes" (want reset, continual, mixed, episodic, gradual)`},
		{"one class", func(c *Config) { c.Classes = 1 }, "keep at least 2 classes"},
		{"one class name", func(c *Config) { c.ClassNames = []string{"cat"} }, "keep at least 2 classes"},
		{"class seed alone", func(c *Config) { c.ClassSeed = 3 }, "class seed 3 draws nothing"},
		{"subset list on CIFAR", func(c *Config) { c.SubsetList = c.Vocab }, "it applies to imagenet-c, not cifar10-c"},
		{"not a dataset", func(c *Config) { c.Data = c.Vocab }, "not an image folder"},
		{"missing model", func(c *Config) { c.Model = filepath.Join(t.TempDir(), "m.safetensors") }, "m.safetensors"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Out = t.TempDir()
			tc.edit(&cfg)
			_, err := Run(context.Background(), cfg, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line containing %s", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// TestRunUnreadableFiles: a broken image or a .npy of the wrong shape stops
// the run with one line naming the file.
func TestRunUnreadableFiles(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods, cfg.Corruptions, cfg.Limit = []string{"source"}, []string{"contrast"}, 0

	folder := t.TempDir()
	for _, c := range []string{"cat", "dog"} {
		os.Mkdir(filepath.Join(folder, c), 0o755)
	}
	var png bytes.Buffer
	if err := imagepng.Encode(&png, image.NewRGBA(image.Rect(0, 0, 32, 32))); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(folder, "cat", "ok.png"), png.Bytes(), 0o644)
	os.WriteFile(filepath.Join(folder, "dog", "broken.png"), png.Bytes()[:40], 0o644)

	npyDir := t.TempDir()
	writeNPY := func(name, dtype string, shape []int, n int) {
		var b bytes.Buffer
		if err := data.WriteNPY(&b, dtype, shape, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(npyDir, name), b.Bytes(), 0o644)
	}
	writeNPY("labels.npy", "<i8", []int{10}, 80)
	writeNPY("contrast.npy", "|u1", []int{10, 32, 32}, 10*32*32) // no channel axis

	for _, tc := range []struct{ name, data, want string }{
		{"broken image", folder, "broken.png"},
		{"wrong npy shape", npyDir, "contrast.npy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.Data, c.Out = tc.data, t.TempDir()
			if tc.data == folder {
				c.Labels = writeLabels(t, "cat", "dog") // the folder's two classes
			}
			_, err := Run(context.Background(), c, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line naming %s", err, tc.want)
			}
			t.Log(err)
		})
	}
}

func TestResumeRefusesOtherConfiguration(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods, cfg.Corruptions = []string{"source"}, []string{"contrast"}
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	cfg.Limit = 8
	_, err := Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "limit was 12, now 8") {
		t.Fatalf("err = %v, want a refusal naming the limit", err)
	}
}

func TestStateFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.f64")
	var v []byte
	for _, x := range []float64{1, -2.5, 3e-300, 0} {
		v = binary.LittleEndian.AppendUint64(v, math.Float64bits(x))
	}
	// A version-1 file (a count of float64 values, then the values) reads
	// as the same bytes.
	v1 := binary.LittleEndian.AppendUint64([]byte(stateMagicV1), uint64(len(v)/8))
	if err := os.WriteFile(path, append(v1, v...), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readState(path); err != nil || !slices.Equal(got, v) {
		t.Fatalf("version 1: got %v, %v; want %v", got, err, v)
	}
	if err := writeState(path, v); err != nil {
		t.Fatal(err)
	}
	got, err := readState(path)
	if err != nil || !slices.Equal(got, v) {
		t.Fatalf("got %v, %v; want %v", got, err, v)
	}
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b[:len(b)-3], 0o644)
	if _, err := readState(path); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated file: err = %v", err)
	}
	b[len(stateMagic)+8+5] ^= 1
	os.WriteFile(path, b, 0o644)
	if _, err := readState(path); !errors.Is(err, errDamagedPartial) || !strings.Contains(err.Error(), path) {
		t.Errorf("a byte changed: err = %v", err)
	}
	// A version-2 file (no checksum) reads by its length.
	v2 := binary.LittleEndian.AppendUint64([]byte(stateMagicV2), uint64(len(v)))
	os.WriteFile(path, append(v2, v...), 0o644)
	if got, err := readState(path); err != nil || !slices.Equal(got, v) {
		t.Fatalf("version 2: got %v, %v; want %v", got, err, v)
	}
	if _, err := readState(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

// TestResumeWithoutStateRedoes: when SubTTA's carried state of a finished
// prefix is missing, the resumed run redoes the prefix rather than continue
// from a wrong covariance, and each domain is reported once.
func TestResumeWithoutStateRedoes(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods, cfg.Corruptions = []string{"subtta-m"}, []string{"gaussian_noise", "contrast"}
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.Out, stateDir)); err != nil {
		t.Fatal(err)
	}
	cfg.Corruptions = append(cfg.Corruptions, "pixelate")
	sum, err := Run(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Computed != 3 || len(sum.Records) != 3 {
		t.Fatalf("computed %d, %d records; want 3 and 3", sum.Computed, len(sum.Records))
	}
	if recs := untimedRecords(t, cfg.Out); len(recs) != 3 {
		t.Errorf("%s holds %d records, want 3 (each domain once):\n%s", ResultsFile, len(recs), strings.Join(recs, "\n"))
	}
}

// TestResumeDamagedState: a carried state whose bytes changed is not
// resumed from: the run warns, naming it, and redoes the prefix, each
// domain then stored once with the results of a clean run.
func TestResumeDamagedState(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods, cfg.Corruptions = []string{"subtta-m"}, []string{"gaussian_noise", "contrast"}
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(cfg.Out, stateDir, "subtta-m.2.*.f64"))
	if len(files) != 1 {
		t.Fatalf("state files %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	os.WriteFile(files[0], b, 0o644)
	cfg.Corruptions = append(cfg.Corruptions, "pixelate")
	var log strings.Builder
	sum, err := Run(context.Background(), cfg, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Computed != 3 || !strings.Contains(log.String(), "warning: subtta-m: ignoring the carried state: "+files[0]) {
		t.Errorf("computed %d, log:\n%s", sum.Computed, log.String())
	}
	clean := cfg
	clean.Out = t.TempDir()
	if _, err := Run(context.Background(), clean, Options{}); err != nil {
		t.Fatal(err)
	}
	if got, want := untimedRecords(t, cfg.Out), untimedRecords(t, clean.Out); !slices.Equal(got, want) {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestResumeAfterCutRecord: a results file whose last record was cut short
// (a run killed while writing it, or a file damaged) loses that domain, and
// with it the carried state of the prefix before it: the resumed run redoes
// the method's domains, and the file then holds each domain once, with the
// results of the first run.
func TestResumeAfterCutRecord(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods, cfg.Corruptions = []string{"source", "subtta-m"}, []string{"gaussian_noise", "contrast", "pixelate"}
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	want := untimedRecords(t, cfg.Out)
	path := filepath.Join(cfg.Out, ResultsFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1
	if err := os.WriteFile(path, b[:last+(len(b)-last)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Computed != 3 || sum.Resumed != 3 {
		t.Errorf("computed %d, resumed %d; want 3 and 3", sum.Computed, sum.Resumed)
	}
	got := untimedRecords(t, cfg.Out)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("records after resuming:\n%s\nwant (each domain once):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOneWriterPerFolder starts a second run in a results folder while a
// first one is writing there: the second is refused, naming the holder.
func TestOneWriterPerFolder(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods, cfg.Corruptions = []string{"source"}, []string{"contrast"}
	var second error
	_, err := Run(context.Background(), cfg, Options{AfterDomain: func(report.Record) {
		_, second = Run(context.Background(), cfg, Options{})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if second == nil || !strings.Contains(second.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second writer: %v; want a refusal naming process %d", second, os.Getpid())
	}
	t.Log(second)
}

// TestCarriedStateFollowsDomainOrder runs SubTTA (whose EMA covariance is
// carried from domain to domain) on two corruptions, then in the same
// folder on three, in another order: the carried state must be that of a
// clean run of the three, not one continued from the first run's.
func TestCarriedStateFollowsDomainOrder(t *testing.T) {
	first := testConfig(t, t.TempDir())
	first.Methods, first.Corruptions = []string{"subtta-m"}, []string{"contrast", "gaussian_noise"}
	if _, err := Run(context.Background(), first, Options{}); err != nil {
		t.Fatal(err)
	}
	second := first
	second.Corruptions = []string{"gaussian_noise", "contrast", "pixelate"}
	if _, err := Run(context.Background(), second, Options{}); err != nil {
		t.Fatal(err)
	}
	clean := second
	clean.Out = t.TempDir()
	if _, err := Run(context.Background(), clean, Options{}); err != nil {
		t.Fatal(err)
	}
	final := func(dir string) []byte {
		files, _ := filepath.Glob(filepath.Join(dir, stateDir, "subtta-m.3.*.f64"))
		if len(files) != 1 {
			t.Fatalf("%s: state files after three domains: %v", dir, files)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(final(second.Out), final(clean.Out)) {
		t.Error("the state after gaussian_noise, contrast, pixelate differs from a clean run's")
	}
}

// TestBadInputWritesNothing: a run refused for its inputs leaves no results
// folder behind.
func TestBadInputWritesNothing(t *testing.T) {
	for _, edit := range []func(*Config){
		func(c *Config) { c.Model = filepath.Join(c.Out, "..", "missing.safetensors") },
		func(c *Config) { c.Data = filepath.Join(c.Out, "..", "missing-data") },
	} {
		cfg := testConfig(t, filepath.Join(t.TempDir(), "results"))
		edit(&cfg)
		if _, err := Run(context.Background(), cfg, Options{}); err == nil {
			t.Fatal("a run with a missing input succeeded")
		}
		if _, err := os.Stat(cfg.Out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused run created %s (%v)", cfg.Out, err)
		}
	}
}

// TestIdentityByContent: a run is identified by what its inputs hold, not
// by the paths naming them. The same data by a relative path resumes;
// another model saved at the same path is refused, and the refusal says
// that the model differs.
func TestIdentityByContent(t *testing.T) {
	dir := t.TempDir()
	src := testConfig(t, "")
	model := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(src.Model)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(model, b, 0o644)
	cfg := testConfig(t, filepath.Join(dir, "out"))
	cfg.Model = model
	cfg.Methods, cfg.Corruptions = []string{"source"}, []string{"contrast"}
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}

	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, cfg.Data)
	if err != nil {
		t.Skip("no relative path to the data:", err)
	}
	same := cfg
	same.Data = rel
	sum, err := Run(context.Background(), same, Options{})
	if err != nil {
		t.Fatalf("the same data by a relative path: %v", err)
	}
	if sum.Resumed != 1 || sum.Computed != 0 {
		t.Errorf("resumed %d, computed %d; want 1 and 0", sum.Resumed, sum.Computed)
	}

	b[len(b)-1] ^= 1 // another model at the same path
	os.WriteFile(model, b, 0o644)
	_, err = Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "model was") {
		t.Fatalf("another model at the same path: %v; want a refusal naming the model", err)
	}
	t.Log(err)
}

// TestArchitecture: a config names the model's architecture by file or by
// open_clip name, not both.
func TestArchitecture(t *testing.T) {
	a, err := Config{Arch: "ViT-H-14"}.architecture()
	if err != nil || a.Vision.Heads != 16 {
		t.Errorf("arch ViT-H-14: %+v, %v; want 16 vision heads", a, err)
	}
	if a, err := (Config{}).architecture(); a != nil || err != nil {
		t.Errorf("no architecture given: %+v, %v; want nil, nil", a, err)
	}
	if _, err := (Config{Arch: "ViT-B-32", ModelConfig: "c.json"}).architecture(); err == nil {
		t.Error("arch and model_config together accepted")
	}
	if _, err := (Config{Arch: "RN50"}).architecture(); err == nil || !strings.Contains(err.Error(), "RN50") {
		t.Errorf("unknown arch: %v", err)
	}
}

// untimedRecords returns the records of a results folder as JSON lines
// with their times (seconds, images per second, batch seconds, finished)
// left out.
func untimedRecords(t *testing.T, dir string) []string {
	t.Helper()
	recs, err := report.ReadRecordsFile(filepath.Join(dir, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		r.Seconds, r.ImagesPerSecond, r.BatchSeconds, r.Finished = 0, 0, nil, time.Time{}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// TestStateFolderUnreadable: a saved-state folder that cannot be read (here
// a file in its place) stops the run before it computes anything, naming
// it, rather than being taken for no saved state.
func TestStateFolderUnreadable(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Methods, cfg.Corruptions = []string{"subtta-m"}, []string{"gaussian_noise"}
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(cfg.Out, stateDir)
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(cfg.Out, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Corruptions = append(cfg.Corruptions, "contrast")
	_, err = Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "saved states") || !strings.Contains(err.Error(), state) {
		t.Fatalf("Run with %s a file: %v, want an error naming it", state, err)
	}
	after, err := os.ReadFile(filepath.Join(cfg.Out, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("%s changed:\n%s", ResultsFile, after)
	}
}
