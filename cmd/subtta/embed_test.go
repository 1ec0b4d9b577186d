package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/weights"
)

// TestEmbedTextCut: a text longer than the context is cut, as CLIP
// truncates, and embed says so (as tokenize and classify do); one that
// fits is not named.
func TestEmbedTextCut(t *testing.T) {
	long := strings.Repeat("word ", 200)
	var out, errb bytes.Buffer
	if st := run([]string{"embed", "--text", long, "--text", "a cat"}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	if n := strings.Count(errb.String(), "it is cut"); n != 1 {
		t.Errorf("%d warnings of a cut text, want 1: %s", n, errb.String())
	}
}

// TestEmbedTextsBlankLines: --texts skips blank lines and says so, and the
// rows are the non-blank lines in order, as texts.jsonl records them.
func TestEmbedTextsBlankLines(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "texts.txt")
	if err := os.WriteFile(list, []byte("a cat\n\n  \na dog\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "emb")
	var stdout, errb bytes.Buffer
	if st := run([]string{"embed", "--texts", list, "--out", out}, &stdout, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	if !strings.Contains(errb.String(), "2 blank lines skipped") {
		t.Errorf("stderr %q: no note of the 2 blank lines", errb.String())
	}
	recs := readJSONL(t, filepath.Join(out, "texts.jsonl"))
	if len(recs) != 2 || recs[0].Text != "a cat" || recs[1].Text != "a dog" {
		t.Errorf("records %+v, want the rows of %q and %q", recs, "a cat", "a dog")
	}
}

// TestProgressPrinterLog: where stderr is not a terminal, download progress
// is whole lines (no carriage returns piling up in a log), the first and
// the last always, those between at most every progressLogInterval.
func TestProgressPrinterLog(t *testing.T) {
	var buf bytes.Buffer
	p := progressPrinter(&buf)
	p(weights.Progress{File: "a.bin", Done: 1, Total: 100})
	for i := int64(2); i < 100; i++ {
		p(weights.Progress{File: "a.bin", Done: i, Total: 100})
	}
	p(weights.Progress{File: "a.bin", Done: 100, Total: 100})
	p(weights.Progress{File: "b.bin", Skipped: true})
	got := buf.String()
	if strings.Contains(got, "\r") {
		t.Errorf("carriage returns in a log: %q", got)
	}
	want := "a.bin:   1.0% of 100 B\na.bin: 100.0% of 100 B\nb.bin: cached\n"
	if got != want {
		t.Errorf("progress %q, want %q", got, want)
	}
}
