package autograd

import (
	"fmt"
	"sync"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// LinearParams holds the weights of an affine layer y = x·Wᵀ + b, stored as
// PyTorch's nn.Linear stores them.
//
// A float32 weight is packed for the GEMM kernel on every call, into pooled
// scratch, unless KeepPacked is set: then a frozen weight is packed once
// per layout and kept.
type LinearParams struct {
	Weight smat.Matrix // [out, in]
	Bias   smat.Matrix // out values (any shape of that size), or nil for no bias

	packs *weightPacks // nil unless KeepPacked
	low   *lowWeight   // nil unless SetPrecision chose int8 or bf16
}

// weightPacks holds a frozen float32 weight packed for the GEMM kernel, each
// layout made on first use: W itself (the input gradient dy·W reads it) and
// Wᵀ (the forward product x·Wᵀ).
type weightPacks struct {
	mu    sync.Mutex
	w, wT *kernel.PackedB
	src   *float32 // the weight's first value when packed: a new Weight matrix drops the packs
	dev   *devCopy // the weight on the device set by SetDevice, made on first use there
	// devOnly keeps the device copy only (KeepOnDevice): the CPU packs the
	// weight at each call.
	devOnly bool
}

// KeepPacked makes the layer keep its weight packed for the GEMM kernel
// while the weight is frozen (float32 only), instead of packing it on every
// call: that saves the pack, about 2% of a ViT-B/32 pass at batch 64, for
// memory of up to twice the weight's size (one copy in each of the two
// layouts, the second made only by a backward pass). KeepPacked(false) drops
// the packed copies. Do not call it while the layer is in use.
//
// The copies are of the values the weight had when first used. While the
// weight is trainable they are not used, and they are dropped as soon as a
// call sees it trainable, so an optimizer's updates are never missed; a new
// Weight matrix is noticed too. But after writing into a frozen weight's
// values yourself, call KeepPacked(true) again.
func (p *LinearParams) KeepPacked(keep bool) {
	if keep {
		p.packs = &weightPacks{}
	} else {
		p.packs = nil
	}
}

// KeepOnDevice makes the layer keep its frozen weight (and bias) on the
// device set by SetDevice once uploaded there, as KeepPacked does, without
// packed copies on the CPU: for a tower whose CPU pass does not keep them
// (the text tower), at no cost in host memory. The same rules apply: a
// trainable weight is never kept, a new Weight matrix is noticed, and after
// writing into a frozen weight's values call KeepOnDevice(true) again.
// KeepPacked replaces it, and KeepOnDevice(false) drops the device copy of
// a layer that does not keep its weight packed.
func (p *LinearParams) KeepOnDevice(keep bool) {
	switch {
	case keep && (p.packs == nil || p.packs.devOnly):
		p.packs = &weightPacks{devOnly: true}
	case keep:
		p.packs.mu.Lock()
		p.packs.dev = nil
		p.packs.mu.Unlock()
	case p.packs != nil && p.packs.devOnly:
		p.packs = nil
	}
}

// packed32 returns W (trans false) or Wᵀ (trans true) packed for the
// kernel, and whether it is kept (the caller must not release it). w is the
// weight's values.
func (p *LinearParams) packed32(trans bool, w []float32) (pk *kernel.PackedB, kept bool) {
	out, in := p.Out(), p.In()
	k, n := out, in
	if trans {
		k, n = in, out
	}
	c := p.packs
	if c == nil || c.devOnly {
		return kernel.PackB(trans, k, n, w, in), false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.Weight.RequiresGrad() || len(w) == 0 {
		c.w, c.wT, c.dev = nil, nil, nil
		return kernel.PackB(trans, k, n, w, in), false
	}
	if c.src != &w[0] {
		c.w, c.wT, c.src = nil, nil, &w[0]
	}
	slot := &c.w
	if trans {
		slot = &c.wT
	}
	if *slot == nil || !(*slot).ForActiveKernel() {
		*slot = kernel.PackBToKeep(trans, k, n, w, in)
	}
	return *slot, true
}

// NewLinearParams returns the parameters of a layer with weight w [out, in]
// and bias b (out values, or nil). It panics if the shapes disagree.
func NewLinearParams(w, b smat.Matrix) *LinearParams {
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
func (p *LinearParams) Parameters() []smat.Matrix {
	if p.Bias == nil {
		return []smat.Matrix{p.Weight}
	}
	return []smat.Matrix{p.Weight, p.Bias}
}

// Linear returns x·Wᵀ + b for x [rows, in]: a [rows, out] matrix. The input
// always gets its gradient when it requires one; W and b get theirs when
// they require gradients (trainable).
// It panics if x's width is not the layer's input size.
func Linear(x smat.Tensor, p *LinearParams) smat.Tensor {
	if sameType("Linear", x, p.Weight, p.Bias) {
		return newLinear[float32](x, p)
	}
	return newLinear[float64](x, p)
}

type linearOp[T dtype] struct {
	x             smat.Tensor
	p             *LinearParams
	rows, in, out int
	operands      []smat.Tensor
}

func newLinear[T dtype](x smat.Tensor, p *LinearParams) smat.Tensor {
	rows, in := dims(x)
	if in != p.In() {
		panic(fmt.Sprintf("autograd: Linear: input has %d columns, weight expects %d", in, p.In()))
	}
	op := &linearOp[T]{x: x, p: p, rows: rows, in: in, out: p.Out()}
	op.operands = []smat.Tensor{x, p.Weight}
	if p.Bias != nil {
		op.operands = append(op.operands, p.Bias)
	}
	return run(op)
}

func (op *linearOp[T]) Operands() []smat.Tensor { return op.operands }

func (op *linearOp[T]) Forward() (smat.Tensor, error) {
	y := make([]T, op.rows*op.out)
	linearInto(op.p, op.rows, values[T](op.x), y, !anyRequiresGrad(op.operands))
	return newMatrix(y, op.rows, op.out), nil
}

func (op *linearOp[T]) Backward(gy smat.Tensor) error {
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
// noGrad says that the pass records no gradient: the layer's reduced
// precision (SetPrecision), if any, applies.
func linearInto[T dtype](p *LinearParams, rows int, x, y []T, noGrad bool) {
	in, out := p.In(), p.Out()
	if x32, ok := any(x).([]float32); ok {
		if rows == 0 || out == 0 {
			return
		}
		if noGrad && linearLow(p, rows, x32, in, any(y).([]float32)) {
			return
		}
		if d := CurrentDevice(); d != nil && !p.Weight.RequiresGrad() {
			linearOnDevice(d, p, rows, x32, any(y).([]float32), false)
			return
		}
		pk, kept := p.packed32(true, any(values[T](p.Weight)).([]float32))
		if p.Bias != nil {
			// The bias is added by the GEMM as it stores y, saving a pass.
			kernel.GemmPackedBias(false, rows, 1, x32, in, pk, any(values[T](p.Bias)).([]float32), any(y).([]float32), out)
		} else {
			kernel.GemmPacked(false, rows, 1, x32, in, pk, 0, any(y).([]float32), out)
		}
		if !kept {
			pk.Release()
		}
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
	if dy32, ok := any(dy).([]float32); ok {
		if rows == 0 || in == 0 {
			return
		}
		if d := CurrentDevice(); d != nil && !p.Weight.RequiresGrad() {
			linearOnDevice(d, p, rows, dy32, any(dx).([]float32), true)
			return
		}
		pk, kept := p.packed32(false, any(values[T](p.Weight)).([]float32))
		kernel.GemmPacked(false, rows, 1, dy32, out, pk, 0, any(dx).([]float32), in)
		if !kept {
			pk.Release()
		}
		return
	}
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
