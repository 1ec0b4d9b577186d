package autograd

import (
	"fmt"
	"slices"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// BlockParams holds a pre-LN transformer residual block (CLIP's
// ResidualAttentionBlock): LayerNorm, fused q|k|v projection, multi-head
// self-attention and its output projection, then LayerNorm and a two-layer
// MLP, each half added to its input.
type BlockParams struct {
	LN1    *LayerNormParams
	QKV    *LinearParams // in_proj: [3·width, width], rows q, k, v
	Out    *LinearParams // out_proj: [width, width]
	LN2    *LayerNormParams
	FC     *LinearParams // c_fc: [mlp, width]
	Proj   *LinearParams // c_proj: [width, mlp]
	Heads  int
	Causal bool // token i attends to tokens 0…i only
	GELU   bool // exact GELU in the MLP instead of QuickGELU
}

// Trace receives named intermediate results of a forward pass (copies, off
// the tape): the stages of TransformerBlock, and those the towers emit. A
// nil Trace ignores them.
type Trace func(name string, t smat.Tensor)

// Emit passes a named intermediate to the trace, if any.
func (tr Trace) Emit(name string, t smat.Tensor) {
	if tr != nil {
		tr(name, t)
	}
}

// Forward applies the block to x [batch·tokens, width] (TransformerBlock)
// and traces its stages as prefix+"ln_1", … (see TransformerBlock) and the
// result as prefix+"out": how both CLIP towers run their blocks.
func (p *BlockParams) Forward(x smat.Tensor, batch int, prefix string, trace Trace) smat.Tensor {
	var inner Trace
	if trace != nil {
		inner = func(name string, t smat.Tensor) { trace(prefix+name, t) }
	}
	x = TransformerBlock(x, p, batch, inner)
	trace.Emit(prefix+"out", x)
	return x
}

// TransformerBlock applies a residual block to x [batch·tokens, width]
// (sequence-major rows):
//
//	x₁ = x + out_proj(attention(in_proj(ln_1(x))))
//	y  = x₁ + c_proj(act(c_fc(ln_2(x₁))))
//
// It is one op on the tape with the same gradients as the chain of Linear,
// LayerNorm, SelfAttention, QuickGELU (or GELU) and Add it replaces, but it
// keeps for backward only what the input gradient and the LayerNorm
// gradients need: the LayerNorm statistics, q|k|v, x₁ and the MLP
// pre-activation. The attention probabilities are recomputed from q and k
// (as SelfAttention does), the LayerNorm outputs and the activation when a
// trainable Linear weight needs them; the attention output is kept only when
// out_proj is trainable. That is less than half the memory of the separate
// ops (ViT-B/32 at batch 64: 79 MB per block instead of 185 MB, besides the
// output), and the kept buffers return to a pool once backward has run, so
// backward may run only once through a graph holding this op. Without
// gradients only pooled scratch is used.
//
// trace, if not nil, receives copies of the intermediates "ln_1", "attn"
// (the output projection), "after_attn" (x₁), "ln_2", "mlp_hidden" (after
// the activation) and "mlp_out" (c_proj); they are off the tape. It panics
// if the shapes do not fit.
func TransformerBlock(x smat.Tensor, p *BlockParams, batch int, trace Trace) smat.Tensor {
	return newBlock("TransformerBlock", x, p, batch, nil, trace)
}

// TransformerBlockRows is TransformerBlock computed for some rows of x only:
// the result [len(rows), width] holds the block's output at the given rows
// (in that order; a row may repeat). Every token's keys and values are
// computed, but attention, the output projection and the MLP run for the
// given rows alone, so pooling after a transformer's last block (the class
// token of every image) costs a quarter of the block. It panics as
// TransformerBlock does, or on a row out of range.
func TransformerBlockRows(x smat.Tensor, p *BlockParams, batch int, rows []int) smat.Tensor {
	n, _ := dims(x)
	for _, r := range rows {
		if r < 0 || r >= n {
			panic(fmt.Sprintf("autograd: TransformerBlockRows: row %d out of range [0, %d)", r, n))
		}
	}
	return newBlock("TransformerBlockRows", x, p, batch, slices.Clone(rows), nil)
}

// newBlock checks the shapes and records a block op on the tape; sel are
// the output rows (nil for all).
func newBlock(name string, x smat.Tensor, p *BlockParams, batch int, sel []int, trace Trace) smat.Tensor {
	rows, w := dims(x)
	mlp := p.FC.Out()
	checkBlock(name, rows, w, p, batch)
	operands := append([]smat.Tensor{x}, blockOperands(p)...)
	a := attention{batch: batch, tokens: rows / batch, heads: p.Heads, width: w, causal: p.Causal}
	out := rows
	if sel != nil {
		out = len(sel)
	}
	if sameType(name, operands...) {
		return run(&blockOp[float32]{x: x, p: *p, a: a, rows: rows, out: out, sel: sel, mlp: mlp, trace: trace, operands: operands})
	}
	return run(&blockOp[float64]{x: x, p: *p, a: a, rows: rows, out: out, sel: sel, mlp: mlp, trace: trace, operands: operands})
}

// checkBlock panics unless an input of rows×w in batch sequences fits the
// block.
func checkBlock(name string, rows, w int, p *BlockParams, batch int) {
	mlp := p.FC.Out()
	switch {
	case p.LN1.Gamma.Size() != w || p.LN2.Gamma.Size() != w,
		p.QKV.In() != w || p.QKV.Out() != 3*w,
		p.Out.In() != w || p.Out.Out() != w,
		p.FC.In() != w || p.Proj.In() != mlp || p.Proj.Out() != w,
		p.Heads <= 0 || w%p.Heads != 0,
		batch <= 0 || rows%batch != 0:
		panic(fmt.Sprintf("autograd: %s: input [%d, %d] in %d sequences does not fit the block (ln %d/%d, qkv %d→%d, out %d→%d, fc %d→%d, proj %d→%d, %d heads)",
			name, rows, w, batch, p.LN1.Gamma.Size(), p.LN2.Gamma.Size(), p.QKV.In(), p.QKV.Out(), p.Out.In(), p.Out.Out(),
			p.FC.In(), p.FC.Out(), p.Proj.In(), p.Proj.Out(), p.Heads))
	}
}

// blockOperands lists the block's parameters as operands of its op.
func blockOperands(p *BlockParams) []smat.Tensor {
	var operands []smat.Tensor
	for _, ps := range [][]smat.Matrix{p.LN1.Parameters(), p.QKV.Parameters(), p.Out.Parameters(),
		p.LN2.Parameters(), p.FC.Parameters(), p.Proj.Parameters()} {
		for _, t := range ps {
			operands = append(operands, t)
		}
	}
	return operands
}

type blockOp[T dtype] struct {
	x        smat.Tensor
	p        BlockParams
	a        attention
	rows     int   // of x
	out      int   // rows of the result: rows, or len(sel)
	sel      []int // the rows of x computed past the keys and values; nil for all
	mlp      int
	trace    Trace
	operands []smat.Tensor

	// Kept for backward (pooled; released by Backward).
	stats  *[]T // mean and rstd of ln_1 (2·rows values), then of ln_2 (2·out)
	qkv    *[]T // [rows, 3·width]
	attn   *[]T // attention output [out, width], only when out_proj is trainable
	x1     *[]T // [out, width]
	hidden *[]T // MLP pre-activation [out, mlp], or its slope (see slope)
	slope  bool // hidden holds act′(pre-activation): c_proj's weight is frozen
	spent  bool // Backward has run

	dev *devBlock // instead of the above when the pass ran on a device
}

func (op *blockOp[T]) Operands() []smat.Tensor { return op.operands }

// emit passes a copy of v to the trace, if any.
func (op *blockOp[T]) emit(name string, v []T, cols int) {
	if op.trace != nil {
		op.trace(name, newMatrix(append([]T(nil), v...), len(v)/cols, cols))
	}
}

// activation applies the MLP activation: y = act(x).
func (op *blockOp[T]) activation(y, x []T) {
	if op.p.GELU {
		kernel.GELU(y, x)
	} else {
		kernel.QuickGELU(y, x)
	}
}

// multiply computes y *= x elementwise.
func multiply[T dtype](y, x []T) {
	x = x[:len(y)]
	parallelFor(len(y), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] *= x[i]
		}
	})
}

// layerNorm normalises the r rows of x into y with ln, writing the row
// statistics to stats (2·r values: mean, then rstd).
func (op *blockOp[T]) layerNorm(y, x []T, r int, ln *LayerNormParams, stats []T) {
	w := op.a.width
	kernel.LayerNorm(y, x, r, w, values[T](ln.Gamma), values[T](ln.Beta), ln.Eps, stats[:r], stats[r:2*r])
}

// gatherRows copies the rows sel of x (width w) into y.
func gatherRows[T dtype](y, x []T, sel []int, w int) {
	for i, r := range sel {
		copy(y[i*w:(i+1)*w], x[r*w:(r+1)*w])
	}
}

func (op *blockOp[T]) Forward() (smat.Tensor, error) {
	r, o, w, m := op.rows, op.out, op.a.width, op.mlp
	p := &op.p
	keep := anyRequiresGrad(op.operands)
	if d := CurrentDevice(); d != nil && op.trace == nil {
		if op32, ok := any(op).(*blockOp[float32]); ok {
			if !keep {
				return newMatrix(any(blockOnDevice(d, op32)).([]T), o, w), nil
			}
			if op.recordsOnDevice() {
				return newMatrix(any(blockRecordOnDevice(d, op32)).([]T), o, w), nil
			}
		}
	}
	// buffer returns a pooled buffer of n values; those not kept for
	// backward go back to the pool on return.
	var scratch []*[]T
	buffer := func(n int, kept bool) *[]T {
		b := getBuf[T](n)
		if !kept {
			scratch = append(scratch, b)
		}
		return b
	}
	defer func() {
		for _, b := range scratch {
			putBuf(b)
		}
	}()
	x := values[T](op.x)

	stats := buffer(2*r+2*o, keep)
	hBuf := buffer(r*w, false) // ln_1(x), then reused
	h := *hBuf
	op.layerNorm(h, x, r, p.LN1, (*stats)[:2*r])
	op.emit("ln_1", h, w)
	qkv := buffer(3*r*w, keep)
	linearInto(p.QKV, r, h, *qkv, !keep)

	// The attention output, and later ln_2(x₁), go where ln_1(x) was, unless
	// the attention output is kept or there are more output rows than rows.
	spare := func(kept bool) []T {
		if kept || o > r {
			return *buffer(o*w, kept)
		}
		return h[:o*w]
	}
	keepAttn := keep && p.Out.Weight.RequiresGrad()
	attnBuf := spare(keepAttn)
	x1 := buffer(o*w, keep)
	if op.sel == nil {
		attend(op.a, *qkv, attnBuf)
	} else {
		attendRows(op.a, *qkv, op.sel, attnBuf)
		gatherRows(*x1, x, op.sel, w)
		x = *x1
	}
	// The residuals are added after the products rather than accumulated
	// into them: adding each K block's partial sum to x would round at x's
	// magnitude a dozen times (c_proj), which doubles the error of pixel
	// gradients against PyTorch.
	proj := *buffer(o*w, false)
	linearInto(p.Out, o, attnBuf, proj, !keep)
	op.emit("attn", proj, w)
	kernel.Add(*x1, x, proj) // x₁ = x + out_proj(attn)
	op.emit("after_attn", *x1, w)

	h2 := spare(false)
	op.layerNorm(h2, *x1, o, p.LN2, (*stats)[2*r:])
	op.emit("ln_2", h2, w)
	var hidden *[]T
	slope := keep && !p.Proj.Weight.RequiresGrad()
	// Without gradients, with both MLP layers in bf16 and nothing traced,
	// the activation runs fused into c_fc (mlpLowBF16); otherwise c_fc, the
	// activation and c_proj run one after the other.
	x32, is32 := any(h2).([]float32)
	if !is32 || keep || op.trace != nil || !mlpLowBF16(p.FC, p.Proj, p.GELU, o, x32, any(proj).([]float32)) {
		hidden = buffer(o*m, keep)
		linearInto(p.FC, o, h2, *hidden, !keep)
		act := *buffer(o*m, false)
		// Backward needs the pre-activation only through the slope of the
		// activation, unless c_proj's weight gradient needs act itself: then
		// keep the slope in its place, and backward skips an exponential per
		// value.
		switch {
		case slope && p.GELU:
			kernel.GELUAndSlope(act, *hidden, *hidden)
		case slope:
			kernel.QuickGELUSlope(act, *hidden, *hidden)
		default:
			op.activation(act, *hidden)
		}
		op.emit("mlp_hidden", act, m)

		linearInto(p.Proj, o, act, proj, !keep)
	}
	op.emit("mlp_out", proj, w)
	var y []T
	if keep {
		y = make([]T, o*w)
	} else {
		// A pooled buffer, not zeroed (Add writes every value): the pass is
		// off the tape, and TransformerBlocks gives it back once the next
		// block has read it.
		y = (*getBuf[T](o * w))[:o*w]
	}
	kernel.Add(y, *x1, proj) // y = x₁ + c_proj(act)

	if keep {
		op.stats, op.qkv, op.x1, op.hidden = stats, qkv, x1, hidden
		op.slope = slope
		if keepAttn {
			op.attn = &attnBuf
		}
	}
	return newMatrix(y, o, w), nil
}

func (op *blockOp[T]) Backward(gy smat.Tensor) error {
	if op.spent {
		panic("autograd: TransformerBlock: backward run twice through one graph")
	}
	op.spent = true
	defer op.release()
	if op.dev != nil {
		blockBackwardOnDevice(any(op).(*blockOp[float32]), any(values[T](gy)).([]float32))
		return nil
	}
	r, o, w, m := op.rows, op.out, op.a.width, op.mlp
	p := &op.p
	dy := values[T](gy)
	x := values[T](op.x)
	stats := *op.stats
	var scratch []*[]T
	buffer := func(n int) []T {
		b := getBuf[T](n)
		scratch = append(scratch, b)
		return *b
	}
	defer func() {
		for _, b := range scratch {
			putBuf(b)
		}
	}()

	// MLP: y = x₁ + c_proj(act(c_fc(ln_2(x₁)))), over the o output rows.
	dAct := buffer(o * m)
	linearInputGrad(p.Proj, o, dy, dAct)
	dHidden := dAct // in place
	switch {
	case op.slope:
		if p.Proj.Weight.RequiresGrad() {
			panic("autograd: TransformerBlock: c_proj's weight became trainable after the forward pass")
		}
		linearParamGrads(p.Proj, o, dy, nil) // the bias's gradient, if trainable
		multiply(dHidden, *op.hidden)
	default:
		if p.Proj.trainable() {
			act := buffer(o * m)
			op.activation(act, *op.hidden)
			linearParamGrads(p.Proj, o, dy, act)
		}
		if p.GELU {
			kernel.GELUBackward(dHidden, dAct, *op.hidden)
		} else {
			kernel.QuickGELUBackward(dHidden, dAct, *op.hidden)
		}
	}
	if p.FC.trainable() {
		h2 := buffer(o * w)
		op.layerNorm(h2, *op.x1, o, p.LN2, buffer(2*o))
		linearParamGrads(p.FC, o, dHidden, h2)
	}
	dH2 := buffer(o * w)
	linearInputGrad(p.FC, o, dHidden, dH2)
	dx1 := buffer(o * w)
	op.layerNormBackward(dx1, dH2, *op.x1, o, p.LN2, stats[2*r:])
	kernel.Add(dx1, dx1, dy) // the residual path

	// Attention: x₁ = x + out_proj(attention(in_proj(ln_1(x)))).
	dAttn := dH2
	linearInputGrad(p.Out, o, dx1, dAttn)
	if p.Out.trainable() {
		var attn []T // nil when only the bias is trainable: its gradient does not read it
		if op.attn != nil {
			attn = *op.attn
		} else if p.Out.Weight.RequiresGrad() {
			panic("autograd: TransformerBlock: out_proj's weight became trainable after the forward pass")
		}
		linearParamGrads(p.Out, o, dx1, attn)
	}
	dqkv := *op.qkv // overwritten in place: q|k|v are not needed after
	if op.sel == nil {
		attendBackward(op.a, dqkv, dAttn, dqkv)
	} else {
		attendRowsBackward(op.a, dqkv, op.sel, dAttn)
	}
	if p.QKV.trainable() {
		h1 := buffer(r * w)
		op.layerNorm(h1, x, r, p.LN1, buffer(2*r))
		linearParamGrads(p.QKV, r, dqkv, h1)
	}
	dH1 := dAttn
	if op.sel != nil {
		dH1 = buffer(r * w)
	}
	linearInputGrad(p.QKV, r, dqkv, dH1)
	var dx []T
	if op.x.RequiresGrad() {
		if op.sel == nil {
			dx = *op.x1 // x₁ is no longer needed
		} else {
			dx = buffer(r * w)
		}
	}
	op.layerNormBackward(dx, dH1, x, r, p.LN1, stats[:2*r])
	if dx == nil {
		return nil
	}
	if op.sel == nil {
		kernel.Add(dx, dx, dx1)
	} else {
		for i, row := range op.sel {
			kernel.Axpy(dx[row*w:(row+1)*w], 1, dx1[i*w:(i+1)*w])
		}
	}
	accGrad(op.x, dx)
	return nil
}

// layerNormBackward computes dx (overwritten; skipped when nil) from dy for
// the LayerNorm ln of the r rows of x with the given statistics, and
// accumulates the gradients of ln's parameters that require them.
func (op *blockOp[T]) layerNormBackward(dx, dy, x []T, r int, ln *LayerNormParams, stats []T) {
	w := op.a.width
	trainG, trainB := ln.Gamma.RequiresGrad(), ln.Beta.RequiresGrad()
	var dg, db []T
	var buf *[]T
	if trainG || trainB {
		buf = getZeroBuf[T](2 * w)
		defer putBuf(buf)
		dg, db = (*buf)[:w], (*buf)[w:]
	}
	if dx == nil && buf == nil {
		return
	}
	kernel.LayerNormBackward(dx, dg, db, dy, x, r, w, values[T](ln.Gamma), stats[:r], stats[r:2*r])
	if trainG {
		accGrad(ln.Gamma, dg)
	}
	if trainB {
		accGrad(ln.Beta, db)
	}
}

// release returns the buffers kept for backward to their pools, or frees
// them on the device.
func (op *blockOp[T]) release() {
	if op.dev != nil {
		op.dev.free()
		op.dev = nil
	}
	for _, b := range []**[]T{&op.stats, &op.qkv, &op.attn, &op.x1, &op.hidden} {
		if *b != nil {
			putBuf(*b)
			*b = nil
		}
	}
}
