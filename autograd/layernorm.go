package autograd

import (
	"fmt"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// LayerNormParams holds the affine parameters of a LayerNorm over rows of
// width n: gamma (PyTorch's weight) and beta (its bias), n values each.
// They are frozen unless marked trainable (SetTrainable), which is how
// test-time adaptation selects what it updates.
type LayerNormParams struct {
	Gamma smat.Matrix
	Beta  smat.Matrix
	Eps   float64 // added to the variance; PyTorch's default is 1e-5
}

// NewLayerNormParams returns LayerNorm parameters. It panics if gamma and
// beta differ in size or element type.
func NewLayerNormParams(gamma, beta smat.Matrix, eps float64) *LayerNormParams {
	if gamma.Size() != beta.Size() {
		panic(fmt.Sprintf("autograd: NewLayerNormParams: gamma has %d values, beta %d", gamma.Size(), beta.Size()))
	}
	sameType("NewLayerNormParams", gamma, beta)
	return &LayerNormParams{Gamma: gamma, Beta: beta, Eps: eps}
}

// SetTrainable marks gamma and beta as requiring gradients (or not).
func (p *LayerNormParams) SetTrainable(trainable bool) {
	p.Gamma.SetRequiresGrad(trainable)
	p.Beta.SetRequiresGrad(trainable)
}

// Parameters lists gamma and beta, for an optimizer.
func (p *LayerNormParams) Parameters() []smat.Matrix { return []smat.Matrix{p.Gamma, p.Beta} }

// LayerNorm normalises every row of x [rows, n] (biased variance, p.Eps)
// and applies gamma and beta. It panics if n is not the parameters' size.
func LayerNorm(x smat.Tensor, p *LayerNormParams) smat.Tensor {
	_, cols := dims(x)
	if cols != p.Gamma.Size() {
		panic(fmt.Sprintf("autograd: LayerNorm: input has %d columns, parameters have %d", cols, p.Gamma.Size()))
	}
	if sameType("LayerNorm", x, p.Gamma, p.Beta) {
		return run(newLayerNorm[float32](x, p))
	}
	return run(newLayerNorm[float64](x, p))
}

type layerNormOp[T dtype] struct {
	x          smat.Tensor
	p          *LayerNormParams
	rows, cols int
	mean, rstd []T
	operands   []smat.Tensor
}

func newLayerNorm[T dtype](x smat.Tensor, p *LayerNormParams) *layerNormOp[T] {
	rows, cols := dims(x)
	return &layerNormOp[T]{x: x, p: p, rows: rows, cols: cols, operands: []smat.Tensor{x, p.Gamma, p.Beta}}
}

func (op *layerNormOp[T]) Operands() []smat.Tensor { return op.operands }

func (op *layerNormOp[T]) Forward() (smat.Tensor, error) {
	y := make([]T, op.rows*op.cols)
	stats := make([]T, 2*op.rows)
	op.mean, op.rstd = stats[:op.rows], stats[op.rows:]
	kernel.LayerNorm(y, values[T](op.x), op.rows, op.cols, values[T](op.p.Gamma), values[T](op.p.Beta), op.p.Eps, op.mean, op.rstd)
	return newMatrix(y, op.rows, op.cols), nil
}

func (op *layerNormOp[T]) Backward(gy smat.Tensor) error {
	n := op.rows * op.cols
	var dx, dg, db []T
	var bufX, bufP *[]T
	if op.x.RequiresGrad() {
		bufX = getBuf[T](n)
		dx = *bufX
	}
	trainG, trainB := op.p.Gamma.RequiresGrad(), op.p.Beta.RequiresGrad()
	if trainG || trainB {
		bufP = getZeroBuf[T](2 * op.cols)
		dg, db = (*bufP)[:op.cols], (*bufP)[op.cols:]
	}
	kernel.LayerNormBackward(dx, dg, db, values[T](gy), values[T](op.x), op.rows, op.cols, values[T](op.p.Gamma), op.mean, op.rstd)
	if bufX != nil {
		accGrad(op.x, dx)
		putBuf(bufX)
	}
	if bufP != nil {
		if trainG {
			accGrad(op.p.Gamma, dg)
		}
		if trainB {
			accGrad(op.p.Beta, db)
		}
		putBuf(bufP)
	}
	return nil
}
