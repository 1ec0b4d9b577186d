package eval

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/report"
)

// FuzzResumeRecords feeds arbitrary bytes to everything a resumed eval reads
// back from its results folder: results.jsonl (read, then appended to),
// batches.jsonl (pruned), run.json (compared with the run's identity, also
// as a --config file) and a carried-state file. None may panic, and each
// must leave the folder in the state its documentation promises:
//   - after AppendRecord, the records read back are those read before plus
//     the new one (a cut-short last line is dropped, nothing else is lost);
//   - a pruned batch log holds only complete lines that parse, none of the
//     dropped method's streams, and every other complete line in order;
//   - a run.json accepted for resuming now holds this run's identity;
//   - a state file that reads is the canonical encoding of its values.
//
// Run it with: go test -run '^$' -fuzz FuzzResumeRecords -fuzztime 10m ./eval
func FuzzResumeRecords(f *testing.F) {
	rec := report.Record{Method: "subtta-m", Domain: "gaussian_noise/5", Corruption: "gaussian_noise", Severity: 5,
		Samples: 12, Correct: 5, Accuracy: 41.67, Seconds: 1.5, PrincipalCosines: [][]float64{{1, 0.5}},
		Finished: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	line, _ := json.Marshal(rec)
	batch := []byte(`{"method":"subtta-m","stream":"gaussian_noise/5","batch":0}` + "\n" + `{"method":"source","stream":"gaussian_noise/5","batch":0}` + "\n")
	run, _ := json.Marshal(runFile{Identity: identity{Model: "m", Dataset: "cifar10-c", Seed: 1}, Config: Config{Model: "m", Dataset: "cifar10-c", Seed: 1}})
	var state bytes.Buffer
	state.WriteString(stateMagic)
	state.Write([]byte{2, 0, 0, 0, 0, 0, 0, 0})
	state.Write(make([]byte, 16))
	f.Add(append(line, '\n'), batch, run, state.Bytes())
	f.Add(append(append(line, '\n'), line[:len(line)/2]...), batch[:len(batch)-5], []byte(`{"identity":{}}`), []byte(stateMagic))
	f.Add([]byte("\n\n{}\nnull"), []byte("{\"method\":\"subtta-m\"}"), []byte(`{"config":{"seed":3}}`), []byte{})

	f.Fuzz(func(t *testing.T, results, batches, runJSON, stateBytes []byte) {
		dir := t.TempDir()

		// results.jsonl: read, append, read again.
		resPath := filepath.Join(dir, ResultsFile)
		if err := os.WriteFile(resPath, results, 0o644); err != nil {
			t.Fatal(err)
		}
		before, err := report.ReadRecordsFile(resPath)
		if err == nil {
			if err := report.AppendRecord(resPath, rec); err != nil {
				t.Fatalf("append: %v", err)
			}
			after, err := report.ReadRecordsFile(resPath)
			if err != nil {
				t.Fatalf("read after append: %v", err)
			}
			if len(after) != len(before)+1 || jsonOf(t, after[len(after)-1]) != jsonOf(t, rec) {
				t.Fatalf("after append: %d records (last %+v), want %d ending in the new one", len(after), after[len(after)-1], len(before)+1)
			}
			for i := range before {
				if jsonOf(t, before[i]) != jsonOf(t, after[i]) {
					t.Fatalf("record %d changed by append: %+v → %+v", i, before[i], after[i])
				}
			}
		}

		// batches.jsonl: prune one method's gaussian_noise lines.
		batPath := filepath.Join(dir, BatchesFile)
		if err := os.WriteFile(batPath, batches, 0o644); err != nil {
			t.Fatal(err)
		}
		drop := func(stream string, _ int) bool { return strings.HasPrefix(stream, "gaussian") }
		if err := pruneBatches(batPath, "subtta-m", drop); err != nil {
			t.Fatalf("prune: %v", err)
		}
		pruned, err := os.ReadFile(batPath)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for _, l := range bytes.SplitAfter(batches, []byte("\n")) {
			var id struct{ Method, Stream string }
			if len(bytes.TrimSpace(l)) == 0 || !bytes.HasSuffix(l, []byte("\n")) || json.Unmarshal(l, &id) != nil {
				continue
			}
			if id.Method == "subtta-m" && drop(id.Stream, 0) {
				continue
			}
			want = append(want, l...)
		}
		if !bytes.Equal(bytes.TrimSpace(pruned), bytes.TrimSpace(want)) && !bytes.Equal(pruned, batches) {
			t.Fatalf("pruned log\n%q\nwant\n%q", pruned, want)
		}

		// run.json: resuming under another identity is refused; accepted, it
		// records this run's identity (with the frost overlays of the folder's,
		// which this run does not use). It is also a --config file.
		id := identity{Model: "m", Dataset: "cifar10-c", Seed: 1}
		cfg := Config{Model: "m", Dataset: "cifar10-c", Seed: 1, Out: dir}
		runPath := filepath.Join(dir, RunFile)
		if err := os.WriteFile(runPath, runJSON, 0o644); err != nil {
			t.Fatal(err)
		}
		ReadConfig(runPath)
		if kept, err := checkRunFile(cfg, id, true); err == nil {
			var got runFile
			b, _ := os.ReadFile(runPath)
			want := id
			want.Frost = kept.Frost
			if err := json.Unmarshal(b, &got); err != nil || got.Identity != want || kept != want {
				t.Fatalf("accepted run.json now holds %s (%v)", b, err)
			}
		}

		// A carried-state file.
		statePath := filepath.Join(dir, "state.f64")
		if err := os.WriteFile(statePath, stateBytes, 0o644); err != nil {
			t.Fatal(err)
		}
		v, err := readState(statePath)
		if err != nil {
			return
		}
		again := filepath.Join(dir, "again.f64")
		if err := writeState(again, v); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(again)
		if !bytes.Equal(b, stateBytes) {
			t.Fatalf("state of %d values does not re-encode to its bytes", len(v))
		}
	})
}

// jsonOf is a record's JSON form: records compare by it, as times read back
// from JSON need not be DeepEqual to the ones written.
func jsonOf(t *testing.T, r report.Record) string {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkRunFile refuses to resume into a folder made with another
// configuration (compareRunFile), and records this run's configuration
// (writeRunFile), as a run does. It returns the identity recorded.
func checkRunFile(cfg Config, id identity, haveResults bool) (identity, error) {
	stored, err := readRunFile(cfg.Out)
	if err != nil {
		return id, err
	}
	id, err = compareRunFile(cfg, id, stored, haveResults, nil)
	if err != nil {
		return id, err
	}
	return id, writeRunFile(cfg, id)
}
