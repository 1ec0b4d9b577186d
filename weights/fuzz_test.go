package weights

import (
	"bytes"
	"testing"
)

// FuzzSafetensorsHeader: Parse never panics, and an accepted file has
// ranges that tile its data section and match the shapes, and every tensor
// reads back.
func FuzzSafetensorsHeader(f *testing.F) {
	var buf bytes.Buffer
	Write(&buf, testTensors(), map[string]string{"k": "v"})
	f.Add(buf.Bytes())
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(rawFile(`{"a":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},"__metadata__":{}}`, nil))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, make([]byte, 16)))
	buf.Reset()
	WriteZstd(&buf, testTensors()[:2], nil)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		sf, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		var next int64
		for _, name := range sf.Names() {
			ti, ok := sf.Info(name)
			if !ok {
				t.Fatalf("listed tensor %q has no info", name)
			}
			if ti.Begin != next || ti.End < ti.Begin || ti.End > int64(len(sf.body)) {
				t.Fatalf("tensor %q: range %d..%d after %d in a %d-byte body", name, ti.Begin, ti.End, next, len(sf.body))
			}
			if int64(ti.NumElements()*ti.DType.Size()) != ti.End-ti.Begin {
				t.Fatalf("tensor %q: shape %v of %s vs %d bytes", name, ti.Shape, ti.DType, ti.End-ti.Begin)
			}
			next = ti.End
			if ti.DType.IsFloat() {
				if _, _, err := sf.Float32(name); err != nil {
					t.Fatal(err)
				}
			} else if _, _, err := sf.Int64(name); err != nil {
				t.Fatal(err)
			}
		}
		if next != int64(len(sf.body)) {
			t.Fatalf("tensors end at %d of a %d-byte body", next, len(sf.body))
		}
	})
}

// FuzzPickle feeds arbitrary bytes to the PyTorch reader: as a data.pkl
// whose storages are a fixed 64-byte buffer, and, when they look like a
// zip archive, as a whole .pt file. It must return an error or a state
// whose tensors match their shapes, never panic.
func FuzzPickle(f *testing.F) {
	f.Add(smallArchive(f))
	var p pickler
	seen := map[string]int{}
	p.op(0x80, 2)
	p.global("collections", "OrderedDict")
	p.op(')', 'R', '(')
	p.str("w")
	p.tensor("FloatStorage", "0", 16, 0, []int{4, 4}, []int{1, 4}, seen)
	p.str("h")
	p.tensor("HalfStorage", "1", 32, 2, []int{3}, []int{2}, seen)
	p.op('u', '.')
	f.Add(p.Bytes())
	f.Add(torchScriptArchive(f, "m", []string{"a.b", "a.c", "d"}, [][]int{{2}, {1, 2}, {}}, [][]float32{{1, 2}, {3, 4}, {5}}))
	f.Add([]byte{0x80, 2, 'N', '.'})
	storage := func(string) ([]byte, error) { return make([]byte, 64), nil }
	f.Fuzz(func(t *testing.T, data []byte) {
		var s *State
		var err error
		if bytes.HasPrefix(data, []byte("PK")) {
			s, err = loadBytes("fuzz.pt", data)
		} else {
			s, err = parsePickle("fuzz.pt", data, storage)
		}
		if err != nil {
			return
		}
		for _, name := range s.Names() {
			p, _ := s.Param(name)
			if p.NumElements() != len(p.Data) {
				t.Fatalf("tensor %q: shape %v, %d values", name, p.Shape, len(p.Data))
			}
		}
	})
}
