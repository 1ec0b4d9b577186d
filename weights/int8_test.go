package weights

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/fixture"
)

// ulps is the distance between two float32 values of the same sign in
// units in the last place.
func ulps(a, b float32) uint32 {
	x, y := math.Float32bits(a), math.Float32bits(b)
	if x > y {
		return x - y
	}
	return y - x
}

// rowsCols is the matrix [rows, cols] an int8 weight of shape is quantised
// as: rows its first dimension, cols the rest.
func rowsCols(shape []int) (rows, cols int) {
	rows = shape[0]
	return rows, numElements(shape) / rows
}

// TestConvertInt8 converts the fixture model with DType I8 and checks the
// file (I8 weights beside their F32 scales, exactly as
// kernel.QuantizeInt8Rows makes them from the source; every other tensor
// F32 and unchanged), its loading (scales consumed, each weight q·scale
// rounded once to float32, within half a step of the source) and the
// property the format exists for: running the loaded model in int8
// quantises its weights to the stored values again.
func TestConvertInt8(t *testing.T) {
	const rel = "fixtures/clip-tiny.openai.safetensors"
	src := fixture.Path(t, rel)
	orig, cfg := fixtureCLIP(t, rel)
	dir := t.TempDir()
	dst := filepath.Join(dir, "int8.safetensors")
	if _, err := Convert(src, dst, ConvertOptions{DType: I8, Config: cfg}); err != nil {
		t.Fatal(err)
	}

	// The file.
	f, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	quantised := map[string]bool{}
	for _, name := range cfg.Int8Names() {
		quantised[name] = true
	}
	var want []string
	for _, name := range cfg.Names() {
		want = append(want, name)
		if quantised[name] {
			want = append(want, name+Int8ScaleSuffix)
		}
	}
	if !slices.Equal(f.Names(), want) {
		t.Fatalf("tensors %v, want %v", f.Names(), want)
	}
	if f.Metadata["dtype"] != string(I8) || f.Metadata["quantization"] != Int8Quantization {
		t.Errorf("metadata dtype %q, quantization %q", f.Metadata["dtype"], f.Metadata["quantization"])
	}
	stored := map[string][]int64{}
	scales := map[string][]float32{}
	for _, name := range cfg.Names() {
		p, _ := orig.Param(name)
		ti, _ := f.Info(name)
		if !quantised[name] {
			v, _, err := f.Float32(name)
			if err != nil || ti.DType != F32 || !slices.Equal(ti.Shape, p.Shape) || !bitsEqual(v, p.Data) {
				t.Errorf("%s: %s %v, want the source's F32 %v unchanged (%v)", name, ti.DType, ti.Shape, p.Shape, err)
			}
			continue
		}
		if ti.DType != I8 || !slices.Equal(ti.Shape, p.Shape) {
			t.Errorf("%s: %s %v, want I8 %v", name, ti.DType, ti.Shape, p.Shape)
			continue
		}
		rows, cols := rowsCols(p.Shape)
		wantQ, wantS, err := kernel.QuantizeInt8Rows(name, p.Data, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		q, _, err := f.Int64(name)
		if err != nil {
			t.Fatal(err)
		}
		s, shape, err := f.Float32(name + Int8ScaleSuffix)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range wantQ {
			if q[i] != int64(v) {
				t.Fatalf("%s: value %d stored as %d, QuantizeInt8Rows gives %d", name, i, q[i], v)
			}
		}
		if !slices.Equal(shape, []int{rows}) || !bitsEqual(s, wantS) {
			t.Errorf("%s: scales %v of shape %v, want QuantizeInt8Rows's %d", name, s, shape, rows)
		}
		stored[name], scales[name] = q, s
	}

	// Loading, from the file and from its bytes.
	raw, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	fromBytes, _, err := LoadCLIPBytes("int8.safetensors", raw)
	if err != nil {
		t.Fatal(err)
	}
	loaded, lcfg, err := LoadCLIP(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(lcfg, cfg) {
		t.Errorf("read back config %+v, want %+v", lcfg, cfg)
	}
	if !slices.Equal(loaded.Names(), cfg.Names()) || !slices.Equal(fromBytes.Names(), cfg.Names()) {
		t.Fatalf("loaded tensors %v and %v, want %v (scales consumed)", loaded.Names(), fromBytes.Names(), cfg.Names())
	}
	changed := 0
	for _, name := range cfg.Names() {
		p, _ := orig.Param(name)
		l, _ := loaded.Param(name)
		b, _ := fromBytes.Param(name)
		if !bitsEqual(l.Data, b.Data) {
			t.Errorf("%s: LoadCLIPBytes and LoadCLIP differ", name)
		}
		if !quantised[name] {
			if !bitsEqual(l.Data, p.Data) {
				t.Errorf("%s: a tensor kept in F32 changed", name)
			}
			continue
		}
		if l.DType != I8 {
			t.Errorf("%s: loaded with dtype %s, want I8 (the file's)", name, l.DType)
		}
		rows, cols := rowsCols(p.Shape)
		q, s := stored[name], scales[name]
		for i, v := range l.Data {
			j := i / cols
			if w := float32(q[i]) * s[j]; math.Float32bits(v) != math.Float32bits(w) {
				t.Fatalf("%s: value %d loaded as %g, want q·scale = %d·%g = %g", name, i, v, q[i], s[j], w)
			}
			// Half a step, and the float32 roundings of the scale and of
			// the product (relative 2⁻²⁴ each, of at most 127 steps).
			step := float64(s[j])
			if e := math.Abs(float64(v) - float64(p.Data[i])); e > 0.5*step+127*step*0x1p-23 {
				t.Fatalf("%s: value %d is %g, loaded %g: more than half a step (%g) apart", name, i, p.Data[i], v, step)
			}
		}

		// The property: --precision int8 (SetPrecision → LinearParams.
		// SetPrecision) quantises the loaded weight with
		// kernel.QuantizeInt8 over [rows, cols] (the builder reads a
		// weight as its first dimension by the rest). It gives back the
		// stored values exactly and the scales within one unit in the
		// last place. Row j's largest loaded magnitude is fl(127·s) (the
		// row's largest |q| is 127 whenever s > 0), so the new scale is
		// fl(fl(127·s)/127) = fl(s·(1+δ)), |δ| ≤ 2⁻²⁴: s itself or a
		// neighbour, since s·2⁻²⁴ is under one ulp of s. A value
		// fl(q·s)·127/fl(127·s) is q·(1+ε) with |ε| ≤ about 3·2⁻²⁴, and
		// 127·3·2⁻²⁴ ≪ ½, so it rounds to q again. (Mostly s itself: when
		// s = fl(m/127) for a float32 m, fl(127·s) is m again unless m
		// is near a power of two.)
		qw, err := kernel.QuantizeInt8(name, l.Data, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		again, againS := qw.Unpack()
		for i, v := range again {
			if int64(v) != q[i] {
				t.Fatalf("%s: value %d re-quantised to %d, stored %d", name, i, v, q[i])
			}
		}
		for j := range againS {
			if d := ulps(againS[j], s[j]); d > 1 {
				t.Errorf("%s: row %d: scale re-quantised to %g, stored %g: %d ulps apart", name, j, againS[j], s[j], d)
			} else if d == 1 {
				changed++
			}
		}
	}
	t.Logf("%d tensors in int8; %d of their scales re-quantised one ulp from the stored one", len(stored), changed)

	// Converting the int8 file again stores the same values.
	dst2 := filepath.Join(dir, "again.safetensors")
	if _, err := Convert(dst, dst2, ConvertOptions{DType: I8}); err != nil {
		t.Fatal(err)
	}
	f2, err := Open(dst2)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	for name, q := range stored {
		if q2, _, err := f2.Int64(name); err != nil || !slices.Equal(q2, q) {
			t.Errorf("%s: converting the int8 file again changed its int8 values (%v)", name, err)
		}
	}

	srcSize, dstSize := fileSize(t, src), fileSize(t, dst)
	t.Logf("%s: %d bytes as F32, %d bytes with int8 weights", filepath.Base(src), srcSize, dstSize)
	if dstSize >= srcSize {
		t.Errorf("int8 file %d bytes, no smaller than the source's %d", dstSize, srcSize)
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestConvertInt8NonFinite: a NaN or an infinity in a weight to store in
// int8 is refused naming the tensor and the element (kernel.ErrNonFinite).
func TestConvertInt8NonFinite(t *testing.T) {
	const rel = "fixtures/clip-tiny.openai.safetensors"
	orig, cfg := fixtureCLIP(t, rel)
	name := cfg.TensorNames().Vision.Blocks[0].FC.Weight
	p, _ := orig.Param(name)
	_, cols := rowsCols(p.Shape)
	cj, _ := json.Marshal(cfg)
	dir := t.TempDir()
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		saved := p.Data[cols+2]
		p.Data[cols+2] = bad
		src := filepath.Join(dir, "bad.safetensors")
		err := WriteFile(src, orig.Tensors(F32), map[string]string{"config": string(cj)})
		p.Data[cols+2] = saved
		if err != nil {
			t.Fatal(err)
		}
		_, err = Convert(src, filepath.Join(dir, "out.safetensors"), ConvertOptions{DType: I8})
		if !errors.Is(err, kernel.ErrNonFinite) || !strings.Contains(err.Error(), name+"[1, 2]") {
			t.Errorf("%v in %s: err = %v, want kernel.ErrNonFinite naming %s[1, 2]", bad, name, err, name)
		}
	}
}

// TestLoadInt8: an I8 weight with valid scales is dequantised, q·scale,
// and its scales dropped; every mismatch of weight and scales is an error
// wrapping ErrInt8Scale that names the tensor, from Load and from
// LoadCLIPBytes alike.
func TestLoadInt8(t *testing.T) {
	q := []int8{1, -2, 3, 127, -127, 0}
	weight := Tensor{Name: "w", DType: I8, Shape: []int{2, 3}, Data: q}
	scale := func(s ...float32) Tensor {
		return Tensor{Name: "w" + Int8ScaleSuffix, DType: F32, Shape: []int{len(s)}, Data: s}
	}
	other := Tensor{Name: "b", DType: F32, Shape: []int{2}, Data: []float32{7, 8}}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")

	if err := WriteFile(path, []Tensor{weight, scale(0.5, 0.25), other}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := s.Get("w", 2, 3); err != nil || !slices.Equal(w, []float32{0.5, -1, 1.5, 31.75, -31.75, 0}) {
		t.Errorf("dequantised w = %v (%v)", w, err)
	}
	if p, _ := s.Param("w"); p.DType != I8 {
		t.Errorf("w: dtype %s, want I8", p.DType)
	}
	if !slices.Equal(s.Names(), []string{"w", "b"}) {
		t.Errorf("tensors %v, want the scales consumed", s.Names())
	}

	f32Weight := Tensor{Name: "w", DType: F32, Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}}
	for _, c := range []struct {
		name    string
		tensors []Tensor
		names   string // the tensor the error names
		want    string
	}{
		{"no scale", []Tensor{weight, other}, "w", "without its scale tensor"},
		{"scale too long", []Tensor{weight, scale(1, 1, 1)}, "w" + Int8ScaleSuffix, "want a float tensor [2]"},
		{"scale 2-D", []Tensor{weight, {Name: "w" + Int8ScaleSuffix, Shape: []int{2, 1}, Data: []float32{1, 1}}}, "w" + Int8ScaleSuffix, "want a float tensor [2]"},
		{"integer scale", []Tensor{weight, {Name: "w" + Int8ScaleSuffix, Shape: []int{2}, Data: []int32{1, 1}}}, "w" + Int8ScaleSuffix, "want a float tensor [2]"},
		{"NaN scale", []Tensor{weight, scale(1, float32(math.NaN()))}, "w" + Int8ScaleSuffix, "scale 1 of 2 is NaN"},
		{"infinite scale", []Tensor{weight, scale(float32(math.Inf(1)), 1)}, "w" + Int8ScaleSuffix, "scale 0 of 2 is +Inf"},
		{"negative scale", []Tensor{weight, scale(1, -0.5)}, "w" + Int8ScaleSuffix, "scale 1 of 2 is -0.5"},
		{"overflowing scale", []Tensor{weight, scale(1, math.MaxFloat32/100)}, "w" + Int8ScaleSuffix, "overflows float32"},
		{"scale of a float weight", []Tensor{f32Weight, scale(1, 1)}, "w" + Int8ScaleSuffix, "beside weight \"w\" of dtype F32"},
		{"scale of no weight", []Tensor{other, scale(1, 1)}, "w" + Int8ScaleSuffix, "no weight \"w\""},
	} {
		if err := WriteFile(path, c.tensors, nil); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Load(path)
		_, _, errBytes := LoadCLIPBytes("m.safetensors", raw)
		for _, e := range []error{err, errBytes} {
			if !errors.Is(e, ErrInt8Scale) || !strings.Contains(e.Error(), "tensor \""+c.names+"\"") || !strings.Contains(e.Error(), c.want) {
				t.Errorf("%s: err = %v, want ErrInt8Scale naming tensor %q and saying %q", c.name, e, c.names, c.want)
			}
		}
	}
}
