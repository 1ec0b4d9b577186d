package weights

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// TestTorchScriptArchive loads a TorchScript-like archive built from the
// fp32 fixture's tensors: the module tree (one object per module, its
// attributes set by BUILD) must yield every tensor under its attribute
// path, bit-exactly. This is a synthetic archive written by this test's
// pickler after torch's Pickler (pushIValue for objects: GLOBAL, EMPTY_TUPLE,
// NEWOBJ, EMPTY_DICT, MARK, name/value pairs, SETITEMS, BUILD); no archive
// written by torch.jit.save itself is available here.
func TestTorchScriptArchive(t *testing.T) {
	ref := loadFixture(t, "fixtures/clip-tiny.openai.safetensors")
	var shapes [][]int
	var data [][]float32
	for _, n := range ref.Names() {
		p, _ := ref.Param(n)
		shapes = append(shapes, p.Shape)
		data = append(data, p.Data)
	}
	b := torchScriptArchive(t, "tiny-jit", ref.Names(), shapes, data)
	p := filepath.Join(t.TempDir(), "tiny-jit.pt")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, cfg, err := LoadCLIP(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Format != FormatTorchScript {
		t.Errorf("format %q", s.Format)
	}
	compareStates(t, s, ref, nil)
	// It stores no configuration: the shapes', with width/64 heads, marked
	// Inferred.
	want, _ := fixtureConfig(t)
	if !cfg.Inferred {
		t.Error("a TorchScript archive stores no configuration, but it is not marked inferred")
	}
	if *cfg != *headRule(want) {
		t.Errorf("config %+v, want %+v", cfg, headRule(want))
	}
}

// smallArchive is a torch.save-style archive exercising the tensor layouts
// a state dict can hold: views sharing one storage at different offsets, a
// transposed (non-contiguous) view, half and bfloat16 storages, a
// Parameter wrapper, a DataParallel "module." prefix and a checkpoint dict.
func smallArchive(t testing.TB) []byte {
	var p pickler
	seen := map[string]int{}
	p.op(0x80, 2)
	p.op('}') // {"state_dict": OrderedDict, "epoch": 3}
	p.op('(')
	p.str("epoch")
	p.int(3)
	p.str("state_dict")
	p.global("collections", "OrderedDict")
	p.op(')', 'R', '(')
	// storage "0": 12 floats 0..11.
	p.str("module.a") // rows 0..1 of a [2,3] view at offset 0
	p.tensor("FloatStorage", "0", 12, 0, []int{2, 3}, []int{3, 1}, seen)
	p.str("module.b") // the [3,2] transpose of elements 6..11
	p.tensor("FloatStorage", "0", 12, 6, []int{3, 2}, []int{1, 3}, seen)
	p.str("module.h") // half storage, shape [2]
	p.tensor("HalfStorage", "1", 2, 0, []int{2}, []int{1}, seen)
	p.str("module.bf") // bfloat16 scalar
	p.tensor("BFloat16Storage", "2", 1, 0, []int{}, []int{}, seen)
	p.str("module.q") // torch.int8, shape [3]
	p.tensor("CharStorage", "3", 3, 0, []int{3}, []int{1}, seen)
	p.str("module.param") // nn.Parameter: _rebuild_parameter(tensor, True, OrderedDict())
	p.global("torch._utils", "_rebuild_parameter")
	p.op('(')
	p.tensor("FloatStorage", "0", 12, 11, []int{1}, []int{1}, seen)
	p.op(0x88)
	p.global("collections", "OrderedDict")
	p.op(')', 'R', 't', 'R')
	p.op('u', 'u', '.')
	f32 := make([]float32, 12)
	for i := range f32 {
		f32[i] = float32(i)
	}
	half := binary.LittleEndian.AppendUint16(nil, Float32ToHalf(1.5))
	half = binary.LittleEndian.AppendUint16(half, Float32ToHalf(-2))
	bf := binary.LittleEndian.AppendUint16(nil, Float32ToBFloat16(0.75))
	return makeZip(t, []zipEntry{
		{"ckpt/data.pkl", p.Bytes()},
		{"ckpt/data/0", f32bytes(f32)},
		{"ckpt/data/1", half},
		{"ckpt/data/2", bf},
		{"ckpt/data/3", []byte{0x80, 0xff, 0x7f}},
		{"ckpt/version", []byte("3\n")},
	})
}

func TestPyTorchLayouts(t *testing.T) {
	s, err := loadBytes("small.pt", smallArchive(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		dtype DType
		shape []int
		data  []float32
	}{
		{"a", F32, []int{2, 3}, []float32{0, 1, 2, 3, 4, 5}},
		{"b", F32, []int{3, 2}, []float32{6, 9, 7, 10, 8, 11}},
		{"h", F16, []int{2}, []float32{1.5, -2}},
		{"bf", BF16, []int{}, []float32{0.75}},
		{"q", I8, []int{3}, []float32{-128, -1, 127}},
		{"param", F32, []int{1}, []float32{11}},
	}
	if got := s.Names(); len(got) != len(want) {
		t.Fatalf("names %v", got)
	}
	for _, w := range want {
		p, err := s.Param(w.name)
		if err != nil {
			t.Error(err)
			continue
		}
		if p.DType != w.dtype || !slices.Equal(p.Shape, w.shape) || !slices.Equal(p.Data, w.data) {
			t.Errorf("%s: %s %v %v, want %s %v %v", w.name, p.DType, p.Shape, p.Data, w.dtype, w.shape, w.data)
		}
	}
}

func TestPyTorchErrors(t *testing.T) {
	good := smallArchive(t)
	onePkl := func(build func(p *pickler, seen map[string]int), storages ...zipEntry) []byte {
		var p pickler
		p.op(0x80, 2)
		p.global("collections", "OrderedDict")
		p.op(')', 'R', '(')
		p.str("x")
		build(&p, map[string]int{})
		p.op('u', '.')
		return makeZip(t, append([]zipEntry{{"m/data.pkl", p.Bytes()}}, storages...))
	}
	four := zipEntry{"m/data/0", make([]byte, 16)}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"missing storage", onePkl(func(p *pickler, s map[string]int) {
			p.tensor("FloatStorage", "9", 4, 0, []int{4}, []int{1}, s)
		}, four), `"9"`},
		{"storage too small", onePkl(func(p *pickler, s map[string]int) {
			p.tensor("FloatStorage", "0", 8, 0, []int{8}, []int{1}, s)
		}, four), "need 32 bytes"},
		{"view past storage", onePkl(func(p *pickler, s map[string]int) {
			p.tensor("FloatStorage", "0", 4, 2, []int{3}, []int{1}, s)
		}, four), `tensor "x"`},
		{"strided past storage", onePkl(func(p *pickler, s map[string]int) {
			p.tensor("FloatStorage", "0", 4, 0, []int{2, 2}, []int{3, 1}, s)
		}, four), `tensor "x"`},
		{"unsupported dtype", onePkl(func(p *pickler, s map[string]int) {
			p.tensor("ShortStorage", "0", 4, 0, []int{4}, []int{1}, s)
		}, four), "ShortStorage"},
		{"no tensors", onePkl(func(p *pickler, s map[string]int) { p.int(1) }), "no tensors"},
		{"no data.pkl", makeZip(t, []zipEntry{{"m/version", []byte("3\n")}}), "no data.pkl"},
		{"big endian", makeZip(t, []zipEntry{{"m/data.pkl", []byte{0x80, 2, '.'}}, {"m/byteorder", []byte("big")}}), "byteorder"},
	} {
		_, err := loadBytes("bad.pt", c.data)
		if err == nil || !strings.Contains(err.Error(), "bad.pt") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming bad.pt and containing %s", c.name, err, c.want)
		}
	}
	// Every truncation of a valid archive, and corrupted bytes throughout
	// its pickle, give an error, never a panic.
	for n := 0; n < len(good); n += 7 {
		if _, err := loadBytes("cut.pt", good[:n]); err == nil {
			t.Errorf("truncated to %d bytes: accepted", n)
		}
	}
	for i := range len(good) {
		b := slices.Clone(good)
		b[i] ^= 0xff
		loadBytes("flip.pt", b) // only the absence of a panic is checked
	}
}

// TestFixturePTCorrupt truncates and corrupts the real fp16 checkpoint.
func TestFixturePTCorrupt(t *testing.T) {
	b, err := os.ReadFile(fixture.Path(t, "fixtures/clip-tiny.openai-fp16.pt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 10, 100, 1000, len(b) / 2, len(b) - 30} {
		if _, err := loadBytes("cut.pt", b[:n]); err == nil {
			t.Errorf("cut at %d: accepted", n)
		}
	}
	// Corrupt the real file's pickle (its storages stay intact).
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]*zip.File{}
	var pkl []byte
	for _, f := range zr.File {
		entries[path.Base(path.Dir(f.Name))+"/"+path.Base(f.Name)] = f
		if path.Base(f.Name) == "data.pkl" {
			pkl, _ = readEntry(b, f)
		}
	}
	storage := func(key string) ([]byte, error) {
		f, ok := entries["data/"+key]
		if !ok {
			return nil, fmt.Errorf("no storage %q", key)
		}
		return readEntry(b, f)
	}
	step := 97
	if testing.Short() {
		step = 401
	}
	accepted := 0
	for i := 0; i < len(pkl); i += step {
		c := slices.Clone(pkl)
		c[i] ^= 0x5a
		if _, err := parsePickle("flip.pt", c, storage); err == nil {
			accepted++ // a flipped digit of a size or key can still be valid
		}
	}
	t.Logf("%d of %d corrupted pickles still parse", accepted, (len(pkl)+step-1)/step)
}
