package autograd

import (
	"fmt"

	"github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// LinearParams holds the weights of an affine layer y = x·Wᵀ + b, stored as
// PyTorch's nn.Linear stores them.
//
// The weight is packed for the GEMM kernel on every call, into pooled
// scratch, rather than kept packed: a packed copy of every weight would add
// the model's size again to the memory that test-time adaptation holds
// (350 MB for ViT-B/32, twice that in garbage-collector headroom), for a
// packing cost of 1–2% of the product at batch 64.
type LinearParams struct {
	Weight mat.Matrix // [out, in]
	Bias   mat.Matrix // out values (any shape of that size), or nil for no bias
}

// NewLinearParams returns the parameters of a layer with weight w [out, in]
// and bias b (out values, or nil). It panics if the shapes disagree.
func NewLinearParams(w, b mat.Matrix) *LinearParams {
	p := &LinearParams{Weight: w, Bias: b}
	if b != nil && b.Size() != p.Out() {
		panic(fmt.Sprintf("autograd: NewLinearParams: bias has %d values, weight has %d rows", b.Size(), p.Out()))
	}
	if b != nil {
		sameType("NewLinearParams", w, b)
	}
	return p
}

// In is the number of input features (columns of the weight).
func (p *LinearParams) In() int { _, c := dims(p.Weight); return c }

// Out is the number of output features (rows of the weight).
func (p *LinearParams) Out() int { r, _ := dims(p.Weight); return r }

// Parameters lists the weight and the bias (if any), for an optimizer.
func (p *LinearParams) Parameters() []mat.Matrix {
	if p.Bias == nil {
		return []mat.Matrix{p.Weight}
	}
	return []mat.Matrix{p.Weight, p.Bias}
}

// Linear returns x·Wᵀ + b for x [rows, in]: a [rows, out] matrix. The input
// always gets its gradient when it requires one; W and b get theirs when
// they require gradients (trainable).
// It panics if x's width is not the layer's input size.
func Linear(x mat.Tensor, p *LinearParams) mat.Tensor {
	if sameType("Linear", x, p.Weight, p.Bias) {
		return newLinear[float32](x, p)
	}
	return newLinear[float64](x, p)
}

type linearOp[T dtype] struct {
	x             mat.Tensor
	p             *LinearParams
	rows, in, out int
	operands      []mat.Tensor
}

func newLinear[T dtype](x mat.Tensor, p *LinearParams) mat.Tensor {
	rows, in := dims(x)
	if in != p.In() {
		panic(fmt.Sprintf("autograd: Linear: input has %d columns, weight expects %d", in, p.In()))
	}
	op := &linearOp[T]{x: x, p: p, rows: rows, in: in, out: p.Out()}
	op.operands = []mat.Tensor{x, p.Weight}
	if p.Bias != nil {
		op.operands = append(op.operands, p.Bias)
	}
	return run(op)
}

func (op *linearOp[T]) Operands() []mat.Tensor { return op.operands }

func (op *linearOp[T]) Forward() (mat.Tensor, error) {
	y := make([]T, op.rows*op.out)
	linearInto(op.p, op.rows, values[T](op.x), y)
	return newMatrix(y, op.rows, op.out), nil
}

func (op *linearOp[T]) Backward(gy mat.Tensor) error {
	dy := values[T](gy)
	if op.x.RequiresGrad() {
		buf := getBuf[T](op.rows * op.in)
		linearInputGrad(op.p, op.rows, dy, *buf)
		accGrad(op.x, *buf)
		putBuf(buf)
	}
	linearParamGrads(op.p, op.rows, dy, values[T](op.x))
	return nil
}

// linearInto computes y = x·Wᵀ + b for x [rows, in] into y [rows, out].
func linearInto[T dtype](p *LinearParams, rows int, x, y []T) {
	in, out := p.In(), p.Out()
	if x32, ok := any(x).([]float32); ok && p.Bias != nil {
		linear32(rows, out, in, x32, any(values[T](p.Weight)).([]float32), any(values[T](p.Bias)).([]float32), any(y).([]float32))
		return
	}
	gemm(false, true, rows, out, in, 1, x, in, values[T](p.Weight), in, 0, y, out)
	if p.Bias != nil {
		kernel.AddRowVector(y, rows, out, values[T](p.Bias))
	}
}

// linearInputGrad computes dx = dy·W [rows, in] from dy [rows, out],
// overwriting dx.
func linearInputGrad[T dtype](p *LinearParams, rows int, dy, dx []T) {
	in, out := p.In(), p.Out()
	gemm(false, false, rows, in, out, 1, dy, out, values[T](p.Weight), in, 0, dx, in)
}

// linearParamGrads adds dyᵀ·x to the weight's gradient and the column sums
// of dy to the bias's, for those that require gradients; x is the layer's
// input [rows, in].
func linearParamGrads[T dtype](p *LinearParams, rows int, dy, x []T) {
	in, out := p.In(), p.Out()
	if p.Weight.RequiresGrad() {
		buf := getBuf[T](out * in)
		gemm(true, false, out, in, rows, 1, dy, out, x, in, 0, *buf, in)
		accGrad(p.Weight, *buf)
		putBuf(buf)
	}
	if p.Bias != nil && p.Bias.RequiresGrad() {
		buf := getZeroBuf[T](out)
		kernel.SumRows(*buf, dy, rows, out)
		accGrad(p.Bias, *buf)
		putBuf(buf)
	}
}

// trainable reports whether the weight or the bias requires gradients.
func (p *LinearParams) trainable() bool {
	return p.Weight.RequiresGrad() || p.Bias != nil && p.Bias.RequiresGrad()
}
