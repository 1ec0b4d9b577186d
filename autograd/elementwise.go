package autograd

import (
	"fmt"
	"math"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// QuickGELU returns x·σ(1.702·x) elementwise, CLIP's MLP activation.
func QuickGELU(x smat.Tensor) smat.Tensor {
	if is32("QuickGELU", x) {
		return run(&activationOp[float32]{x: x, gelu: false})
	}
	return run(&activationOp[float64]{x: x, gelu: false})
}

// GELU returns the exact GELU x·Φ(x) = x·(1+erf(x/√2))/2 elementwise.
func GELU(x smat.Tensor) smat.Tensor {
	if is32("GELU", x) {
		return run(&activationOp[float32]{x: x, gelu: true})
	}
	return run(&activationOp[float64]{x: x, gelu: true})
}

type activationOp[T dtype] struct {
	x    smat.Tensor
	gelu bool // exact GELU; QuickGELU otherwise
}

func (op *activationOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x} }

func (op *activationOp[T]) Forward() (smat.Tensor, error) {
	x := values[T](op.x)
	y := make([]T, len(x))
	if op.gelu {
		kernel.GELU(y, x)
	} else {
		kernel.QuickGELU(y, x)
	}
	r, c := dims(op.x)
	return newMatrix(y, r, c), nil
}

func (op *activationOp[T]) Backward(gy smat.Tensor) error {
	if !op.x.RequiresGrad() {
		return nil
	}
	x := values[T](op.x)
	buf := getBuf[T](len(x))
	if op.gelu {
		kernel.GELUBackward(*buf, values[T](gy), x)
	} else {
		kernel.QuickGELUBackward(*buf, values[T](gy), x)
	}
	accGrad(op.x, *buf)
	putBuf(buf)
	return nil
}

// Add returns a + b for matrices of the same shape (a residual connection).
// It panics if the shapes differ.
func Add(a, b smat.Tensor) smat.Tensor {
	ra, ca := dims(a)
	rb, cb := dims(b)
	if ra != rb || ca != cb {
		panic(fmt.Sprintf("autograd: Add: shapes [%d, %d] and [%d, %d] differ", ra, ca, rb, cb))
	}
	if sameType("Add", a, b) {
		return run(&addOp[float32]{a: a, b: b})
	}
	return run(&addOp[float64]{a: a, b: b})
}

// AddTiled returns x + y where y [r, c] is repeated down x [k·r, c]: the
// same y is added to each block of r consecutive rows. It adds a positional
// embedding [tokens, width] to a batch of sequences [batch·tokens, width].
// It panics if x's rows are not a multiple of y's or the widths differ.
func AddTiled(x, y smat.Tensor) smat.Tensor {
	rx, cx := dims(x)
	ry, cy := dims(y)
	if cx != cy || ry == 0 || rx%ry != 0 {
		panic(fmt.Sprintf("autograd: AddTiled: [%d, %d] does not tile [%d, %d]", ry, cy, rx, cx))
	}
	if sameType("AddTiled", x, y) {
		return run(&addOp[float32]{a: x, b: y, tiled: true})
	}
	return run(&addOp[float64]{a: x, b: y, tiled: true})
}

type addOp[T dtype] struct {
	a, b  smat.Tensor
	tiled bool // b's rows repeat down a
}

func (op *addOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.a, op.b} }

func (op *addOp[T]) Forward() (smat.Tensor, error) {
	a, b := values[T](op.a), values[T](op.b)
	y := make([]T, len(a))
	if op.tiled {
		for i := 0; i < len(a); i += len(b) {
			kernel.Add(y[i:i+len(b)], a[i:i+len(b)], b)
		}
	} else {
		kernel.Add(y, a, b)
	}
	r, c := dims(op.a)
	return newMatrix(y, r, c), nil
}

func (op *addOp[T]) Backward(gy smat.Tensor) error {
	if op.a.RequiresGrad() {
		op.a.AccGrad(gy) // copied or added by AccGrad, never kept
	}
	if !op.b.RequiresGrad() {
		return nil
	}
	if !op.tiled {
		op.b.AccGrad(gy)
		return nil
	}
	dy := values[T](gy)
	n := op.b.Size()
	buf := getZeroBuf[T](n)
	kernel.SumRows(*buf, dy, len(dy)/n, n) // sum of the blocks
	accGrad(op.b, *buf)
	putBuf(buf)
	return nil
}

// Scale returns alpha·x (alpha a constant, such as CLIP's logit scale).
func Scale(x smat.Tensor, alpha float64) smat.Tensor {
	if is32("Scale", x) {
		return run(&scaleOp[float32]{x: x, alpha: alpha})
	}
	return run(&scaleOp[float64]{x: x, alpha: alpha})
}

type scaleOp[T dtype] struct {
	x     smat.Tensor
	alpha float64
}

func (op *scaleOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x} }

func (op *scaleOp[T]) Forward() (smat.Tensor, error) {
	x := values[T](op.x)
	y := make([]T, len(x))
	kernel.Scale(y, T(op.alpha), x)
	r, c := dims(op.x)
	return newMatrix(y, r, c), nil
}

func (op *scaleOp[T]) Backward(gy smat.Tensor) error {
	if !op.x.RequiresGrad() {
		return nil
	}
	dy := values[T](gy)
	buf := getBuf[T](len(dy))
	kernel.Scale(*buf, T(op.alpha), dy)
	accGrad(op.x, *buf)
	putBuf(buf)
	return nil
}

// ExpScale returns exp(t)·x for a 1×1 tensor t: CLIP's logits with a
// learned temperature, logit_scale.exp() · similarities. Both operands may
// require gradients: ∂/∂x = exp(t)·dy and ∂/∂t = Σ dy·y.
func ExpScale(x, t smat.Tensor) smat.Tensor {
	if r, c := dims(t); r*c != 1 {
		panic(fmt.Sprintf("autograd: ExpScale: scale is [%d, %d], want one value", r, c))
	}
	if sameType("ExpScale", x, t) {
		return run(&expScaleOp[float32]{x: x, t: t})
	}
	return run(&expScaleOp[float64]{x: x, t: t})
}

type expScaleOp[T dtype] struct {
	x, t smat.Tensor
	y    []T
}

func (op *expScaleOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x, op.t} }

func (op *expScaleOp[T]) scale() T { return T(math.Exp(float64(values[T](op.t)[0]))) }

func (op *expScaleOp[T]) Forward() (smat.Tensor, error) {
	x := values[T](op.x)
	op.y = make([]T, len(x))
	kernel.Scale(op.y, op.scale(), x)
	r, c := dims(op.x)
	return newMatrix(op.y, r, c), nil
}

func (op *expScaleOp[T]) Backward(gy smat.Tensor) error {
	dy := values[T](gy)
	if op.t.RequiresGrad() {
		var s float64
		for i, g := range dy {
			s += float64(g) * float64(op.y[i])
		}
		accGrad(op.t, []T{T(s)})
	}
	if op.x.RequiresGrad() {
		buf := getBuf[T](len(dy))
		kernel.Scale(*buf, op.scale(), dy)
		accGrad(op.x, *buf)
		putBuf(buf)
	}
	return nil
}
