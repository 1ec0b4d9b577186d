package weights

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

func TestOpenFixture(t *testing.T) {
	f, err := Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, shape, err := f.Float32("image_features")
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 2 || len(x) != shape[0]*shape[1] {
		t.Fatalf("image_features shape %v, %d values", shape, len(x))
	}
	if _, _, err := f.Float32("no.such.tensor"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing tensor: %v", err)
	}
}

// testTensors covers every dtype, a scalar and an empty tensor; the values
// are exactly representable in every float type they are stored as.
func testTensors() []Tensor {
	return []Tensor{
		{Name: "f32", DType: F32, Shape: []int{2, 3}, Data: []float32{1, -2, 3.5, 0, float32(math.Inf(-1)), 1e-30}},
		{Name: "f16", DType: F16, Shape: []int{3}, Data: []float32{1, -0.5, 65504}},
		{Name: "bf16", DType: BF16, Shape: []int{2}, Data: []float32{3, -0x1p120}},
		{Name: "f64", DType: F64, Shape: []int{2}, Data: []float64{math.Pi, -1e300}},
		{Name: "f64as32", DType: F32, Shape: []int{1}, Data: []float64{0.25}},
		{Name: "i64", Shape: []int{2}, Data: []int64{-1 << 60, 7}},
		{Name: "i32", DType: I32, Shape: []int{1, 1, 2}, Data: []int32{-5, math.MaxInt32}},
		{Name: "u8", DType: U8, Shape: []int{3}, Data: []uint8{0, 128, 255}},
		{Name: "i8", DType: I8, Shape: []int{2, 2}, Data: []int8{-128, -1, 0, 127}},
		{Name: "scalar", DType: F32, Shape: []int{}, Data: []float32{4.605170249938965}},
		{Name: "empty", DType: F32, Shape: []int{0, 4}, Data: []float32{}},
	}
}

// asFloat64 widens any writer data to float64 for comparison.
func asFloat64(d any) []float64 {
	var out []float64
	switch x := d.(type) {
	case []float32:
		for _, v := range x {
			out = append(out, float64(v))
		}
	case []float64:
		out = x
	case []int64:
		for _, v := range x {
			out = append(out, float64(v))
		}
	case []int32:
		for _, v := range x {
			out = append(out, float64(v))
		}
	case []uint8:
		for _, v := range x {
			out = append(out, float64(v))
		}
	case []int8:
		for _, v := range x {
			out = append(out, float64(v))
		}
	}
	return out
}

func checkRoundTrip(t *testing.T, f *File, in []Tensor, meta map[string]string) {
	t.Helper()
	var names []string
	for _, tt := range in {
		names = append(names, tt.Name)
	}
	if got := f.Names(); !slices.Equal(got, names) {
		t.Errorf("names %v, want the written order %v", got, names)
	}
	if len(meta) > 0 && !mapsEqual(f.Metadata, meta) {
		t.Errorf("metadata %v, want %v", f.Metadata, meta)
	}
	for _, tt := range in {
		ti, _ := f.Info(tt.Name)
		want := tt.DType
		if want == "" {
			want, _, _ = tt.dataType()
		}
		if ti.DType != want || !slices.Equal(ti.Shape, tt.Shape) {
			t.Errorf("%s: %s %v, want %s %v", tt.Name, ti.DType, ti.Shape, want, tt.Shape)
		}
		var got []float64
		switch {
		case ti.DType.IsFloat():
			got, _, _ = f.Float64(tt.Name)
		default:
			v, _, err := f.Int64(tt.Name)
			if err != nil {
				t.Fatal(err)
			}
			got = asFloat64(v)
		}
		wantv := asFloat64(tt.Data)
		if ti.DType == F64 && tt.DType == F64 {
			// Exact: float64 stored as F64.
		} else if ti.DType.IsFloat() {
			for i := range wantv {
				wantv[i] = float64(float32(wantv[i]))
			}
		}
		if !slices.Equal(got, wantv) {
			t.Errorf("%s: read %v, wrote %v", tt.Name, got, wantv)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestWriteRoundTrip(t *testing.T) {
	in := testTensors()
	meta := map[string]string{"format": "pt", "note": "ünïcode \"quoted\""}
	var buf bytes.Buffer
	if err := Write(&buf, in, meta); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if n := binary.LittleEndian.Uint64(b); n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	f, err := Parse("mem", b)
	if err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, f, in, meta)

	// zstd, in memory and through files.
	buf.Reset()
	if err := WriteZstd(&buf, in, meta); err != nil {
		t.Fatal(err)
	}
	if !isZstd(buf.Bytes()) {
		t.Fatal("WriteZstd output lacks the zstd magic")
	}
	if f, err = Parse("mem.zst", buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, f, in, meta)
	dir := t.TempDir()
	for _, name := range []string{"a.safetensors", "a.safetensors.zst"} {
		p := filepath.Join(dir, name)
		if err := WriteFile(p, in, meta); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(p)
		if isZstd(raw) != strings.HasSuffix(name, ".zst") {
			t.Errorf("%s: compressed = %v", name, isZstd(raw))
		}
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		checkRoundTrip(t, f, in, meta)
		f.Close()
		if _, _, err := f.Raw("f32"); err == nil {
			t.Error("Raw after Close gave no error")
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("WriteFile left %d files, want 2", len(entries))
	}
}

func TestWriteRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		t    []Tensor
		want string
	}{
		{"shape", []Tensor{{Name: "x", Shape: []int{2, 2}, Data: []float32{1, 2, 3}}}, "4 elements"},
		{"negative", []Tensor{{Name: "x", Shape: []int{-1}, Data: []float32{}}}, "bad shape"},
		{"int as float", []Tensor{{Name: "x", DType: F16, Shape: []int{1}, Data: []int64{1}}}, "cannot store"},
		{"float as int", []Tensor{{Name: "x", DType: I64, Shape: []int{1}, Data: []float32{1}}}, "cannot store"},
		{"type", []Tensor{{Name: "x", Shape: []int{1}, Data: []string{"a"}}}, "[]string"},
		{"dtype", []Tensor{{Name: "x", DType: "F8", Shape: []int{1}, Data: []float32{1}}}, "unsupported"},
		{"duplicate", []Tensor{{Name: "x", Shape: []int{}, Data: []float32{1}}, {Name: "x", Shape: []int{}, Data: []float32{1}}}, "repeated"},
		{"reserved", []Tensor{{Name: "__metadata__", Shape: []int{}, Data: []float32{1}}}, "reserved"},
	} {
		err := Write(&bytes.Buffer{}, c.t, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// rawFile assembles a safetensors file from a literal header and body.
func rawFile(header string, body []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), body...)
}

func TestParseRejects(t *testing.T) {
	body16 := make([]byte, 16)
	for _, c := range []struct {
		name string
		data []byte
		want []string // substrings of the error, besides the file name
	}{
		{"short", []byte{1, 2}, []string{"shorter"}},
		{"header too long", rawFile(`{}`, nil)[:9], []string{"header length"}},
		{"not an object", rawFile(`[1]`, nil), []string{"JSON object"}},
		{"bad json", rawFile(`{"a":`, nil), []string{"header JSON"}},
		{"trailing json", rawFile(`{} {}`, nil), []string{"after the header"}},
		{"duplicate", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, body16), []string{`"a"`, "twice"}},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, body16), []string{`"b"`, "overlaps", `"a"`}},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, body16), []string{"gap", `"b"`}},
		{"trailing data", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, body16), []string{"8 bytes after"}},
		{"truncated", rawFile(`{"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}}`, body16), []string{`"a"`, "truncated"}},
		{"absurd shape", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16]}}`, body16), []string{`"a"`, "shape"}},
		{"overflow shape", rawFile(`{"a":{"dtype":"F32","shape":[9223372036854775807,2],"data_offsets":[0,16]}}`, body16), []string{`"a"`, "shape"}},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}}`, body16), []string{`"a"`, "shape"}},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}`, body16), []string{`"a"`, "needs 12 bytes"}},
		{"dtype", rawFile(`{"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}}`, body16), []string{`"a"`, "dtype"}},
		{"offsets", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}}`, body16), []string{`"a"`, "data_offsets"}},
		{"no shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,16]}}`, body16), []string{`"a"`, "no shape"}},
		{"unknown field", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1}}`, body16), []string{`"a"`}},
		{"metadata", rawFile(`{"__metadata__":{"a":1}}`, nil), []string{"__metadata__"}},
		{"zstd garbage", append(append([]byte{}, zstdMagic...), 1, 2, 3, 4, 5), []string{"zstd"}},
	} {
		_, err := Parse("bad.safetensors", c.data)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range append(c.want, "bad.safetensors") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
	}
	// Zero-sized tensors may share an offset; header padding is allowed.
	ok := rawFile(`{"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"z":{"dtype":"F16","shape":[0,3],"data_offsets":[16,16]}}   `, body16)
	f, err := Parse("ok", ok)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Names(); !slices.Equal(got, []string{"e", "a", "z"}) {
		t.Errorf("names %v", got)
	}
}

// TestOpenTruncatedFixture cuts a real file short: the error names the file
// and the tensor whose data is missing.
func TestOpenTruncatedFixture(t *testing.T) {
	b, err := os.ReadFile(fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "cut.safetensors")
	os.WriteFile(p, b[:len(b)-100], 0o644)
	_, err = Open(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), "tensor ") {
		t.Fatalf("truncated file: %v", err)
	}
	t.Log(err)
}

// TestWriteFileMode: a written model is readable by all (0644), as every
// other file the commands write, not private as a temporary file is.
func TestWriteFileMode(t *testing.T) {
	for _, name := range []string{"m.safetensors", "m.safetensors.zst"} {
		path := filepath.Join(t.TempDir(), name)
		if err := WriteFile(path, testTensors(), nil); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Mode().Perm(); m != 0o644 {
			t.Errorf("%s: mode %04o, want 0644", name, m)
		}
	}
}

// TestWriteFileToDirectory: writing a model over a folder is refused
// naming the folder, rather than as a temporary file's failed rename, and
// leaves nothing in it.
func TestWriteFileToDirectory(t *testing.T) {
	dir := t.TempDir()
	err := WriteFile(dir, testTensors(), nil)
	if err == nil || !strings.Contains(err.Error(), dir+" is a directory") || strings.Contains(err.Error(), ".tmp") {
		t.Fatalf("error %v, want one saying %s is a directory", err, dir)
	}
	parent, _ := os.ReadDir(filepath.Dir(dir))
	for _, e := range parent {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("left %s behind", e.Name())
		}
	}
}
