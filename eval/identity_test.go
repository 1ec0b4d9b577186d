package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	imagepng "image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/report"
)

// smallRun is testConfig cut to one method on one corruption.
func smallRun(t *testing.T, out string, corruptions ...string) Config {
	cfg := testConfig(t, out)
	cfg.Methods, cfg.Corruptions = []string{"source"}, corruptions
	return cfg
}

func mustRun(t *testing.T, cfg Config) *Summary {
	t.Helper()
	sum, err := Run(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// rewriteRecords applies edit to every record of dir's results.jsonl.
func rewriteRecords(t *testing.T, dir string, edit func(*report.Record)) {
	t.Helper()
	path := filepath.Join(dir, ResultsFile)
	recs, err := report.ReadRecordsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, r := range recs {
		edit(&r)
		line, _ := json.Marshal(r)
		b = append(append(b, line...), '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsCarryTheirRun: without run.json, the records themselves say
// which run made them. An unchanged rerun resumes them; a run with
// another limit is refused, naming the file; records that carry no run
// (written before records did) are not trusted without run.json.
func TestRecordsCarryTheirRun(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	first := mustRun(t, cfg)
	if len(first.Records) != 1 || first.Records[0].Run == "" {
		t.Fatalf("records %+v: want one that names its run", first.Records)
	}
	runFile := filepath.Join(cfg.Out, RunFile)

	os.Remove(runFile)
	if sum := mustRun(t, cfg); sum.Resumed != 1 || sum.Computed != 0 {
		t.Errorf("unchanged rerun without run.json: resumed %d, computed %d; want 1 and 0", sum.Resumed, sum.Computed)
	}

	os.Remove(runFile)
	other := cfg
	other.Limit = 8
	_, err := Run(context.Background(), other, Options{})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(cfg.Out, ResultsFile)) || !strings.Contains(err.Error(), "another configuration") {
		t.Fatalf("another limit without run.json: %v; want a refusal naming %s", err, ResultsFile)
	}
	if _, err := os.Stat(runFile); err == nil {
		t.Error("the refused run wrote run.json")
	}

	rewriteRecords(t, cfg.Out, func(r *report.Record) { r.Run = "" })
	_, err = Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), RunFile) || !strings.Contains(err.Error(), "carry no run identity") {
		t.Fatalf("records without their run and no run.json: %v; want a refusal", err)
	}
	t.Log(err)
}

// TestRecordsOfAnotherRunRefused: a record whose run differs from the
// folder's run.json (appended by hand, or copied from another folder) is
// refused, naming its method and domain.
func TestRecordsOfAnotherRunRefused(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	mustRun(t, cfg)
	rewriteRecords(t, cfg.Out, func(r *report.Record) { r.Run = "0123456789abcdef" })
	_, err := Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "source on contrast/5") || !strings.Contains(err.Error(), "0123456789abcdef") {
		t.Fatalf("a record of another run: %v; want a refusal naming it", err)
	}
}

// TestDamagedResultsLine: a damaged record followed by a newline stops the
// run with the file, the line and how to recover; deleting the line
// recomputes its domain. An unterminated last line (a killed run's) is
// still dropped and recomputed silently.
func TestDamagedResultsLine(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast", "pixelate")
	mustRun(t, cfg)
	path := filepath.Join(cfg.Out, ResultsFile)
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	damaged := lines[0] + lines[1][:len(lines[1])/2] + "\n"
	os.WriteFile(path, []byte(damaged), 0o644)
	_, err := Run(context.Background(), cfg, Options{})
	for _, want := range []string{path + ": line 2", "delete", "computed again"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("damaged line: %v; want an error with %q", err, want)
		}
	}
	t.Log(err)

	os.WriteFile(path, []byte(lines[0]), 0o644) // the line deleted
	if sum := mustRun(t, cfg); sum.Computed != 1 || sum.Resumed != 1 {
		t.Errorf("after deleting the line: computed %d, resumed %d; want 1 and 1", sum.Computed, sum.Resumed)
	}
	os.WriteFile(path, []byte(lines[0]+lines[1][:len(lines[1])/2]), 0o644) // cut short
	if sum := mustRun(t, cfg); sum.Computed != 1 || sum.Resumed != 1 {
		t.Errorf("after a cut last line: computed %d, resumed %d; want 1 and 1", sum.Computed, sum.Resumed)
	}
}

// TestFrostOnlyWhenUsed: the frost overlays are part of a run's identity
// only when it makes frost. A run of fog into a folder that holds frost
// resumes; frost made again from other overlays is refused.
func TestFrostOnlyWhenUsed(t *testing.T) {
	overlays := fixture.Path(t, "assets/corruptions")
	cfg := smallRun(t, t.TempDir(), "frost", "contrast")
	cfg.FrostDir = overlays
	mustRun(t, cfg)

	fog := cfg
	fog.Corruptions = []string{"contrast", "fog"}
	if sum := mustRun(t, fog); sum.Resumed != 1 || sum.Computed != 1 {
		t.Errorf("fog into a folder with frost: resumed %d, computed %d; want 1 and 1", sum.Resumed, sum.Computed)
	}

	other := filepath.Join(t.TempDir(), "frost")
	os.Mkdir(other, 0o755)
	for _, name := range []string{"frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"} {
		b, err := os.ReadFile(filepath.Join(overlays, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "frost5.jpg" {
			b = append(b, 0) // another file, the same image
		}
		os.WriteFile(filepath.Join(other, name), b, 0o644)
	}
	again := cfg
	again.FrostDir = other
	_, err := Run(context.Background(), again, Options{})
	if err == nil || !strings.Contains(err.Error(), "frost was") {
		t.Fatalf("frost from other overlays: %v; want a refusal naming frost", err)
	}
	// Without run.json, the frost record itself is refused.
	os.Remove(filepath.Join(cfg.Out, RunFile))
	_, err = Run(context.Background(), again, Options{})
	if err == nil || !strings.Contains(err.Error(), "source on frost/5") {
		t.Fatalf("frost from other overlays without run.json: %v; want a refusal naming the frost record", err)
	}
}

// writeFolderData writes an image folder of two classes, n images each,
// stored uncompressed so that every file has the same size.
func writeFolderData(t *testing.T, root string, n int) {
	t.Helper()
	enc := imagepng.Encoder{CompressionLevel: imagepng.NoCompression}
	for c, class := range []string{"airplane", "automobile"} {
		os.MkdirAll(filepath.Join(root, class), 0o755)
		for i := range n {
			img := image.NewNRGBA(image.Rect(0, 0, 32, 32))
			for p := range img.Pix {
				img.Pix[p] = uint8(p*(7+c) + i*31)
			}
			f, err := os.Create(filepath.Join(root, class, fmt.Sprintf("%03d.png", i)))
			if err != nil {
				t.Fatal(err)
			}
			if err := enc.Encode(f, img); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
}

// TestDataIdentifiedByContent: images swapped between two classes of a
// folder (same names, same sizes) make other data, and the folder's results
// are not resumed; the unchanged folder resumes, and its contents are
// hashed once (cached by path, size and modification time).
func TestDataIdentifiedByContent(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeFolderData(t, data, 6)
	a, b := filepath.Join(data, "airplane", "002.png"), filepath.Join(data, "automobile", "004.png")
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ba) != len(bb) || bytes.Equal(ba, bb) {
		t.Fatalf("test images of %d and %d bytes: want two different images of one size", len(ba), len(bb))
	}
	cfg := smallRun(t, filepath.Join(dir, "out"), "contrast")
	cfg.Data, cfg.Labels = data, writeLabels(t, "airplane", "automobile") // the folder's two classes
	mustRun(t, cfg)
	if sum := mustRun(t, cfg); sum.Resumed != 1 || sum.Computed != 0 {
		t.Fatalf("unchanged data: resumed %d, computed %d; want 1 and 0", sum.Resumed, sum.Computed)
	}

	os.WriteFile(a, bb, 0o644)
	os.WriteFile(b, ba, 0o644)
	_, err := Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "data was") {
		t.Fatalf("swapped images: %v; want a refusal naming the data", err)
	}
	t.Log(err)
	cache, err := os.ReadFile(filepath.Join(cfg.Out, fingerprintCacheFile))
	if err != nil || !bytes.Contains(cache, []byte("data/airplane ")) || !bytes.Contains(cache, []byte("data/automobile ")) {
		t.Fatalf("no fingerprint cache naming the image folders: %v", err)
	}
}

// TestLegacyDataFingerprint: a run.json of a build that identified a data
// folder by names and sizes resumes when they match, says so, and then
// records the data by content.
func TestLegacyDataFingerprint(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeFolderData(t, data, 3)
	cfg := smallRun(t, filepath.Join(dir, "out"), "contrast")
	cfg.Data, cfg.Labels = data, writeLabels(t, "airplane", "automobile") // the folder's two classes
	mustRun(t, cfg)
	runPath := filepath.Join(cfg.Out, RunFile)
	var rf runFile
	b, _ := os.ReadFile(runPath)
	if err := json.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	content := rf.Identity.Data
	legacy, err := namesFingerprint(data)
	if err != nil || legacy == content {
		t.Fatalf("names fingerprint %q (%v), content %q: want two different ones", legacy, err, content)
	}
	rf.Identity.Data = legacy
	b, _ = json.Marshal(rf)
	os.WriteFile(runPath, b, 0o644)
	rewriteRecords(t, cfg.Out, func(r *report.Record) { r.Run = "" }) // as that build wrote them

	var log strings.Builder
	sum, err := Run(context.Background(), cfg, Options{Log: &log})
	if err != nil || sum.Resumed != 1 || sum.Computed != 0 {
		t.Fatalf("legacy run.json: %v; resumed %v", err, sum)
	}
	if !strings.Contains(log.String(), "identified by an earlier build") {
		t.Errorf("log %q: want a line about the earlier build's fingerprint", log.String())
	}
	b, _ = os.ReadFile(runPath)
	if json.Unmarshal(b, &rf) != nil || rf.Identity.Data != content {
		t.Errorf("run.json now holds data %q, want %q", rf.Identity.Data, content)
	}
}

// TestRefusedRunLeavesNothing: a run refused before any result is written
// (here: frost on the fly with no overlays) removes the results folder it
// created, parents included, lock file and run.json with it; a folder that
// existed is left as it was.
func TestRefusedRunLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	cfg := smallRun(t, filepath.Join(dir, "new", "results"), "frost")
	_, err := Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "frost") {
		t.Fatalf("frost without overlays: %v; want a refusal naming frost", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(cfg.Out)
		t.Errorf("the refused run left %s behind (%v; holding %v)", filepath.Join(dir, "new"), err, entries)
	}

	cfg.Out = filepath.Join(dir, "existing")
	os.Mkdir(cfg.Out, 0o755)
	os.WriteFile(filepath.Join(cfg.Out, "notes.txt"), []byte("mine"), 0o644)
	if _, err := Run(context.Background(), cfg, Options{}); err == nil {
		t.Fatal("frost without overlays accepted")
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Out, "notes.txt")); err != nil || string(b) != "mine" {
		t.Errorf("the refused run changed an existing folder: %q, %v", b, err)
	}
}

// TestProgressPerMethod: a run's progress counts each method's images
// apart, and the methods still to come, for a time left per method.
func TestProgressPerMethod(t *testing.T) {
	p := Progress{Total: 170, planned: map[string]int{"a": 100, "b": 50, "c": 0, "d": 20}, order: []string{"a", "b", "c", "d"}}
	for _, step := range []struct {
		method            string
		n                 int
		restored          int // images a checkpoint of the method gives back before the step
		done, total, left int
	}{
		{"a", 10, 0, 10, 100, 2},
		{"a", 90, 0, 100, 100, 2},
		{"b", 5, 20, 5, 30, 1},
		{"b", 25, 0, 30, 30, 1},
		{"d", 20, 0, 20, 20, 0},
	} {
		p.Total -= step.restored
		p.advance(step.method, "x", step.n)
		if p.MethodDone != step.done || p.MethodTotal != step.total || p.MethodsLeft != step.left {
			t.Errorf("after %d of %s: method %d/%d, %d left; want %d/%d, %d", step.n, step.method,
				p.MethodDone, p.MethodTotal, p.MethodsLeft, step.done, step.total, step.left)
		}
	}
	if p.Done != 150 || p.Total != 150 {
		t.Errorf("done %d of %d, want 150 of 150", p.Done, p.Total)
	}
}

// TestHashCache: the data's hashes are cached by path, size and
// modification time, one entry per folder: contents changed under the same
// three are not read again (the cache's premise), and a new time or size
// makes the folder hashed again.
func TestHashCache(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeFolderData(t, data, 2)
	cachePath := filepath.Join(dir, fingerprintCacheFile)
	fp := func() string {
		c := loadHashCache(cachePath)
		s, err := fingerprint(data, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.save(); err != nil {
			t.Fatal(err)
		}
		if len(c.used) != 2 {
			t.Errorf("%d cache entries, want one per class folder", len(c.used))
		}
		return s
	}
	first := fp()
	if uncached, _ := fingerprint(data, nil); uncached != first {
		t.Errorf("cached %q, uncached %q", first, uncached)
	}
	p := filepath.Join(data, "airplane", "001.png")
	st, _ := os.Stat(p)
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 0xff
	os.WriteFile(p, b, 0o644)
	os.Chtimes(p, st.ModTime(), st.ModTime())
	if got := fp(); got != first {
		t.Errorf("same path, size and time: %q, want the cached %q", got, first)
	}
	os.Chtimes(p, st.ModTime().Add(time.Second), st.ModTime().Add(time.Second))
	if got := fp(); got == first {
		t.Errorf("a new modification time: %q, want the contents hashed again", got)
	}
}

// TestRecordCountsChecked: a record whose correct disagrees with its own
// accuracy, or with its domain's batches, is refused on resume, naming it.
func TestRecordCountsChecked(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	mustRun(t, cfg)
	path := filepath.Join(cfg.Out, ResultsFile)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*report.Record){
		"correct against accuracy": func(r *report.Record) { r.Correct = (r.Correct + 1) % (r.Samples + 1) },
		"correct and accuracy against the batches": func(r *report.Record) {
			r.Correct = (r.Correct + 1) % (r.Samples + 1)
			r.Accuracy = 100 * float64(r.Correct) / float64(r.Samples)
		},
		"correct beyond samples": func(r *report.Record) {
			r.Correct, r.Accuracy = r.Samples+1, 100*float64(r.Samples+1)/float64(r.Samples)
		},
	} {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		rewriteRecords(t, cfg.Out, edit)
		_, err := Run(context.Background(), cfg, Options{})
		if err == nil || !strings.Contains(err.Error(), "source on contrast/5") || !strings.Contains(err.Error(), "does not add up") {
			t.Errorf("%s: %v; want a refusal naming the record", name, err)
		}
	}
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if sum := mustRun(t, cfg); sum.Resumed != 1 {
		t.Errorf("the record as written: resumed %d; want 1", sum.Resumed)
	}
}

// TestIdentityDiffSaysNone: an input one run gave and the other did not
// (labels, a subset list: "" in the identity) reads "none", not an empty
// value ("labels was , now 7 files").
func TestIdentityDiffSaysNone(t *testing.T) {
	for _, tc := range []struct {
		a, b identity
		want string
	}{
		{identity{Limit: 8}, identity{Limit: 8, Labels: "7 files"}, "labels was none, now 7 files"},
		{identity{Labels: "7 files"}, identity{}, "labels was 7 files, now none"},
		{identity{SubsetList: "5000 lines"}, identity{Views: 4}, "subset_list was 5000 lines, now none; views was none, now 4"},
		{identity{Limit: 8}, identity{Limit: 4}, "limit was 8, now 4"},
		{identity{Labels: "7 files"}, identity{Labels: "7 files"}, ""},
	} {
		if got := identityDiff(tc.a, tc.b); got != tc.want {
			t.Errorf("identityDiff(%+v, %+v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}
