// Package build turns the tensors of a checkpoint into the parameter types
// of package autograd, for the model packages (vit, textenc). It records the
// first error and turns every later call into a no-op, so a model
// constructor reads as a flat list of tensors and checks the error once.
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
}

// Matrix returns tensor name as a rows×cols matrix, checking its shape
// (shape gives the expected dimensions; the matrix is 2-D with the first
// dimension as rows and the rest flattened into columns; a 1-D tensor
// becomes a 1×n row).
func (b *Builder) Matrix(name string, shape ...int) smat.Matrix {
	if b.Err != nil {
		return nil
	}
	data, err := b.State.Get(name, shape...)
	if err != nil {
		b.Err = err
		return nil
	}
	s, err := b.State.Shape(name)
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
		return smat.NewDense[float64](smat.WithShape(rows, cols), smat.WithBacking(d))
	}
	return smat.NewDense[float32](smat.WithShape(rows, cols), smat.WithBacking(append([]float32(nil), data...)))
}

// LayerNorm returns prefix+"weight" and prefix+"bias" (width values each).
func (b *Builder) LayerNorm(prefix string, width int) *autograd.LayerNormParams {
	g := b.Matrix(prefix+"weight", width)
	be := b.Matrix(prefix+"bias", width)
	if b.Err != nil {
		return nil
	}
	return autograd.NewLayerNormParams(g, be, b.Eps)
}

// Linear returns prefix+weightName [out, in] and, when biasName is not
// empty, prefix+biasName [out].
func (b *Builder) Linear(prefix, weightName, biasName string, out, in int) *autograd.LinearParams {
	w := b.Matrix(prefix+weightName, out, in)
	var bias smat.Matrix
	if biasName != "" {
		bias = b.Matrix(prefix+biasName, out)
	}
	if b.Err != nil {
		return nil
	}
	return autograd.NewLinearParams(w, bias)
}

// Block returns the pre-LN residual block whose tensors start with prefix
// ("visual.transformer.resblocks.0.", "transformer.resblocks.0."), as
// both CLIP towers hold it.
func (b *Builder) Block(prefix string, width, mlp, heads int, causal bool, activation string) *autograd.BlockParams {
	p := &autograd.BlockParams{
		LN1:    b.LayerNorm(prefix+"ln_1.", width),
		QKV:    b.Linear(prefix+"attn.", "in_proj_weight", "in_proj_bias", 3*width, width),
		Out:    b.Linear(prefix+"attn.out_proj.", "weight", "bias", width, width),
		LN2:    b.LayerNorm(prefix+"ln_2.", width),
		FC:     b.Linear(prefix+"mlp.c_fc.", "weight", "bias", mlp, width),
		Proj:   b.Linear(prefix+"mlp.c_proj.", "weight", "bias", width, mlp),
		Heads:  heads,
		Causal: causal,
		GELU:   activation == "gelu",
	}
	if b.Err != nil {
		return nil
	}
	return p
}
