package weights

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
)

// DType is a safetensors element type.
type DType string

// The element types this package reads.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	U8   DType = "U8"
)

// Size returns the size of one element in bytes, or 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	case U8:
		return 1
	}
	return 0
}

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	// Begin and End are byte offsets into the data section.
	Begin, End int64
}

// NumElements returns the product of the shape (1 for a scalar).
func (ti TensorInfo) NumElements() int {
	n := 1
	for _, s := range ti.Shape {
		n *= s
	}
	return n
}

// maxHeader bounds the JSON header so that a corrupt length cannot make us
// allocate gigabytes before failing.
const maxHeader = 100 << 20

// File is an open safetensors file. Its data is memory-mapped where the
// operating system allows it; Close releases it.
type File struct {
	path     string
	data     []byte // the whole file
	unmap    func() error
	body     []byte // data section
	tensors  map[string]TensorInfo
	order    []string
	Metadata map[string]string
}

// Open maps the safetensors file at path and validates its header: every
// tensor must have a known dtype, a shape whose size matches its byte range,
// and a range inside the file.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	defer f.Close()
	data, unmap, err := mapFile(f)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	sf, err := parse(path, data)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, err
	}
	sf.unmap = unmap
	return sf, nil
}

// Parse reads a safetensors file held in memory.
func Parse(name string, data []byte) (*File, error) { return parse(name, data) }

func parse(path string, data []byte) (*File, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("weights: %s: not a valid safetensors file: %s", path, fmt.Sprintf(format, a...))
	}
	if len(data) < 8 {
		return nil, bad("%d bytes, shorter than the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data[:8])
	if n > maxHeader || n > uint64(len(data)-8) {
		return nil, bad("header length %d exceeds the file (%d bytes)", n, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		return nil, bad("header JSON: %v", err)
	}
	sf := &File{path: path, data: data, body: data[8+n:], tensors: make(map[string]TensorInfo, len(raw))}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &sf.Metadata); err != nil {
				return nil, bad("__metadata__: %v", err)
			}
			continue
		}
		var h struct {
			DType   DType   `json:"dtype"`
			Shape   []int   `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &h); err != nil {
			return nil, bad("tensor %q: %v", name, err)
		}
		if h.DType.Size() == 0 {
			return nil, bad("tensor %q: unsupported dtype %q", name, h.DType)
		}
		if len(h.Offsets) != 2 || h.Offsets[0] < 0 || h.Offsets[1] < h.Offsets[0] || h.Offsets[1] > int64(len(sf.body)) {
			return nil, bad("tensor %q: data_offsets %v outside the %d-byte data section", name, h.Offsets, len(sf.body))
		}
		count := int64(1)
		for _, s := range h.Shape {
			if s < 0 || (s > 0 && count > math.MaxInt32*int64(64)/int64(s)) {
				return nil, bad("tensor %q: bad shape %v", name, h.Shape)
			}
			count *= int64(s)
		}
		if count*int64(h.DType.Size()) != h.Offsets[1]-h.Offsets[0] {
			return nil, bad("tensor %q: shape %v of %s needs %d bytes, data_offsets give %d",
				name, h.Shape, h.DType, count*int64(h.DType.Size()), h.Offsets[1]-h.Offsets[0])
		}
		sf.tensors[name] = TensorInfo{Name: name, DType: h.DType, Shape: h.Shape, Begin: h.Offsets[0], End: h.Offsets[1]}
	}
	for name := range sf.tensors {
		sf.order = append(sf.order, name)
	}
	// Names in data order: the order the writer used.
	sort.Slice(sf.order, func(i, j int) bool {
		a, b := sf.tensors[sf.order[i]], sf.tensors[sf.order[j]]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.Name < b.Name
	})
	return sf, nil
}

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// Names lists the tensors in the order of their data.
func (f *File) Names() []string { return append([]string(nil), f.order...) }

// Info returns the description of a tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	ti, ok := f.tensors[name]
	return ti, ok
}

// ErrNotFound is wrapped by the errors for a missing tensor.
var ErrNotFound = errors.New("tensor not found")

func (f *File) info(name string) (TensorInfo, error) {
	ti, ok := f.tensors[name]
	if !ok {
		return ti, fmt.Errorf("weights: %s: tensor %q: %w", f.path, name, ErrNotFound)
	}
	return ti, nil
}

// Raw returns the bytes of a tensor (shared with the mapping: do not modify,
// do not use after Close).
func (f *File) Raw(name string) (TensorInfo, []byte, error) {
	ti, err := f.info(name)
	if err != nil {
		return ti, nil, err
	}
	return ti, f.body[ti.Begin:ti.End], nil
}

// Float32 returns a tensor converted to a new float32 slice, with its shape.
// F32, F16, BF16 and F64 tensors are accepted.
func (f *File) Float32(name string) ([]float32, []int, error) {
	ti, b, err := f.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	out := make([]float32, ti.NumElements())
	switch ti.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = HalfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	default:
		return nil, nil, fmt.Errorf("weights: %s: tensor %q: dtype %s is not a float type", f.path, name, ti.DType)
	}
	return out, ti.Shape, nil
}

// Float64 returns a tensor converted to float64 (any float dtype).
func (f *File) Float64(name string) ([]float64, []int, error) {
	ti, b, err := f.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	if ti.DType == F64 {
		out := make([]float64, ti.NumElements())
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return out, ti.Shape, nil
	}
	f32, shape, err := f.Float32(name)
	if err != nil {
		return nil, nil, err
	}
	out := make([]float64, len(f32))
	for i, v := range f32 {
		out[i] = float64(v)
	}
	return out, shape, nil
}

// Int64 returns an integer tensor (I64, I32 or U8) as int64.
func (f *File) Int64(name string) ([]int64, []int, error) {
	ti, b, err := f.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	out := make([]int64, ti.NumElements())
	switch ti.DType {
	case I64:
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case I32:
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case U8:
		for i := range out {
			out[i] = int64(b[i])
		}
	default:
		return nil, nil, fmt.Errorf("weights: %s: tensor %q: dtype %s is not an integer type", f.path, name, ti.DType)
	}
	return out, ti.Shape, nil
}

// Uint8 returns a copy of a U8 tensor.
func (f *File) Uint8(name string) ([]uint8, []int, error) {
	ti, b, err := f.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	if ti.DType != U8 {
		return nil, nil, fmt.Errorf("weights: %s: tensor %q: dtype %s, want U8", f.path, name, ti.DType)
	}
	return append([]uint8(nil), b...), ti.Shape, nil
}

// Close releases the mapping. Slices from Raw become invalid.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap, f.data, f.body = nil, nil, nil
	return err
}

// HalfToFloat32 converts an IEEE 754 binary16 value to float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: value = mant * 2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}
