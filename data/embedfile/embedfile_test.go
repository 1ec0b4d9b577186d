package embedfile

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/subtta/subtta/data"
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
