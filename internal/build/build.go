// Package build turns the tensors of a checkpoint into the parameter types
// of package autograd, for the model packages (vit, textenc), and records
// each tensor it reads under its name (Params). It records the first error
// and turns every later call into a no-op, so a model constructor reads as
// a flat list of tensors and checks the error once.
package build

import (
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/weights"
)

// Builder reads tensors from a state in OpenAI names.
type Builder struct {
	State *weights.State
	F64   bool // build float64 matrices (reference runs) instead of float32
	Eps   float64
	Err   error
	// Params are the tensors read, in the order read, under their names:
	// the model's named parameters.
	Params []autograd.Named
}

// Matrix returns tensor name as a rows×cols matrix, checking its shape
// (shape gives the expected dimensions; the matrix is 2-D with the first
// dimension as rows and the rest flattened into columns; a 1-D tensor
// becomes a 1×n row).
func (b *Builder) Matrix(name string, shape ...int) smat.Matrix {
	return b.read(autograd.Named{Name: name}, shape)
}

// Weight is Matrix for a weight that weight decay applies to (see
// autograd.Named.Decay).
func (b *Builder) Weight(name string, shape ...int) smat.Matrix {
	return b.read(autograd.Named{Name: name, Decay: true}, shape)
}

// read reads the tensor p.Name and records it in Params as p.
func (b *Builder) read(p autograd.Named, shape []int) smat.Matrix {
	if b.Err != nil {
		return nil
	}
	data, err := b.State.Get(p.Name, shape...)
	if err != nil {
		b.Err = err
		return nil
	}
	s, err := b.State.Shape(p.Name)
	if err != nil {
		b.Err = err
		return nil
	}
	rows, cols := 1, len(data)
	if len(s) >= 2 {
		rows, cols = s[0], len(data)/max(s[0], 1)
	}
	if b.F64 {
		d := make([]float64, len(data))
		for i, v := range data {
			d[i] = float64(v)
		}
		p.Value = smat.NewDense[float64](smat.WithShape(rows, cols), smat.WithBacking(d))
	} else {
		p.Value = smat.NewDense[float32](smat.WithShape(rows, cols), smat.WithBacking(append([]float32(nil), data...)))
	}
	b.Params = append(b.Params, p)
	return p.Value
}

// LayerNorm returns the LayerNorm of the tensors names (width values each).
func (b *Builder) LayerNorm(names weights.LayerNormNames, width int) *autograd.LayerNormParams {
	g := b.read(autograd.Named{Name: names.Weight, LayerNorm: true}, []int{width})
	be := b.read(autograd.Named{Name: names.Bias, LayerNorm: true}, []int{width})
	if b.Err != nil {
		return nil
	}
	return autograd.NewLayerNormParams(g, be, b.Eps)
}

// Linear returns the linear layer of the tensors names: the weight
// [out, in] and the bias [out].
func (b *Builder) Linear(names weights.LinearNames, out, in int) *autograd.LinearParams {
	w := b.Weight(names.Weight, out, in)
	bias := b.Matrix(names.Bias, out)
	if b.Err != nil {
		return nil
	}
	return autograd.NewLinearParams(w, bias)
}

// Block returns the pre-LN residual block of the tensors names, as both
// CLIP towers hold it.
func (b *Builder) Block(names weights.BlockNames, width, mlp, heads int, causal bool, activation string) *autograd.BlockParams {
	p := &autograd.BlockParams{
		LN1:    b.LayerNorm(names.LN1, width),
		QKV:    b.Linear(names.QKV, 3*width, width),
		Out:    b.Linear(names.Out, width, width),
		LN2:    b.LayerNorm(names.LN2, width),
		FC:     b.Linear(names.FC, mlp, width),
		Proj:   b.Linear(names.Proj, width, mlp),
		Heads:  heads,
		Causal: causal,
		GELU:   activation == weights.GELU,
	}
	if b.Err != nil {
		return nil
	}
	return p
}
