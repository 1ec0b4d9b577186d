package embedfile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/dirlock"
)

// TestResume writes two of three batches, stops, cuts the last record
// short, and resumes: the finished .npy holds the header NumPy writes and
// every row once, the .jsonl every record once; other settings are refused.
func TestResume(t *testing.T) {
	dir := t.TempDir()
	s := Settings{Model: "m", Normalize: true, BatchSize: 2, Rows: 5, Dim: 3}
	row := func(i int) []float64 { return []float64{float64(i), float64(i) + 0.5, -float64(i)} }
	rec := func(i int) Record { return Record{Index: i, Text: "t", SHA256: "x"} }
	f, err := Open(dir, "texts", s)
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < 4; lo += 2 {
		if err := f.Append([][]float64{row(lo), row(lo + 1)}, []Record{rec(lo), rec(lo + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	// A third batch begun: one row of .npy and half a line of .jsonl more.
	npy, _ := os.OpenFile(f.Path(".npy.part"), os.O_WRONLY|os.O_APPEND, 0)
	npy.Write(make([]byte, 12))
	npy.Close()
	jl, _ := os.OpenFile(f.Path(".jsonl.part"), os.O_WRONLY|os.O_APPEND, 0)
	jl.Write([]byte(`{"index":4,"te`))
	jl.Close()

	if _, err := Open(dir, "texts", Settings{Model: "other", BatchSize: 2, Rows: 5, Dim: 3}); !errors.Is(err, ErrMadeOtherwise) {
		t.Fatalf("other settings: err = %v, want ErrMadeOtherwise", err)
	}
	f, err = Open(dir, "texts", s)
	if err != nil {
		t.Fatal(err)
	}
	if f.Done() != 4 || len(f.Written()) != 4 || f.Complete() {
		t.Fatalf("resumed at %d rows (%d records, complete %v), want 4", f.Done(), len(f.Written()), f.Complete())
	}
	if err := f.Append([][]float64{row(4)}, []Record{rec(4)}); err != nil {
		t.Fatal(err)
	}
	if err := f.Finish(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.Path(".npy"))
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := data.NPYHeader("<f4", []int{5, 3})
	if len(hdr)%64 != 0 || string(b[:len(hdr)]) != string(hdr) || len(b) != len(hdr)+5*3*4 {
		t.Fatalf(".npy of %d bytes, header %q", len(b), b[:min(len(b), len(hdr))])
	}
	for i := range 5 {
		for j, want := range row(i) {
			off := len(hdr) + 4*(3*i+j)
			if got := math.Float32frombits(binary.LittleEndian.Uint32(b[off:])); got != float32(want) {
				t.Errorf("row %d col %d = %v, want %v", i, j, got, want)
			}
		}
	}
	recs, err := ReadRecords(f.Path(".jsonl"))
	if err != nil || len(recs) != 5 {
		t.Fatalf("%d records (%v), want 5", len(recs), err)
	}
	again, err := Open(dir, "texts", s)
	if err != nil || !again.Complete() || again.Done() != 5 {
		t.Fatalf("a finished output reopens complete: %v, %+v", err, again)
	}
}

// TestResumeUnreadableRecords: where the records of an interrupted run
// cannot be read (here .jsonl.part is a folder), Open says so and leaves
// the rows already written in .npy.part as they were, rather than read
// no records and cut every row.
func TestResumeUnreadableRecords(t *testing.T) {
	dir := t.TempDir()
	s := Settings{Model: "m", BatchSize: 2, Rows: 6, Dim: 3}
	f, err := Open(dir, "texts", s)
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]float64{{1, 2, 3}, {4, 5, 6}}
	if err := f.Append(rows, []Record{{Index: 0, Text: "a"}, {Index: 1, Text: "b"}}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, err := os.ReadFile(f.Path(".npy.part"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.Path(".jsonl.part")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.Path(".jsonl.part"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "texts", s); err == nil {
		t.Fatal("resumed with records that cannot be read")
	}
	if after, _ := os.ReadFile(f.Path(".npy.part")); string(after) != string(before) {
		t.Errorf(".npy.part holds %d bytes after the failed resume, %d before", len(after), len(before))
	}
}

// TestSecondOpenRefused: while one File holds an output folder (writing
// it, or complete and not yet closed), a second Open of it is refused,
// naming the folder and saying another run writes it, and leaves the
// first's .part files as they were; once the first is closed or finished,
// the folder opens again.
func TestSecondOpenRefused(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no advisory locks on this system")
	}
	dir := t.TempDir()
	s := Settings{Model: "m", BatchSize: 2, Rows: 4, Dim: 3}
	first, err := Open(dir, "texts", s)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Append([][]float64{{1, 2, 3}, {4, 5, 6}}, []Record{{Index: 0, Text: "a"}, {Index: 1, Text: "b"}}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(first.Path(".jsonl.part"))
	for _, name := range []string{"texts", "images"} { // one lock for the folder
		_, err := Open(dir, name, s)
		if !errors.Is(err, dirlock.ErrLocked) || !strings.Contains(err.Error(), dir+" is in use by process") || !strings.Contains(err.Error(), "another run is writing this output") {
			t.Fatalf("second Open of %s: %v; want dirlock.ErrLocked naming %s and another run", name, err, dir)
		}
	}
	if after, _ := os.ReadFile(first.Path(".jsonl.part")); !bytes.Equal(after, before) {
		t.Errorf(".jsonl.part after the refused Open: %q, before %q", after, before)
	}
	if err := first.Append([][]float64{{7, 8, 9}, {1, 1, 1}}, []Record{{Index: 2, Text: "c"}, {Index: 3, Text: "d"}}); err != nil {
		t.Fatal(err)
	}
	if err := first.Finish(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(dir, "texts", s)
	if err != nil || !again.Complete() {
		t.Fatalf("after Finish: %v", err)
	}
	if _, err := Open(dir, "texts", s); !errors.Is(err, dirlock.ErrLocked) {
		t.Fatalf("a complete output open twice: %v, want dirlock.ErrLocked", err)
	}
	again.Close()
	third, err := Open(dir, "texts", s)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	third.Close()
}

// TestBatchAboveRows: a batch size above the number of rows is the batch
// of every row: recorded as the number of rows, and an output recorded
// with any batch size at or above it (as Open recorded the size given
// before) opens with any other.
func TestBatchAboveRows(t *testing.T) {
	for _, tc := range []struct {
		recorded, given, rows int
		ok                    bool
	}{
		{recorded: 100000000, given: 64, rows: 3, ok: true},
		{recorded: 64, given: 3, rows: 3, ok: true},
		{recorded: 3, given: 1 << 62, rows: 3, ok: true},
		{recorded: 64, given: 2, rows: 3, ok: false},
		{recorded: 2, given: 64, rows: 3, ok: false},
	} {
		dir := t.TempDir()
		old := Settings{Model: "m", BatchSize: tc.recorded, Rows: tc.rows, Dim: 2}
		b, _ := json.Marshal(old) // as recorded before, the size given
		if err := os.WriteFile(filepath.Join(dir, "texts.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		s := old
		s.BatchSize = tc.given
		f, err := Open(dir, "texts", s)
		if (err == nil) != tc.ok {
			t.Errorf("recorded %d, given %d, %d rows: err %v, want ok %v", tc.recorded, tc.given, tc.rows, err, tc.ok)
		}
		if err != nil {
			continue
		}
		if got := f.Settings().BatchSize; got != min(tc.given, tc.rows) {
			t.Errorf("given %d for %d rows: batch size %d", tc.given, tc.rows, got)
		}
		f.Close()
	}
	dir := t.TempDir()
	f, err := Open(dir, "texts", Settings{Model: "m", BatchSize: 100000000, Rows: 3, Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	var rec Settings
	if b, err := os.ReadFile(f.Path(".json")); err != nil || json.Unmarshal(b, &rec) != nil || rec.BatchSize != 3 {
		t.Errorf("recorded %+v (%v), want batch size 3", rec, err)
	}
}

// TestCompleteOutputDamaged: a complete .npy whose .jsonl holds fewer
// whole records than rows is refused with a message that says so, with
// no error value of nil in it.
func TestCompleteOutputDamaged(t *testing.T) {
	dir := t.TempDir()
	s := Settings{Model: "m", BatchSize: 2, Rows: 2, Dim: 1}
	f, err := Open(dir, "texts", s)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Append([][]float64{{1}, {2}}, []Record{{Index: 0, Text: "a"}, {Index: 1, Text: "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Finish(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f.Path(".jsonl"))
	os.WriteFile(f.Path(".jsonl"), b[:len(b)/2+3], 0o644)
	_, err = Open(dir, "texts", s)
	if err == nil || strings.Contains(err.Error(), "nil") || !strings.Contains(err.Error(), "1 whole records in order for the 2 rows") {
		t.Errorf("damaged output: %v", err)
	}
}
