package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"unsafe"
)

// DType is a safetensors element type.
type DType string

// The element types this package reads and writes.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	U8   DType = "U8"
	// I8 is a signed byte. This package reads an I8 tensor as a weight
	// quantised per row, beside its scales (see Int8ScaleSuffix).
	I8 DType = "I8"
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
	case U8, I8:
		return 1
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F64 || d == F32 || d == F16 || d == BF16 }

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
// operating system allows it (zstd-compressed files are decompressed into
// memory instead); Close releases it.
type File struct {
	path     string
	data     []byte // the whole (decompressed) file
	unmap    func() error
	body     []byte // data section
	tensors  map[string]TensorInfo
	order    []string
	Metadata map[string]string
}

// Open maps the safetensors file at path and validates its header: every
// tensor must have a known dtype, a shape whose size matches its byte range,
// and the ranges must tile the data section exactly (no overlap, no gap, no
// truncation). A file that starts with the zstd magic number (usually named
// .safetensors.zst) is decompressed into memory first.
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
	if isZstd(data) {
		dec, err := decompressZstd(data)
		if unmap != nil {
			unmap()
		}
		if err != nil {
			return nil, fmt.Errorf("weights: %s: %w", path, err)
		}
		data, unmap = dec, nil
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

// Parse reads a safetensors file held in memory; name is used in errors.
// Zstd-compressed data is decompressed first. The File refers to data (when
// not compressed): do not modify data while the File is in use.
func Parse(name string, data []byte) (*File, error) {
	if isZstd(data) {
		dec, err := decompressZstd(data)
		if err != nil {
			return nil, fmt.Errorf("weights: %s: %w", name, err)
		}
		data = dec
	}
	return parse(name, data)
}

// header is the JSON description of one tensor.
type header struct {
	DType   DType   `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

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
	hdr := data[8 : 8+n]
	if len(bytes.TrimLeft(hdr, " ")) == 0 || bytes.TrimLeft(hdr, " ")[0] != '{' {
		return nil, bad("header does not start with a JSON object")
	}
	entries, err := decodeObject(hdr)
	if err != nil {
		return nil, bad("header JSON: %v", err)
	}
	sf := &File{path: path, data: data, body: data[8+n:], tensors: make(map[string]TensorInfo, len(entries))}
	bodyLen := int64(len(sf.body))
	for _, e := range entries {
		name, msg := e.key, e.value
		if name == "__metadata__" {
			if sf.Metadata != nil {
				return nil, bad("duplicate __metadata__")
			}
			if err := json.Unmarshal(msg, &sf.Metadata); err != nil {
				return nil, bad("__metadata__ must map strings to strings: %v", err)
			}
			if sf.Metadata == nil {
				sf.Metadata = map[string]string{}
			}
			continue
		}
		if _, dup := sf.tensors[name]; dup {
			return nil, bad("tensor %q listed twice", name)
		}
		var h header
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&h); err != nil {
			return nil, bad("tensor %q: %v", name, err)
		}
		if h.DType.Size() == 0 {
			return nil, bad("tensor %q: unsupported dtype %q", name, h.DType)
		}
		if h.Shape == nil {
			return nil, bad("tensor %q: no shape", name)
		}
		if len(h.Offsets) != 2 || h.Offsets[0] < 0 || h.Offsets[1] < h.Offsets[0] {
			return nil, bad("tensor %q: bad data_offsets %v", name, h.Offsets)
		}
		if h.Offsets[1] > bodyLen {
			return nil, bad("tensor %q: data ends at byte %d of a %d-byte data section (file truncated?)", name, h.Offsets[1], bodyLen)
		}
		// The byte range bounds the element count, so the product below
		// cannot overflow once each step is checked against it.
		count := int64(1)
		shape := make([]int, len(h.Shape))
		for i, s := range h.Shape {
			if s < 0 || (s > 0 && count > bodyLen/s) {
				return nil, bad("tensor %q: shape %v does not fit the file", name, h.Shape)
			}
			count *= s
			shape[i] = int(s)
		}
		if count*int64(h.DType.Size()) != h.Offsets[1]-h.Offsets[0] {
			return nil, bad("tensor %q: shape %v of %s needs %d bytes, data_offsets give %d",
				name, h.Shape, h.DType, count*int64(h.DType.Size()), h.Offsets[1]-h.Offsets[0])
		}
		sf.tensors[name] = TensorInfo{Name: name, DType: h.DType, Shape: shape, Begin: h.Offsets[0], End: h.Offsets[1]}
		sf.order = append(sf.order, name)
	}
	// Names in data order: the order the writer used.
	sort.Slice(sf.order, func(i, j int) bool {
		a, b := sf.tensors[sf.order[i]], sf.tensors[sf.order[j]]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		if a.End != b.End {
			return a.End < b.End
		}
		return a.Name < b.Name
	})
	// The ranges must tile the data section: no overlap, no hole.
	var next int64
	prev := ""
	for _, name := range sf.order {
		ti := sf.tensors[name]
		switch {
		case ti.Begin < next:
			return nil, bad("tensor %q (bytes %d..%d) overlaps tensor %q", name, ti.Begin, ti.End, prev)
		case ti.Begin > next:
			return nil, bad("gap of %d bytes before tensor %q", ti.Begin-next, name)
		}
		next, prev = ti.End, name
	}
	if next != bodyLen {
		return nil, bad("%d bytes after the last tensor", bodyLen-next)
	}
	return sf, nil
}

type rawEntry struct {
	key   string
	value json.RawMessage
}

// decodeObject splits a JSON object into its members in order, keeping
// duplicate keys (encoding/json would silently keep the last one).
func decodeObject(b []byte) ([]rawEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not an object")
	}
	var out []rawEntry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("member %q: %w", key, err)
		}
		out = append(out, rawEntry{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	// Only padding may follow the object.
	if len(bytes.TrimRight(b[dec.InputOffset():], " \t\r\n")) != 0 {
		return nil, errors.New("data after the header object")
	}
	return out, nil
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
	if f.body == nil {
		return ti, nil, fmt.Errorf("weights: %s: file is closed", f.path)
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
	if !ti.DType.IsFloat() {
		return nil, nil, fmt.Errorf("weights: %s: tensor %q: dtype %s is not a float type", f.path, name, ti.DType)
	}
	out := make([]float32, ti.NumElements())
	if err := decodeFloat32(out, ti.DType, b); err != nil {
		return nil, nil, fmt.Errorf("weights: %s: tensor %q: %w", f.path, name, err)
	}
	return out, ti.Shape, nil
}

// littleEndian reports whether the host stores numbers little-endian, in
// which case F32 data can be copied as bytes.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// decodeFloat32 converts len(dst) elements of type dt in b to float32.
func decodeFloat32(dst []float32, dt DType, b []byte) error {
	switch dt {
	case F32:
		if littleEndian && len(dst) > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), b)
			return nil
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = HalfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BFloat16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case I64:
		for i := range dst {
			dst[i] = float32(int64(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case I32:
		for i := range dst {
			dst[i] = float32(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case U8:
		for i := range dst {
			dst[i] = float32(b[i])
		}
	case I8:
		for i := range dst {
			dst[i] = float32(int8(b[i]))
		}
	default:
		return fmt.Errorf("unsupported dtype %q", dt)
	}
	return nil
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
	if !ti.DType.IsFloat() {
		return nil, nil, fmt.Errorf("weights: %s: tensor %q: dtype %s is not a float type", f.path, name, ti.DType)
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

// Int64 returns an integer tensor (I64, I32, U8 or I8) as int64.
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
	case I8:
		for i := range out {
			out[i] = int64(int8(b[i]))
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
	var err error
	if f.unmap != nil {
		err = f.unmap()
	}
	f.unmap, f.data, f.body = nil, nil, nil
	return err
}
