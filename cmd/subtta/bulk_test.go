package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/embedfile"
	"github.com/subtta/subtta/internal/dirlock"
)

// extractBuiltin writes the built-in images as files under dir
// (dir/test/<class>/<file>.jpg) and returns the archive's path too.
func extractBuiltin(t testing.TB, dir string) (archive string) {
	t.Helper()
	archive = filepath.Join(dir, "cifar10-test-2000.tar.gz")
	if err := os.WriteFile(archive, builtin.CIFARSubset(), 0o644); err != nil {
		t.Fatal(err)
	}
	names, files := archiveFiles(t, archive)
	for i, name := range names {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, files[i], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return archive
}

// archiveFiles returns the member paths and contents of the images of the
// .tar[.gz] at path, in archive order (data.OpenImageArchive).
func archiveFiles(t testing.TB, path string) (names []string, files [][]byte) {
	t.Helper()
	a, err := data.OpenImageArchive(path, data.ArchiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range a.Len() {
		b, err := a.Read(i)
		if err != nil {
			t.Fatal(err)
		}
		names, files = append(names, a.Name(i)), append(files, b)
	}
	return names, files
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
	// Paths are the archive's members (test/<class>/<file>), labelled by
	// the folders in test/, which wraps them.
	for i, r := range recs {
		if parts := strings.Split(r.Path, "/"); len(parts) != 3 || parts[0] != "test" || r.Label != parts[1] || r.Index != i || len(r.SHA256) != 32 {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if !strings.Contains(errb.String(), "every image is under test/ in the archive: the labels are the folders in it") {
		t.Errorf("no note of the labels taken under test/: %s", errb.String())
	}
	file := func(i int) string { return filepath.Join(dir, filepath.FromSlash(recs[i].Path)) }
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

// writeTar writes the files (member path → bytes) as a .tar, or gzipped
// when the name ends in .gz, in the order of names.
func writeTar(t *testing.T, p string, names []string, files map[string][]byte) {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if strings.HasSuffix(p, ".gz") {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, n := range names {
		b := files[n]
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBulkFolderEqualsArchive: the same images as a folder and as an
// archive of what is in it (the folder it extracts to, as a .tar and a
// .tar.gz) give the same rows, in the same order, with the same labels,
// by one rule: the labels are the folders under the deepest folder that
// holds every image (its parent when they all lie directly in it), and
// an image directly in that root is kept with an empty label. The paths
// are the folder's files as found and the archive's whole member paths.
// An archive of the folder itself (its name wrapping every member, as
// `tar czf x.tar.gz x` makes) reads the same but where every image lies
// directly in the folder: that folder is then their class. Wrapping
// folders, unlabelled images among labelled ones and skipped files are
// said on stderr.
func TestBulkFolderEqualsArchive(t *testing.T) {
	dir := t.TempDir()
	jpegs, err := builtin.JPEGs(4)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		rels    []string // the images, relative to the folder
		labels  []string // of rels, from the folder and an archive of what is in it
		wrapped []string // from an archive of the folder itself; nil: labels
		notes   []string // on stderr, from the folder (SRC: the source)
	}{
		{name: "wrapped", rels: []string{"test/cat/a.jpg", "test/cat/b.jpg", "test/dog/c.jpg"},
			labels: []string{"cat", "cat", "dog"}, notes: []string{"every image is under"}},
		{name: "mixed", rels: []string{"cat/a.jpg", "cat/b.jpg", "dog/c.jpg", "top.jpg"},
			labels: []string{"cat", "cat", "dog", ""}, notes: []string{"1 image directly in", "kept, with an empty label"}},
		{name: "nested", rels: []string{"cat/x/a.jpg", "cat/y/b.jpg", "dog/c.jpg"},
			labels: []string{"cat", "cat", "dog"}},
		{name: "one class", rels: []string{"cat/a.jpg", "cat/b.jpg"},
			labels: []string{"cat", "cat"}},
		{name: "flat", rels: []string{"a.jpg", "b.jpg"},
			labels: []string{"", ""}, wrapped: []string{"flat", "flat"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := strings.ReplaceAll(tc.name, " ", "-")
			folder := filepath.Join(dir, base)
			files := map[string][]byte{}
			wrappedFiles := map[string][]byte{}
			var wrappedNames []string
			for i, rel := range tc.rels {
				p := filepath.Join(folder, filepath.FromSlash(rel))
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, jpegs[i%len(jpegs)], 0o644); err != nil {
					t.Fatal(err)
				}
				files[rel] = jpegs[i%len(jpegs)]
				wrappedFiles[base+"/"+rel] = jpegs[i%len(jpegs)]
				wrappedNames = append(wrappedNames, base+"/"+rel)
			}
			// Not images: skipped, and said.
			os.WriteFile(filepath.Join(folder, "README.txt"), []byte("x"), 0o644)
			files["README.txt"] = []byte("x")
			// The archives list their members out of order.
			names := slices.Clone(tc.rels)
			slices.Reverse(names)
			names = append(names, "README.txt")
			tarPath, tgzPath, wrapPath := filepath.Join(dir, base+".tar"), filepath.Join(dir, base+".tar.gz"), filepath.Join(dir, base+"-wrapped.tar.gz")
			writeTar(t, tarPath, names, files)
			writeTar(t, tgzPath, names, files)
			writeTar(t, wrapPath, wrappedNames, wrappedFiles)
			wrapped := tc.wrapped
			if wrapped == nil {
				wrapped = tc.labels
			}
			for _, src := range []struct {
				path   string
				paths  []string
				labels []string
			}{
				{folder, nil, tc.labels},
				{tarPath, tc.rels, tc.labels},
				{tgzPath, tc.rels, tc.labels},
				{wrapPath, wrappedNames, wrapped},
			} {
				if src.paths == nil {
					for _, rel := range tc.rels {
						src.paths = append(src.paths, filepath.Join(folder, filepath.FromSlash(rel)))
					}
				}
				out := filepath.Join(t.TempDir(), "emb")
				var stdout, errb bytes.Buffer
				if st := run([]string{"embed", "--images", src.path, "--out", out}, &stdout, &errb); st != 0 {
					t.Fatalf("%s: status %d: %s", src.path, st, errb.String())
				}
				recs := readJSONL(t, filepath.Join(out, "images.jsonl"))
				var paths, labels []string
				for _, r := range recs {
					paths, labels = append(paths, r.Path), append(labels, r.Label)
				}
				if !slices.Equal(paths, src.paths) || !slices.Equal(labels, src.labels) {
					t.Errorf("%s: rows %q labelled %q; want %q labelled %q", src.path, paths, labels, src.paths, src.labels)
				}
				msg := errb.String()
				if src.path != wrapPath && !strings.Contains(msg, "skipped 1 file not an image") {
					t.Errorf("%s: no note of README.txt skipped: %s", src.path, msg)
				}
				for _, n := range tc.notes {
					if !strings.Contains(msg, "note: --images "+src.path+": ") || !strings.Contains(msg, n) {
						t.Errorf("%s: no note %q: %s", src.path, n, msg)
					}
				}
				if tc.notes == nil && src.path != wrapPath && strings.Count(msg, "note: ") != 1 {
					t.Errorf("%s: notes other than the skipped file's: %s", src.path, msg)
				}
			}
		})
	}
}

// TestBulkSecondRunRefused: while a run writes an output (here its lock
// held in this process, as the first run holds it), a second classify or
// embed with the same --out is refused at once, naming the output and
// saying another run writes it, and writes nothing there.
func TestBulkSecondRunRefused(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no advisory locks on this system")
	}
	dir := t.TempDir()
	extractBuiltin(t, dir)
	folder := smallFolder(t, dir, 2, "cat", "dog")

	csvOut := filepath.Join(dir, "x.csv")
	lock, err := dirlock.AcquireFile(csvOut+".part.lock", csvOut)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, errb bytes.Buffer
	st := run([]string{"classify", "--images", folder, "--out", csvOut}, &stdout, &errb)
	want := fmt.Sprintf("subtta classify: %s is in use by process %d (lock file %s.part.lock): another run is writing it", csvOut, os.Getpid(), csvOut)
	if st != 1 || !strings.HasPrefix(errb.String(), want) {
		t.Errorf("classify: status %d, %q; want 1 and %q", st, errb.String(), want)
	}
	for _, p := range []string{csvOut, csvOut + ".part", csvOut + ".part.json"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s written by the refused run", p)
		}
	}
	lock.Unlock()

	embOut := filepath.Join(dir, "emb")
	first, err := embedfile.Open(embOut, "texts", embedfile.Settings{Model: "m", BatchSize: 1, Rows: 1, Dim: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	errb.Reset()
	st = run([]string{"embed", "--images", folder, "--out", embOut}, &stdout, &errb)
	want = fmt.Sprintf("subtta embed: %s is in use by process %d (lock file %s): another run is writing this output", embOut, os.Getpid(), filepath.Join(embOut, ".lock"))
	if st != 1 || !strings.HasPrefix(errb.String(), want) {
		t.Errorf("embed: status %d, %q; want 1 and %q", st, errb.String(), want)
	}
	if _, err := os.Stat(filepath.Join(embOut, "images.json")); err == nil {
		t.Error("images.json written by the refused run")
	}
}

// TestBulkOutOfTheWrongKind: an --out of the other kind already there
// (a folder for classify's file, a file for embed's folder) is refused
// before anything is computed, by name, with the usage status.
func TestBulkOutOfTheWrongKind(t *testing.T) {
	dir := t.TempDir()
	extractBuiltin(t, dir)
	folder := smallFolder(t, dir, 1, "cat")
	aFolder := filepath.Join(dir, "d.csv")
	aFile := filepath.Join(dir, "f")
	os.Mkdir(aFolder, 0o755)
	os.WriteFile(aFile, nil, 0o644)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"classify", "--images", folder, "--out", aFolder}, "--out " + aFolder + " is a folder: give a .csv or .jsonl file"},
		{[]string{"embed", "--images", folder, "--out", aFile}, "--out " + aFile + " is a file: give a folder"},
		{[]string{"embed", "--texts", aFile, "--out", aFile}, "--out " + aFile + " is a file: give a folder"},
	} {
		var stdout, errb bytes.Buffer
		if st := run(tc.args, &stdout, &errb); st != 2 || !strings.Contains(errb.String(), tc.msg) || strings.Contains(errb.String(), "classifying") {
			t.Errorf("%q: status %d, %q; want 2 and %q before any work", tc.args, st, errb.String(), tc.msg)
		}
	}
	if ents, _ := os.ReadDir(dir); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "d.csv.") }) {
		t.Error("classify left files beside the folder it refused")
	}
}

// TestBulkBatchAboveImages: a batch size far above the number of images
// holds the memory of the images there are (one image at a batch size of
// 100,000: under 64 MB allocated, where 100,000 images' pixels are 1.2
// GB), and is recorded as that number, so that a progress file an
// earlier build left with the size given does not refuse the next run
// with the default.
func TestBulkBatchAboveImages(t *testing.T) {
	dir := t.TempDir()
	extractBuiltin(t, dir)
	folder := smallFolder(t, dir, 1, "cat")
	set, err := openImageSet(folder, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer set.close()
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pre, err := m.Preprocessor()
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	batches := readBatches(set, pre, 0, 1, 100000)
	batch, ok, err := batches.Next()
	if err != nil || !ok || batch.hi-batch.lo != 1 {
		t.Fatalf("batch %v %v: %+v", ok, err, batch)
	}
	batches.Close()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("one image at a batch size of 100,000: %d MB allocated, want under 64", got>>20)
	}

	out := filepath.Join(dir, "a.csv")
	var stdout, errb bytes.Buffer
	if st := run([]string{"classify", "--images", folder, "--out", out, "--batch-size", "100000000"}, &stdout, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	want, _ := os.ReadFile(out)
	// What an earlier build left when it died at that batch size: the
	// header, and the size given.
	os.Remove(out)
	ids := sha256.Sum256([]byte(set.ids[0] + "\x00"))
	var prog classifyProgress
	prog.Settings = classifySettings{Model: "built-in, sha256 " + builtin.ModelSHA256()[:16], Classes: data.CIFAR10Classes, Templates: data.CIFAR10Templates,
		BatchSize: 100000000, Images: 1, ImagesSHA256: hex.EncodeToString(ids[:]), Format: "csv"}
	if !strings.Contains(string(want), "\n") {
		t.Fatalf("output %q", want)
	}
	header := string(want[:strings.Index(string(want), "\n")+1])
	prog.Bytes = int64(len(header))
	b, _ := json.Marshal(prog)
	os.WriteFile(out+".part.json", b, 0o644)
	os.WriteFile(out+".part", []byte(header), 0o644)
	errb.Reset()
	if st := run([]string{"classify", "--images", folder, "--out", out}, &stdout, &errb); st != 0 {
		t.Fatalf("after a progress file recording --batch-size 100000000: status %d: %s", st, errb.String())
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Errorf("output %q, want %q", got, want)
	}

	emb := filepath.Join(dir, "emb")
	if st := run([]string{"embed", "--images", folder, "--out", emb, "--batch-size", "100000000"}, &stdout, &errb); st != 0 {
		t.Fatalf("embed: status %d: %s", st, errb.String())
	}
	var s embedfile.Settings
	if b, err := os.ReadFile(filepath.Join(emb, "images.json")); err != nil || json.Unmarshal(b, &s) != nil || s.BatchSize != 1 {
		t.Errorf("images.json: %+v (%v), want batch size 1", s, err)
	}
	if st := run([]string{"embed", "--images", folder, "--out", emb}, &stdout, &errb); st != 0 {
		t.Errorf("embed again with the default batch size: status %d: %s", st, errb.String())
	}
}

// TestBulkInterrupted sends SIGINT once the first rows are written:
// classify and embed stop after the batch in progress with status 130 and
// say how many rows they keep and that the same command resumes, which it
// does, to every row.
func TestBulkInterrupted(t *testing.T) {
	dir := t.TempDir()
	extractBuiltin(t, dir)
	folder := smallFolder(t, dir, 20, data.CIFAR10Classes...)
	for _, tc := range []struct {
		cmd, out, started string // started: a file there once rows are written
		done              *regexp.Regexp
	}{
		{"classify", "x.csv", "x.csv.part.json", regexp.MustCompile(`interrupted: (\d+) of 200 images classified, kept in \S+x\.csv\.part; the same command resumes\n$`)},
		{"embed", "emb", "emb/images.jsonl.part", regexp.MustCompile(`interrupted: (\d+) of 200 images embedded, kept in \S+images\.npy\.part; the same command resumes\n$`)},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			out := filepath.Join(dir, tc.out)
			args := []string{tc.cmd, "--images", folder, "--out", out, "--batch-size", "4"}
			stop := interruptWhen(t, time.Millisecond, func() bool {
				st, err := os.Stat(filepath.Join(dir, tc.started))
				return err == nil && st.Size() > 0
			})
			var stdout, errb bytes.Buffer
			st := run(args, &stdout, &errb)
			stop()
			m := tc.done.FindStringSubmatch(errb.String())
			if st != 130 || m == nil || m[1] == "0" || m[1] == "200" {
				t.Fatalf("status %d, stderr %q: want 130 and the rows kept", st, errb.String())
			}
			errb.Reset()
			if st := run(args, &stdout, &errb); st != 0 {
				t.Fatalf("resumed: status %d: %s", st, errb.String())
			}
			if tc.cmd == "classify" {
				b, _ := os.ReadFile(out)
				if !strings.Contains(errb.String(), "resuming "+out+".part after "+m[1]+" of 200 images") || strings.Count(string(b), "\n") != 201 {
					t.Errorf("resumed: %d lines, stderr %q", strings.Count(string(b), "\n"), errb.String())
				}
			} else if recs := readJSONL(t, filepath.Join(out, "images.jsonl")); len(recs) != 200 {
				t.Errorf("resumed: %d records, want 200", len(recs))
			}
		})
	}
}
