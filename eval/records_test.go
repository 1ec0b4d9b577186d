package eval

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/report"
)

// TestRecordsEvalCannotHaveWritten: a record of results.jsonl that is
// valid JSON but that eval cannot have written for the run (a field left
// out, a corruption the dataset has none of, a domain other than its
// corruption at its severity, samples other than its stream's) is refused
// on resuming, naming the file, the line and what is wrong, where it was
// taken as done (a record cut by hand showed 0.00; a domain edited from
// contrast/5 to contrast/4 resumed as contrast/4's result). The record as
// written, and one followed by a last line cut short, resume.
func TestRecordsEvalCannotHaveWritten(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast") // 12 images, the limit
	mustRun(t, cfg)
	path := filepath.Join(cfg.Out, ResultsFile)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// edited is the record with fields set (nil: left out).
	edited := func(set map[string]any) string {
		var m map[string]any
		if err := json.Unmarshal(orig, &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range set {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		b, _ := json.Marshal(m)
		return string(b) + "\n"
	}
	for _, tc := range []struct {
		name, file string
		says       string // "": resumed
	}{
		{"as written", string(orig), ""},
		{"a last line cut short", string(orig) + `{"method":"source","dom`, ""},
		{"unknown corruption", edited(map[string]any{"corruption": "fo#"}),
			`: line 1: the record of source on contrast/5 gives corruption "fo#", which is none of cifar10-c's`},
		{"cut by hand", `{"method":"source","domain":"contrast/5"}` + "\n",
			": line 1: the record of source on contrast/5 lacks the fields corruption, severity, samples, correct and accuracy"},
		{"no accuracy", edited(map[string]any{"accuracy": nil}), ": line 1: the record of source on contrast/5 lacks the field accuracy"},
		{"domain of another severity", edited(map[string]any{"domain": "contrast/4"}),
			": line 1: the record of source on contrast/4 is of contrast at severity 5, whose domain is contrast/5, not contrast/4"},
		{"severity of another domain", edited(map[string]any{"severity": 4}),
			": line 1: the record of source on contrast/5 is of contrast at severity 4, whose domain is contrast/4, not contrast/5"},
		{"severity out of range", edited(map[string]any{"domain": "contrast/6", "severity": 6}),
			": line 1: the record of source on contrast/6 gives contrast at severity 6, which is not in 1…5"},
		{"no corruption", edited(map[string]any{"corruption": "", "severity": 0}), `: line 1: the record of source on contrast/5 gives corruption "", which is none of cifar10-c's`},
		{"clean with a severity", edited(map[string]any{"domain": "clean", "corruption": "clean"}),
			": line 1: the record of source on clean gives severity 5 for the clean images, which have none"},
		{"no method", edited(map[string]any{"method": ""}), `: line 1: the record names no method or no domain (method "", domain "contrast/5")`},
		{"fewer samples than the stream", edited(map[string]any{"samples": 8, "correct": 0, "accuracy": 0}),
			": line 1: the record of source on contrast/5 does not add up (8 samples, but the stream of contrast/5 has 12 images, cut to the limit of 12)"},
		{"more samples than the limit", edited(map[string]any{"samples": 24, "correct": 0, "accuracy": 0}),
			": line 1: the record of source on contrast/5 does not add up (24 samples, more than the run's limit of 12 images a domain)"},
		{"after a blank line", "\n" + edited(map[string]any{"domain": "contrast/4"}), ": line 2: the record of source on contrast/4 is of contrast at severity 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			sum, err := Run(context.Background(), cfg, Options{})
			if tc.says == "" {
				if err != nil || sum.Resumed != 1 || sum.Computed != 0 {
					t.Fatalf("%v; want the record resumed", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), path+tc.says) || !strings.Contains(err.Error(), evalLineAdvice) {
				t.Fatalf("err = %v\nwant %q, then how to recover", err, path+tc.says)
			}
		})
	}
}

// TestReadFolderCountsUnnamed: ReadFolder (subtta report's reader) takes
// records without a run identity as eval does, and counts them for the
// caller to say so; a SeedReport names the folders.
func TestReadFolderCountsUnnamed(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast", "pixelate")
	mustRun(t, cfg)
	f, err := ReadFolder(cfg.Out)
	if err != nil || f.Unnamed != 0 {
		t.Fatalf("records as written: %v, %d unnamed; want none", err, f.Unnamed)
	}
	rewriteRecords(t, cfg.Out, func(r *report.Record) { r.Run = "" })
	if f, err = ReadFolder(cfg.Out); err != nil || f.Unnamed != 2 {
		t.Fatalf("records without a run: %v, %+v; want 2 unnamed", err, f)
	}
	r, err := WriteSeedReport(filepath.Join(t.TempDir(), "r"), []string{cfg.Out}, false)
	if err != nil || r.Unnamed[cfg.Out] != 2 {
		t.Errorf("SeedReport: %v, unnamed %v; want %s: 2", err, r.Unnamed, cfg.Out)
	}
}

// TestRecordsWithoutRunSaidSo: records that carry no run identity (an
// earlier build's) resume while run.json vouches for them, and the log
// says so, naming the file and the count, where they were taken silently.
func TestRecordsWithoutRunSaidSo(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast", "pixelate")
	mustRun(t, cfg)
	rewriteRecords(t, cfg.Out, func(r *report.Record) { r.Run = "" })
	var log strings.Builder
	sum, err := Run(context.Background(), cfg, Options{Log: &log})
	if err != nil || sum.Resumed != 2 {
		t.Fatalf("%v, %+v; want both records resumed", err, sum)
	}
	want := filepath.Join(cfg.Out, ResultsFile) + ": 2 records carry no run identity (written by an earlier build): taken as this run's because " + filepath.Join(cfg.Out, RunFile)
	if !strings.Contains(log.String(), "warning: "+want) {
		t.Errorf("log:\n%s\nwant a warning %q", log.String(), want)
	}
}
