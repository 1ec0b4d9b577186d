package autograd

import (
	"fmt"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/nlpodyssey/spago/mat/float"
)

// dtype is the element type of the ops: float32 for models, float64 for
// references and gradient checks.
type dtype = float.DType

// is32 reports whether t holds float32 values; it panics on anything that
// is not a *smat.Dense of float32 or float64.
func is32(op string, t smat.Tensor) bool {
	switch t.Value().(type) {
	case *smat.Dense[float32]:
		return true
	case *smat.Dense[float64]:
		return false
	case nil:
		panic(fmt.Sprintf("autograd: %s: nil tensor", op))
	default:
		panic(fmt.Sprintf("autograd: %s: unsupported tensor type %T", op, t.Value()))
	}
}

// sameType panics unless every non-nil tensor in ts has the element type of
// the first.
func sameType(op string, ts ...smat.Tensor) bool {
	f32 := is32(op, ts[0])
	for _, t := range ts[1:] {
		if t != nil && is32(op, t) != f32 {
			panic(fmt.Sprintf("autograd: %s: operands mix float32 and float64", op))
		}
	}
	return f32
}

// values returns the backing slice of t's value (no copy).
func values[T dtype](t smat.Tensor) []T {
	return float.SliceValueOf[T](t.Value().Data())
}

// dims returns the rows and columns of a 2-D tensor.
func dims(t smat.Tensor) (rows, cols int) {
	s := t.Value().Shape()
	if len(s) == 1 {
		return s[0], 1
	}
	return s[0], s[1]
}

// newMatrix wraps data (rows×cols) as a dense matrix without copying.
func newMatrix[T dtype](data []T, rows, cols int) *smat.Dense[T] {
	return smat.NewDense[T](smat.WithShape(rows, cols), smat.WithBacking(data))
}

// run records fn on the tape and runs its forward pass. When no operand
// requires gradients nothing can flow back through fn, so its result is
// returned as a plain matrix, off the tape: the operands (and everything they
// hold) are then not kept alive by the result, and a forward pass without
// gradients keeps only the activations still in use.
func run(fn ag.AutoGradFunction) smat.Tensor {
	if !anyRequiresGrad(fn.Operands()) {
		y, err := fn.Forward()
		if err != nil {
			panic(fmt.Sprintf("autograd: forward: %v", err)) // our ops never fail
		}
		return y
	}
	r := &releaseGrad{AutoGradFunction: fn}
	r.op = ag.NewOperator(r)
	return r.op.Run()
}

// anyRequiresGrad reports whether one of ts requires gradients.
func anyRequiresGrad(ts []smat.Tensor) bool {
	for _, t := range ts {
		if t != nil && t.RequiresGrad() {
			return true
		}
	}
	return false
}

// releaseGrad drops an operator's gradient once its backward pass has
// passed it on. spago keeps the gradient of every node until the graph is
// dropped, which holds a second activation-sized buffer per node through
// the whole backward pass; no gradient reaches a node after its own
// backward has run, so releasing it is safe. The gradients of leaves
// (parameters, inputs) are untouched.
type releaseGrad struct {
	ag.AutoGradFunction
	op *ag.Operator
}

func (r *releaseGrad) Backward(gy smat.Tensor) error {
	err := r.AutoGradFunction.Backward(gy)
	r.op.Value().ZeroGrad()
	return err
}

// accGrad adds g (with t's shape) to t's gradient. Dense.AccGrad copies or
// adds g and never keeps it, so g may be pooled scratch released after.
func accGrad[T dtype](t smat.Tensor, g []T) {
	s := t.Value().Shape()
	t.AccGrad(smat.NewDense[T](smat.WithShape(s...), smat.WithBacking(g)))
}

func isF32[T dtype]() bool {
	var z T
	_, ok := any(z).(float32)
	return ok
}
