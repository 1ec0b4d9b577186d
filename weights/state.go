package weights

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
	// Metadata is the safetensors __metadata__ (nil for other formats);
	// MetadataClasses and MetadataTemplates are keys of it.
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

// ErrNotFinite is wrapped by CheckFinite's error for a tensor holding a
// NaN or an infinity.
var ErrNotFinite = errors.New("not finite")

// CheckFinite returns an error wrapping ErrNotFinite that names the first
// of the named tensors holding a NaN or an infinity, and where: a model
// with such a weight computes NaN for every input, which is better refused
// at loading than printed as probabilities. Names the state lacks are
// skipped.
func (s *State) CheckFinite(names []string) error {
	for _, name := range names {
		p, ok := s.params[name]
		if !ok {
			continue
		}
		for i, v := range p.Data {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("weights: %s: tensor %q: element %d of %d is %v: %w", s.Source, name, i, len(p.Data), v, ErrNotFinite)
			}
		}
	}
	return nil
}

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

// Keys of a safetensors file's metadata that record, as JSON lists of
// strings, the class names and prompt templates a model was trained with
// (written by pretrain's SaveModel, read by clip.New).
const (
	MetadataClasses   = "classes"
	MetadataTemplates = "templates"
)
