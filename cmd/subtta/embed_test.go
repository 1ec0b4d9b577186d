package main

import (
	"bytes"
	"encoding/json"
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

// TestEmbedTextRows: a text's row always carries its "text" key, the
// empty text's too, so that it is never taken for an image's row; and
// --texts counts its progress in texts a second, not images.
func TestEmbedTextRows(t *testing.T) {
	var out, errb bytes.Buffer
	if st := run([]string{"embed", "--text", "", "--text", "a cat"}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	var rows []map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	for i, want := range []string{`""`, `"a cat"`} {
		if got, ok := rows[i]["text"]; !ok || string(got) != want {
			t.Errorf("row %d: text %s (present %v), want %s", i, got, ok, want)
		}
		if _, ok := rows[i]["image"]; ok {
			t.Errorf("row %d of a text has an image key", i)
		}
	}

	dir := t.TempDir()
	list := filepath.Join(dir, "texts.txt")
	if err := os.WriteFile(list, []byte("a cat\na dog\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if st := run([]string{"embed", "--texts", list, "--out", filepath.Join(dir, "emb")}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	if !strings.Contains(errb.String(), "embedding texts") || !strings.Contains(errb.String(), " texts/s") || strings.Contains(errb.String(), "img/s") {
		t.Errorf("progress of --texts: %q; want texts/s", errb.String())
	}
}
