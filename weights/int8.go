package weights

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/subtta/subtta/autograd/kernel"
)

// Int8ScaleSuffix names the scales of a weight stored in int8: the I8
// tensor W [rows, ...] has beside it the float tensor W + Int8ScaleSuffix
// of shape [rows], and row j of W stands for scale[j]·q[j, ...]
// (kernel.QuantizeInt8Rows: per output channel, symmetric, the row's
// largest magnitude at ±127). Convert writes such files (ConvertOptions
// with DType I8); Load dequantises them.
const Int8ScaleSuffix = ".int8_scale"

// Int8Quantization is the "quantization" metadata of a file Convert writes
// with DType I8.
const Int8Quantization = "int8 per output channel, symmetric: I8 tensor W [rows, ...] " +
	"holds q = RoundToEven(w·127/max|w_row|) clamped to ±127; F32 tensor W" + Int8ScaleSuffix +
	" [rows] holds scale = max|w_row|/127; w ≈ q·scale"

// ErrInt8Scale is wrapped by the errors for a weight stored in int8 that
// cannot be dequantised: an I8 tensor without its scale tensor, a scale
// tensor that is not a float tensor of shape [rows], a scale that is NaN,
// infinite or negative, a scale whose products overflow float32, and a
// scale tensor beside a weight that is not I8 (or beside none).
var ErrInt8Scale = errors.New("int8 weight and its scale do not match")

// Int8Names lists the OpenAI names of the weights a model of this
// configuration runs in int8 under --precision int8 (vit.Model.SetPrecision
// and textenc.Model.SetPrecision): the patch projection visual.conv1.weight
// ([width, 3, patch, patch], a linear layer over flattened patches whose
// rows are its output channels) and, in every block of both towers, the
// four linear layers' weights (attn.in_proj_weight, attn.out_proj.weight,
// mlp.c_fc.weight, mlp.c_proj.weight). They are what Convert stores in int8
// with DType I8; the embeddings, LayerNorms, biases and the two final
// projections (visual.proj, text_projection), which stay float32 under
// --precision int8, stay F32.
func (c *CLIPConfig) Int8Names() []string {
	n := c.TensorNames()
	names := []string{n.Vision.Conv}
	for _, blocks := range [][]BlockNames{n.Vision.Blocks, n.Text.Blocks} {
		for _, b := range blocks {
			names = append(names, b.QKV.Weight, b.Out.Weight, b.FC.Weight, b.Proj.Weight)
		}
	}
	return names
}

// quantizeInt8 returns p as an I8 tensor and its scale tensor, quantised
// by kernel.QuantizeInt8Rows, the rule --precision int8 applies at loading:
// rows are the first dimension, so that loading the file and running it in
// int8 quantises the loaded weights to these values again. A NaN or an
// infinity is an error wrapping kernel.ErrNonFinite that names the tensor.
func quantizeInt8(p *Param) (w, scale Tensor, err error) {
	if len(p.Shape) < 2 {
		return w, scale, fmt.Errorf("weights: tensor %q: shape %v: int8 needs a weight of two or more dimensions", p.Name, p.Shape)
	}
	rows := p.Shape[0]
	cols := 0
	if rows > 0 {
		cols = len(p.Data) / rows
	}
	q, s, err := kernel.QuantizeInt8Rows(p.Name, p.Data, rows, cols)
	if err != nil {
		return w, scale, fmt.Errorf("weights: %w", err)
	}
	return Tensor{Name: p.Name, DType: I8, Shape: p.Shape, Data: q},
		Tensor{Name: p.Name + Int8ScaleSuffix, DType: F32, Shape: []int{rows}, Data: s}, nil
}

// dequantizeInt8 replaces every I8 tensor of s by the float32 weight it
// stands for, q·scale (one float32 rounding: q is exact in float32), and
// removes the scale tensors. Every I8 tensor needs its scale tensor, and
// every scale tensor an I8 weight; each mismatch is an error wrapping
// ErrInt8Scale that names the tensor.
func (s *State) dequantizeInt8() error {
	bad := func(name, format string, a ...any) error {
		return fmt.Errorf("weights: %s: tensor %q: %s: %w", s.Source, name, fmt.Sprintf(format, a...), ErrInt8Scale)
	}
	var scales []string
	for _, name := range s.order {
		p := s.params[name]
		if base, ok := strings.CutSuffix(name, Int8ScaleSuffix); ok {
			if w, ok := s.params[base]; !ok {
				return bad(name, "a scale tensor with no weight %q beside it", base)
			} else if w.DType != I8 {
				return bad(name, "a scale tensor beside weight %q of dtype %s: only I8 weights have scales", base, w.DType)
			}
			scales = append(scales, name)
			continue
		}
		if p.DType != I8 {
			continue
		}
		sp, ok := s.params[name+Int8ScaleSuffix]
		if !ok {
			return bad(name, "an I8 weight without its scale tensor %q", name+Int8ScaleSuffix)
		}
		if len(p.Shape) == 0 {
			return bad(name, "an I8 scalar: an int8 weight has rows")
		}
		if !sp.DType.IsFloat() || len(sp.Shape) != 1 || sp.Shape[0] != p.Shape[0] {
			return bad(sp.Name, "scales of %s %v for I8 weight %q of shape %v: want a float tensor [%d]",
				sp.DType, sp.Shape, name, p.Shape, p.Shape[0])
		}
		rows := p.Shape[0]
		cols := 0
		if rows > 0 {
			cols = len(p.Data) / rows
		}
		for j, sc := range sp.Data {
			if math.IsNaN(float64(sc)) || math.IsInf(float64(sc), 0) || sc < 0 {
				return bad(sp.Name, "scale %d of %d is %v: want a finite scale ≥ 0", j, rows, sc)
			}
			if math.IsInf(float64(127*sc), 0) { // the largest product, rounded to float32
				return bad(sp.Name, "scale %d of %d is %v: its product with 127 overflows float32", j, rows, sc)
			}
		}
		// p.Data holds q exactly (decoded from I8).
		for j, sc := range sp.Data {
			row := p.Data[j*cols : (j+1)*cols]
			for i, q := range row {
				row[i] = q * sc
			}
		}
	}
	for _, name := range scales {
		s.Delete(name)
	}
	return nil
}
