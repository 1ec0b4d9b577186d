package autograd

import (
	"fmt"
	"sync"

	"github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// LinearParams holds the weights of an affine layer y = x·Wᵀ + b, stored as
// PyTorch's nn.Linear stores them.
//
// A weight that does not require gradients is frozen: in float32, Linear
// packs Wᵀ once for the GEMM kernel and reuses it on every forward call (the
// backward pass packs W per call into pooled scratch). Call Invalidate after
// changing a frozen weight's values (or after kernel.SetKernel).
type LinearParams struct {
	Weight mat.Matrix // [out, in]
	Bias   mat.Matrix // out values (any shape of that size), or nil for no bias

	mu         sync.Mutex
	packedWT   *kernel.PackedB // op(B) = Wᵀ (in×out): forward
	packedFrom []float32       // the weight data that was packed
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

// Invalidate drops the packed copies of a frozen weight, so that the next
// call packs the current values again.
func (p *LinearParams) Invalidate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.packedWT != nil {
		p.packedWT.Release()
	}
	p.packedWT, p.packedFrom = nil, nil
}

// packed returns the packed Wᵀ of a frozen float32 weight, packing it on
// first use; nil when the weight is trainable.
func (p *LinearParams) packed() *kernel.PackedB {
	w, ok := p.Weight.(*mat.Dense[float32])
	if !ok || w.RequiresGrad() || w.Size() == 0 {
		return nil
	}
	data := values[float32](w)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.packedFrom) > 0 && &p.packedFrom[0] != &data[0] {
		// The weight matrix was replaced: repack.
		if p.packedWT != nil {
			p.packedWT.Release()
		}
		p.packedWT = nil
	}
	p.packedFrom = data
	out, in := p.Out(), p.In()
	if p.packedWT == nil {
		p.packedWT = kernel.PackB(true, in, out, data, in)
	}
	return p.packedWT
}

// Linear returns x·Wᵀ + b for x [rows, in]: a [rows, out] matrix. The input
// always gets its gradient when it requires one; W and b get theirs when
// they require gradients (trainable), and are packed once when frozen.
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
	x := values[T](op.x)
	y := make([]T, op.rows*op.out)
	if pw := op.p.packed(); pw != nil {
		kernel.GemmPacked(false, op.rows, 1, any(x).([]float32), op.in, pw, 0, any(y).([]float32), op.out)
	} else {
		gemm(false, true, op.rows, op.out, op.in, 1, x, op.in, values[T](op.p.Weight), op.in, 0, y, op.out)
	}
	if op.p.Bias != nil {
		kernel.AddRowVector(y, op.rows, op.out, values[T](op.p.Bias))
	}
	return newMatrix(y, op.rows, op.out), nil
}

func (op *linearOp[T]) Backward(gy mat.Tensor) error {
	dy := values[T](gy)
	if op.x.RequiresGrad() {
		buf := getBuf[T](op.rows * op.in)
		dx := *buf
		// dX = dY·W. W is packed per call into pooled scratch rather than
		// kept packed: that costs 1/rows of the product and saves a second
		// copy of every frozen weight.
		gemm(false, false, op.rows, op.in, op.out, 1, dy, op.out, values[T](op.p.Weight), op.in, 0, dx, op.in)
		accGrad(op.x, dx)
		putBuf(buf)
	}
	if op.p.Weight.RequiresGrad() {
		buf := getBuf[T](op.out * op.in)
		gemm(true, false, op.out, op.in, op.rows, 1, dy, op.out, values[T](op.x), op.in, 0, *buf, op.in)
		accGrad(op.p.Weight, *buf)
		putBuf(buf)
	}
	if op.p.Bias != nil && op.p.Bias.RequiresGrad() {
		buf := getZeroBuf[T](op.out)
		kernel.SumRows(*buf, dy, op.rows, op.out)
		accGrad(op.p.Bias, *buf)
		putBuf(buf)
	}
	return nil
}
