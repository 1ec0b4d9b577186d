package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/embedfile"
)

// extractBuiltin writes the built-in images as files under dir
// (dir/test/<class>/<file>.jpg) and returns the archive's path too.
func extractBuiltin(t testing.TB, dir string) (archive string) {
	t.Helper()
	archive = filepath.Join(dir, "cifar10-test-2000.tar.gz")
	if err := os.WriteFile(archive, builtin.CIFARSubset(), 0o644); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(builtin.CIFARSubset()))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		b, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return archive
}

// smallFolder copies the first n built-in images of each class (after
// extractBuiltin(t, dir)) into class folders under dir/small, and returns
// that folder.
func smallFolder(t testing.TB, dir string, n int, classes ...string) string {
	t.Helper()
	folder := filepath.Join(dir, "small")
	for _, c := range classes {
		if err := os.MkdirAll(filepath.Join(folder, c), 0o755); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(filepath.Join(dir, "test", c))
		if err != nil || len(ents) < n {
			t.Fatalf("built-in class %s: %d images, want %d (%v)", c, len(ents), n, err)
		}
		for _, e := range ents[:n] {
			b, err := os.ReadFile(filepath.Join(dir, "test", c, e.Name()))
			if err == nil {
				err = os.WriteFile(filepath.Join(folder, c, e.Name()), b, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return folder
}

// readNPY reads a float32 .npy as bulk embedding writes it.
func readNPY(t *testing.T, p string) (rows, dim int, v []float32) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 10 || string(b[:8]) != "\x93NUMPY\x01\x00" {
		t.Fatalf("%s: not a .npy 1.0 file", p)
	}
	hl := int(binary.LittleEndian.Uint16(b[8:10]))
	hdr := string(b[10 : 10+hl])
	if !strings.Contains(hdr, "'descr': '<f4'") {
		t.Fatalf("%s: header %q", p, hdr)
	}
	shape := hdr[strings.Index(hdr, "(")+1 : strings.Index(hdr, ")")]
	parts := strings.Split(shape, ",")
	rows, dim = atoi(t, parts[0]), atoi(t, parts[1])
	raw := b[10+hl:]
	if len(raw) != 4*rows*dim {
		t.Fatalf("%s: %d data bytes for %d × %d", p, len(raw), rows, dim)
	}
	v = make([]float32, rows*dim)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return rows, dim, v
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &n); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

func readJSONL(t *testing.T, p string) []embedfile.Record {
	t.Helper()
	recs, err := embedfile.ReadRecords(p)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// embedOneByOne runs `subtta embed --image ...` (JSON) on files.
func embedOneByOne(t *testing.T, normalize bool, files ...string) [][]float64 {
	t.Helper()
	args := []string{"embed"}
	if normalize {
		args = append(args, "--normalize")
	}
	for _, f := range files {
		args = append(args, "--image", f)
	}
	var out, errb bytes.Buffer
	if st := run(args, &out, &errb); st != 0 {
		t.Fatalf("embed: status %d: %s", st, errb.String())
	}
	var res []struct{ Features []float64 }
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != len(files) {
		t.Fatalf("embed printed %d results: %v", len(res), err)
	}
	feats := make([][]float64, len(res))
	for i, r := range res {
		feats[i] = r.Features
	}
	return feats
}

// TestBulkEmbedEqualsOneByOne embeds the 2,000 built-in images in bulk,
// from the archive, and compares every row with `embed --image` given the
// same 64 images (the same batch): equal to the bit (max abs difference
// 0). Given one image at a time, the rows differ by float32 rounding in
// the batched GEMMs only (checked: max abs difference below 1e-5 of the
// row's largest entry). numpy, when installed, reads the same array.
func TestBulkEmbedEqualsOneByOne(t *testing.T) {
	dir := t.TempDir()
	archive := extractBuiltin(t, dir)
	out := filepath.Join(dir, "emb")
	var stdout, errb bytes.Buffer
	if st := run([]string{"embed", "--images", archive, "--out", out, "--batch-size", "64"}, &stdout, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	rows, dim, v := readNPY(t, filepath.Join(out, "images.npy"))
	recs := readJSONL(t, filepath.Join(out, "images.jsonl"))
	if rows != 2000 || len(recs) != rows {
		t.Fatalf("%d rows, %d records; want 2,000", rows, len(recs))
	}
	for i, r := range recs {
		if r.Label != strings.Split(r.Path, "/")[0] || r.Index != i || len(r.SHA256) != 32 {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	file := func(i int) string { return filepath.Join(dir, "test", filepath.FromSlash(recs[i].Path)) }
	var worst float64
	for lo := 0; lo < rows; lo += 64 {
		hi := min(lo+64, rows)
		var files []string
		for i := lo; i < hi; i++ {
			files = append(files, file(i))
		}
		for k, f := range embedOneByOne(t, false, files...) {
			for j, x := range f {
				worst = max(worst, math.Abs(float64(float32(x))-float64(v[(lo+k)*dim+j])))
			}
		}
	}
	if worst != 0 {
		t.Errorf("bulk and embed of the same batches differ by up to %g, want 0", worst)
	}
	// One image at a time: other batches, float32 rounding only.
	for _, i := range []int{0, 777, 1999} {
		f := embedOneByOne(t, false, file(i))[0]
		var big, diff float64
		for j, x := range f {
			big = max(big, math.Abs(x))
			diff = max(diff, math.Abs(x-float64(v[i*dim+j])))
		}
		if diff > 1e-5*big {
			t.Errorf("image %d alone differs by %g (largest entry %g)", i, diff, big)
		}
	}
	checkNumpy(t, filepath.Join(out, "images.npy"), v)
}

// checkNumpy loads p with numpy.load and compares it with v bit for bit.
// It skips without a python3 that has numpy (apt-get install
// python3-numpy), and fails for want of it under CI.
func checkNumpy(t *testing.T, p string, v []float32) {
	t.Helper()
	var python string
	for _, c := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(c, "-c", "import numpy").Run() == nil {
			python = c
			break
		}
	}
	if python == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no python3 with numpy (apt-get install python3-numpy)")
		}
		t.Skip("no python3 with numpy (apt-get install python3-numpy): the .npy is not read by numpy")
	}
	raw := filepath.Join(t.TempDir(), "raw")
	script := `import sys, numpy
a = numpy.load(sys.argv[1])
assert a.dtype == numpy.float32 and a.ndim == 2, (a.dtype, a.shape)
open(sys.argv[2], "wb").write(a.astype("<f4").tobytes())
print(a.shape[0], a.shape[1])`
	out, err := exec.Command(python, "-c", script, p, raw).CombinedOutput()
	if err != nil {
		t.Fatalf("numpy.load: %v: %s", err, out)
	}
	b, err := os.ReadFile(raw)
	if err != nil || len(b) != 4*len(v) {
		t.Fatalf("numpy gave %d bytes (%v), want %d (shape %s)", len(b), err, 4*len(v), out)
	}
	for i := range v {
		if math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) != v[i] {
			t.Fatalf("numpy reads element %d as another value", i)
		}
	}
}

// TestBulkEmbedResumes: an output cut short (as by a kill) resumes to
// the same bytes; a folder made from other images, or otherwise, is
// refused. A list file with labels, --normalize and --texts work too.
func TestBulkEmbedResumes(t *testing.T) {
	dir := t.TempDir()
	extractBuiltin(t, dir)
	var list strings.Builder
	for _, c := range []string{"cat", "dog", "ship"} {
		ents, _ := os.ReadDir(filepath.Join(dir, "test", c))
		for _, e := range ents[:7] {
			list.WriteString("test/" + c + "/" + e.Name() + "\t" + c + "\n")
		}
	}
	listFile := filepath.Join(dir, "list.txt")
	os.WriteFile(listFile, []byte(list.String()), 0o644)
	texts := filepath.Join(dir, "texts.txt")
	os.WriteFile(texts, []byte("a photo of a cat.\na photo of a dog.\n\na ship\n"), 0o644)
	embed := func(out string, extra ...string) (int, string) {
		var stdout, errb bytes.Buffer
		st := run(append([]string{"embed", "--images", listFile, "--texts", texts, "--out", out, "--batch-size", "4", "--normalize"}, extra...), &stdout, &errb)
		return st, errb.String()
	}
	full := filepath.Join(dir, "full")
	if st, msg := embed(full); st != 0 {
		t.Fatalf("status %d: %s", st, msg)
	}
	recs := readJSONL(t, filepath.Join(full, "images.jsonl"))
	if len(recs) != 21 || recs[7].Label != "dog" || recs[7].Path != strings.Split(strings.Split(list.String(), "\n")[7], "\t")[0] {
		t.Fatalf("records: %d, [7] %+v", len(recs), recs[7])
	}
	_, dim, v := readNPY(t, filepath.Join(full, "images.npy"))
	// --normalize: the rows of embed --normalize, to the float32.
	var files []string
	for _, r := range recs[:4] {
		files = append(files, filepath.Join(dir, filepath.FromSlash(r.Path)))
	}
	for k, f := range embedOneByOne(t, true, files...) {
		for j, x := range f {
			if float32(x) != v[k*dim+j] {
				t.Fatalf("row %d differs from embed --normalize", k)
			}
		}
	}
	if trecs := readJSONL(t, filepath.Join(full, "texts.jsonl")); len(trecs) != 3 || trecs[2].Text != "a ship" {
		t.Errorf("text records %+v", trecs)
	}

	// Cut short after 10 rows of images (whole batches: 8 are kept).
	cut := filepath.Join(dir, "cut")
	os.MkdirAll(cut, 0o755)
	for _, name := range []string{"images.json", "texts.json", "texts.npy", "texts.jsonl"} {
		b, _ := os.ReadFile(filepath.Join(full, name))
		os.WriteFile(filepath.Join(cut, name), b, 0o644)
	}
	npy, _ := os.ReadFile(filepath.Join(full, "images.npy"))
	h, _ := data.NPYHeader("<f4", []int{21, dim})
	hdr := len(h)
	os.WriteFile(filepath.Join(cut, "images.npy.part"), npy[:hdr+10*4*dim+7], 0o644)
	jl, _ := os.ReadFile(filepath.Join(full, "images.jsonl"))
	lines := strings.SplitAfter(string(jl), "\n")
	os.WriteFile(filepath.Join(cut, "images.jsonl.part"), []byte(strings.Join(lines[:10], "")+lines[10][:5]), 0o644)
	if st, msg := embed(cut); st != 0 {
		t.Fatalf("resume: status %d: %s", st, msg)
	}
	for _, name := range []string{"images.npy", "images.jsonl"} {
		a, _ := os.ReadFile(filepath.Join(full, name))
		b, _ := os.ReadFile(filepath.Join(cut, name))
		if !bytes.Equal(a, b) {
			t.Errorf("resumed %s differs from the uninterrupted one", name)
		}
	}

	// Other settings, or other images, are refused.
	if st, msg := embed(full, "--batch-size", "5"); st != 1 || !strings.Contains(msg, "was made otherwise") {
		t.Errorf("other batch size: status %d, %q", st, msg)
	}
	// Another precision is another model: int8 rows never join fp32 ones.
	if kernel.CheckPrecision(kernel.Int8) == nil {
		if st, msg := embed(full, "--precision", "int8"); st != 1 || !strings.Contains(msg, "images.json was made otherwise") || !strings.Contains(msg, `"precision":"int8`) {
			t.Errorf("other precision: status %d, %q", st, msg)
		}
	}
	// An image changed in place (same path, other pixels): refused, naming
	// the lowest such row.
	rows := strings.Split(list.String(), "\n")
	for _, k := range []int{12, 5} {
		p := filepath.Join(dir, filepath.FromSlash(strings.Split(rows[k], "\t")[0]))
		other, _ := os.ReadFile(filepath.Join(dir, "test", "ship", firstFile(t, dir, "ship", 10+k)))
		os.WriteFile(p, other, 0o644)
	}
	if st, msg := embed(full); st != 1 || !strings.Contains(msg, "row 5 was ") || !strings.Contains(msg, "sha256") {
		t.Errorf("an image changed in place: status %d, %q", st, msg)
	}
	first := strings.Split(list.String(), "\t")[0]
	os.WriteFile(listFile, []byte(strings.Replace(list.String(), first, "test/ship/"+firstFile(t, dir, "ship", 10), 1)), 0o644)
	if st, msg := embed(full); st != 1 || !strings.Contains(msg, "row 0 was "+first) {
		t.Errorf("other images: status %d, %q", st, msg)
	}
}

func firstFile(t *testing.T, dir, class string, i int) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "test", class))
	if err != nil {
		t.Fatal(err)
	}
	return ents[i].Name()
}

// TestBulkClassify: classify --images writes a CSV and JSONL with the
// probabilities classify gives for the same batch, and the label of each
// image's folder.
func TestBulkClassify(t *testing.T) {
	dir := t.TempDir()
	extractBuiltin(t, dir)
	folder := smallFolder(t, dir, 12, "bird", "frog", "truck")
	jsonl := filepath.Join(dir, "out", "cls.jsonl")
	var stdout, errb bytes.Buffer
	if st := run([]string{"classify", "--images", folder, "--out", jsonl, "--batch-size", "16"}, &stdout, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	csvPath := filepath.Join(dir, "cls.csv")
	if st := run([]string{"classify", "--images", folder, "--out", csvPath, "--batch-size", "16"}, &stdout, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	csv, _ := os.ReadFile(csvPath)
	csvLines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	if len(csvLines) != 37 || !strings.HasPrefix(csvLines[0], "path,label,prediction,probability,airplane,automobile,") {
		t.Fatalf("CSV: %d lines, header %q", len(csvLines), csvLines[0])
	}
	b, _ := os.ReadFile(jsonl)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	type row struct {
		Path, Label, Prediction string
		Probability             float64
		Probs                   []struct {
			Label string
			Prob  float64
		}
	}
	var got []row
	for _, l := range lines[:16] {
		var r row
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	args := []string{"classify", "--json"}
	for _, r := range got {
		args = append(args, r.Path)
	}
	stdout.Reset()
	if st := run(args, &stdout, &errb); st != 0 {
		t.Fatalf("classify: status %d: %s", st, errb.String())
	}
	var want []struct {
		Probs []struct {
			Label string
			Prob  float64
		}
	}
	json.Unmarshal(stdout.Bytes(), &want)
	for i, r := range got {
		if r.Label != filepath.Base(filepath.Dir(r.Path)) {
			t.Errorf("%s: label %q", r.Path, r.Label)
		}
		for j, p := range r.Probs {
			if p != want[i].Probs[j] {
				t.Fatalf("%s: %+v, classify gives %+v", r.Path, p, want[i].Probs[j])
			}
		}
	}
	if !strings.HasPrefix(csvLines[1], got[0].Path+","+got[0].Label+","+got[0].Prediction+",") {
		t.Errorf("CSV row %q, JSONL %+v", csvLines[1], got[0])
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"classify", "--images", folder}, "--images needs --out"},
		{[]string{"classify", "--images", folder, "--out", "x.txt"}, "want a .csv or .jsonl file"},
		{[]string{"classify", "--images", folder, "--out", "x.csv", "a.png"}, "not both"},
		{[]string{"embed", "--images", folder}, "--images or --texts needs --out"},
		{[]string{"embed", "--images", folder, "--out", "o", "--image", "a.png"}, "not both"},
		{[]string{"embed", "--images", filepath.Join(dir, "nope"), "--out", "o"}, "nope"},
		{[]string{"embed", "--texts", "t", "--out", "o", "--batch-size", "0"}, "--batch-size 0"},
	} {
		errb.Reset()
		if st := run(tc.args, &stdout, &errb); st != 2 || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("%q: status %d, %q; want 2 and %q", tc.args, st, errb.String(), tc.msg)
		}
	}
}

// TestBulkClassifyResumes: classify --images stopped by an error in its
// second batch keeps the first batch's rows (OUT.part, OUT.part.json); the
// same command resumes after them, dropping bytes written but not
// recorded, and writes the file an uninterrupted run writes, byte for
// byte; other settings are refused while the .part is there.
func TestBulkClassifyResumes(t *testing.T) {
	dir := t.TempDir()
	extractBuiltin(t, dir)
	folder := smallFolder(t, dir, 12, "cat", "ship")
	const batch = 8
	classify := func(out string, extra ...string) (int, string) {
		var stdout, errb bytes.Buffer
		args := append([]string{"classify", "--images", folder, "--out", out, "--batch-size", strconv.Itoa(batch)}, extra...)
		st := run(args, &stdout, &errb)
		return st, errb.String()
	}
	ref := filepath.Join(dir, "ref.csv")
	if st, msg := classify(ref); st != 0 {
		t.Fatalf("status %d: %s", st, msg)
	}
	want, _ := os.ReadFile(ref)
	for _, left := range []string{ref + ".part", ref + ".part.json"} {
		if _, err := os.Stat(left); err == nil {
			t.Errorf("%s left after a complete run", left)
		}
	}
	rows := strings.Split(strings.TrimSpace(string(want)), "\n")[1:]
	if len(rows) != 24 {
		t.Fatalf("%d rows, want 24", len(rows))
	}
	// The 12th image (in the second batch) made unreadable.
	victim := filepath.Join(folder, filepath.FromSlash(strings.Split(rows[11], ",")[0]))
	if _, err := os.Stat(victim); err != nil {
		victim = strings.Split(rows[11], ",")[0]
	}
	good, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.csv")
	if st, msg := classify(out); st == 0 || !strings.Contains(msg, filepath.Base(victim)) {
		t.Fatalf("an unreadable image: status %d, %q", st, msg)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("out.csv written by a run that failed")
	}
	var prog classifyProgress
	b, err := os.ReadFile(out + ".part.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &prog); err != nil || prog.Rows != batch {
		t.Fatalf("progress %+v (%v), want %d rows", prog, err, batch)
	}
	// Bytes past the recorded batch, as a kill during a write leaves.
	f, err := os.OpenFile(out+".part", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("small/cat/torn.png,cat,ca")
	f.Close()
	os.WriteFile(victim, good, 0o644)
	if st, msg := classify(out, "--labels", "cat,ship"); st != 1 || !strings.Contains(msg, "other settings") {
		t.Errorf("other labels over the .part: status %d, %q", st, msg)
	}
	st, msg := classify(out)
	if st != 0 || !strings.Contains(msg, fmt.Sprintf("after %d of 24 images", batch)) {
		t.Fatalf("resume: status %d, %q", st, msg)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Errorf("resumed file differs from the uninterrupted one:\n%s\nwant\n%s", got, want)
	}
	if _, err := os.Stat(out + ".part.json"); err == nil {
		t.Error(".part.json left after the resumed run completed")
	}
}
