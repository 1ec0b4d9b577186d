package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Format names the kind of file a State was read from.
type Format string

// The formats Load recognises.
const (
	FormatSafetensors Format = "safetensors" // .safetensors, possibly zstd-compressed
	FormatPyTorch     Format = "pytorch"     // torch.save zip archive (state dict)
	FormatTorchScript Format = "torchscript" // torch.jit.save zip archive (module tree)
)

// Param is one tensor of a State: float32 values in row-major order.
type Param struct {
	Name  string
	Shape []int
	// DType is the element type in the file the tensor came from; Data
	// holds it converted to float32 (integers exactly up to 2^24).
	DType DType
	Data  []float32
}

// NumElements returns the product of the shape (1 for a scalar).
func (p *Param) NumElements() int { return numElements(p.Shape) }

func numElements(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// State is a model's named tensors (a state dict), held in memory as
// float32 whatever the file stored.
type State struct {
	// Source is the path the state was loaded from, used in errors.
	Source string
	Format Format
	// Metadata is the safetensors __metadata__ (nil for other formats).
	Metadata map[string]string
	// ConfigJSON is the model configuration found beside the weights (a
	// directory's config.json or open_clip_config.json) or in the metadata
	// ("config" or "model_config"); nil when there is none. ParseConfig
	// reads it.
	ConfigJSON []byte

	params map[string]*Param
	order  []string
}

// NewState returns an empty state; source names it in errors.
func NewState(source string) *State {
	return &State{Source: source, params: map[string]*Param{}}
}

// Len returns the number of tensors.
func (s *State) Len() int { return len(s.order) }

// Names lists the tensor names in insertion (file) order.
func (s *State) Names() []string { return slices.Clone(s.order) }

// Has reports whether the state holds a tensor called name.
func (s *State) Has(name string) bool { _, ok := s.params[name]; return ok }

// Set adds p, or replaces the tensor of the same name (keeping its place).
// It panics if the shape does not match the data (a programmer error).
func (s *State) Set(p *Param) {
	if numElements(p.Shape) != len(p.Data) {
		panic(fmt.Sprintf("weights: Set %q: shape %v for %d values", p.Name, p.Shape, len(p.Data)))
	}
	if s.params == nil {
		s.params = map[string]*Param{}
	}
	if _, ok := s.params[p.Name]; !ok {
		s.order = append(s.order, p.Name)
	}
	s.params[p.Name] = p
}

// Delete removes a tensor if present.
func (s *State) Delete(name string) {
	if _, ok := s.params[name]; !ok {
		return
	}
	delete(s.params, name)
	s.order = slices.DeleteFunc(s.order, func(n string) bool { return n == name })
}

// ErrShape is wrapped by the errors for a tensor of the wrong shape.
var ErrShape = errors.New("wrong shape")

// Param returns the tensor called name, or an error wrapping ErrNotFound
// that names the source and the tensor.
func (s *State) Param(name string) (*Param, error) {
	p, ok := s.params[name]
	if !ok {
		return nil, fmt.Errorf("weights: %s: tensor %q: %w", s.Source, name, ErrNotFound)
	}
	return p, nil
}

// Get returns the data of tensor name after checking its shape against
// shape; a negative entry of shape matches any size, and no shape at all
// skips the check. The slice is the state's own: copy it before changing it
// if the state is shared.
func (s *State) Get(name string, shape ...int) ([]float32, error) {
	p, err := s.Param(name)
	if err != nil {
		return nil, err
	}
	if shape != nil && !shapeMatches(p.Shape, shape) {
		return nil, fmt.Errorf("weights: %s: tensor %q: shape %v, want %v: %w", s.Source, name, p.Shape, shape, ErrShape)
	}
	return p.Data, nil
}

// Scalar returns the single value of a tensor of shape [] or [1] (such as
// logit_scale).
func (s *State) Scalar(name string) (float32, error) {
	p, err := s.Param(name)
	if err != nil {
		return 0, err
	}
	if len(p.Data) != 1 || len(p.Shape) > 1 {
		return 0, fmt.Errorf("weights: %s: tensor %q: shape %v, want a scalar: %w", s.Source, name, p.Shape, ErrShape)
	}
	return p.Data[0], nil
}

// Shape returns the shape of tensor name.
func (s *State) Shape(name string) ([]int, error) {
	p, err := s.Param(name)
	if err != nil {
		return nil, err
	}
	return p.Shape, nil
}

func shapeMatches(got, want []int) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		if w >= 0 && got[i] != w {
			return false
		}
	}
	return true
}

// Tensors returns the state as tensors for Write, in order. Float tensors
// are stored as dtype (F32, F16, BF16 or F64); an empty dtype keeps each
// tensor's original dtype where it is a float type and F32 otherwise.
// The data slices are shared with the state.
func (s *State) Tensors(dtype DType) []Tensor {
	out := make([]Tensor, 0, len(s.order))
	for _, name := range s.order {
		p := s.params[name]
		dt := dtype
		if dt == "" {
			dt = p.DType
			if !dt.IsFloat() {
				dt = F32
			}
		}
		out = append(out, Tensor{Name: name, DType: dt, Shape: p.Shape, Data: p.Data})
	}
	return out
}

// Load reads a model state from path, recognising the format by content:
// a safetensors file (plain or zstd-compressed), a PyTorch zip archive
// (torch.save state dict or TorchScript module), or a directory in the
// Hugging Face layout (model.safetensors[.zst], a sharded
// model.safetensors.index.json, or pytorch_model.bin / open_clip_pytorch_model.bin,
// with config.json or open_clip_config.json beside it).
func Load(path string) (*State, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	if st.IsDir() {
		return loadDir(path)
	}
	return loadFile(path)
}

func loadFile(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	defer f.Close()
	data, unmap, err := mapFile(f)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	if unmap != nil {
		defer unmap()
	}
	return loadBytes(path, data)
}

// loadBytes reads a state from a file's contents. Nothing in the State
// refers to data afterwards.
func loadBytes(path string, data []byte) (*State, error) {
	switch {
	case isZstd(data):
		dec, err := decompressZstd(data)
		if err != nil {
			return nil, fmt.Errorf("weights: %s: %w", path, err)
		}
		return stateFromSafetensors(path, dec)
	case bytes.HasPrefix(data, []byte("PK\x03\x04")) || bytes.HasPrefix(data, []byte("PK\x05\x06")):
		return loadPyTorch(path, data)
	case len(data) >= 2 && data[0] == 0x80 && data[1] <= 5:
		return nil, fmt.Errorf("weights: %s: a legacy (pre-zip, torch < 1.6) PyTorch file; re-save it with a recent torch.save", path)
	case len(data) >= 9 && (data[8] == '{' || data[8] == ' '):
		return stateFromSafetensors(path, data)
	}
	return nil, fmt.Errorf("weights: %s: unrecognised file format (not safetensors, zstd or a PyTorch zip)", path)
}

func stateFromSafetensors(path string, data []byte) (*State, error) {
	f, err := parse(path, data)
	if err != nil {
		return nil, err
	}
	s := NewState(path)
	s.Format = FormatSafetensors
	s.Metadata = f.Metadata
	for _, name := range f.order {
		ti := f.tensors[name]
		p := &Param{Name: name, Shape: ti.Shape, DType: ti.DType, Data: make([]float32, ti.NumElements())}
		if err := decodeFloat32(p.Data, ti.DType, f.body[ti.Begin:ti.End]); err != nil {
			return nil, fmt.Errorf("weights: %s: tensor %q: %w", path, name, err)
		}
		s.Set(p)
	}
	for _, key := range []string{"config", "model_config"} {
		if c, ok := s.Metadata[key]; ok && json.Valid([]byte(c)) {
			s.ConfigJSON = []byte(c)
			break
		}
	}
	return s, nil
}

// loadDir reads a model directory in the Hugging Face layout.
func loadDir(dir string) (*State, error) {
	var s *State
	var err error
	index := filepath.Join(dir, "model.safetensors.index.json")
	if _, e := os.Stat(index); e == nil {
		s, err = loadSharded(dir, index)
	} else {
		found := ""
		for _, name := range []string{"model.safetensors", "model.safetensors.zst", "open_clip_model.safetensors",
			"pytorch_model.bin", "open_clip_pytorch_model.bin"} {
			if _, e := os.Stat(filepath.Join(dir, name)); e == nil {
				found = name
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("weights: %s: no model.safetensors, model.safetensors.zst, pytorch_model.bin or open_clip_pytorch_model.bin in the directory", dir)
		}
		s, err = loadFile(filepath.Join(dir, found))
	}
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"config.json", "open_clip_config.json"} {
		b, e := os.ReadFile(filepath.Join(dir, name))
		if e == nil {
			s.ConfigJSON = b
			break
		}
	}
	return s, nil
}

// loadSharded reads the shards listed in a model.safetensors.index.json.
func loadSharded(dir, index string) (*State, error) {
	b, err := os.ReadFile(index)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("weights: %s: not a safetensors index (want a non-empty weight_map): %v", index, err)
	}
	var shards []string
	for _, f := range idx.WeightMap {
		if !slices.Contains(shards, f) {
			shards = append(shards, f)
		}
	}
	sort.Strings(shards)
	s := NewState(dir)
	s.Format = FormatSafetensors
	for _, shard := range shards {
		if shard != filepath.Base(shard) || strings.HasPrefix(shard, ".") {
			return nil, fmt.Errorf("weights: %s: shard name %q is not a plain file name", index, shard)
		}
		part, err := loadFile(filepath.Join(dir, shard))
		if err != nil {
			return nil, err
		}
		for _, name := range part.order {
			if s.Has(name) {
				return nil, fmt.Errorf("weights: %s: tensor %q appears in two shards", dir, name)
			}
			s.Set(part.params[name])
		}
		if s.Metadata == nil {
			s.Metadata = part.Metadata
		}
	}
	for name, shard := range idx.WeightMap {
		if !s.Has(name) {
			return nil, fmt.Errorf("weights: %s: tensor %q listed in the index is missing from %s: %w", dir, name, shard, ErrNotFound)
		}
	}
	return s, nil
}
