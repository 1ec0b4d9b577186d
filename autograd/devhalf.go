package autograd

import "github.com/subtta/subtta/autograd/kernel"

// blockForwardHalf is blockForward with 16-bit operands, on a kernel.Half
// device whose format is bf16 or fp16 (--precision), when every linear
// weight of the block has a 16-bit copy there: ln_1, the merged heads, ln_2
// and the activation are written in 16 bits only, each the input of one
// product, and the four linear products take those and the resident 16-bit
// weights (float32 sums into float32 outputs). LayerNorm's statistics,
// attention (its products take float32 operands, which the device rounds
// as its precision says), the bias, the residuals and the block's output
// stay float32. It reports false, doing nothing, where it does not apply;
// a pass that records for backward never takes it (blockRecord keeps its
// float32 values for backward, and its products round the float32 operands
// as the device's precision says).
func (r *devRun) blockForwardHalf(op *blockOp[float32], x kernel.Buf) bool {
	h, _ := kernel.HalfOf(r.d)
	if h == nil || r.err != nil {
		return false
	}
	p := &op.p
	var w16, bias [4]kernel.Buf
	for i, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
		if w16[i], bias[i] = r.weights16(l); w16[i] == nil {
			return false
		}
	}
	n, w, m := op.rows, op.a.width, op.mlp
	mark := len(r.bufs)
	defer r.freeFrom(mark)
	h16 := r.alloc(kernel.HalfLen(n * max(w, m)))
	gemm := func(l *LinearParams, a16, w16, y kernel.Buf) {
		r.do(func() error {
			return h.GemmHalf(false, true, n, l.Out(), l.In(), 1, a16, l.In(), w16, l.In(), 0, y, l.Out())
		})
	}
	ln := func(x kernel.Buf, l *LayerNormParams) {
		g, b := r.upload(values[float32](l.Gamma)), r.upload(values[float32](l.Beta))
		r.do(func() error { return h.LayerNormHalf(h16, x, n, w, g, b, l.Eps) })
	}
	ln(x, p.LN1)
	qkv := r.alloc(3 * n * w)
	gemm(p.QKV, h16, w16[0], qkv)
	r.attendThen(op.a, qkv, bias[0], func(o kernel.Buf) error {
		return h.MergeHeadsHalf(h16, o, op.a.batch, op.a.tokens, op.a.heads, op.a.headDim())
	})
	proj := r.alloc(n * w)
	gemm(p.Out, h16, w16[1], proj)
	x1 := r.alloc(n * w)
	r.do(func() error { return h.BiasResidual(x1, proj, bias[1], x, n, w) }) // x₁ = x + out_proj(attn)
	ln(x1, p.LN2)
	hidden := r.alloc(n * m)
	gemm(p.FC, h16, w16[2], hidden)
	r.do(func() error { return h.BiasActivationHalf(h16, hidden, n, m, bias[2], activationOf(p)) })
	gemm(p.Proj, h16, w16[3], proj)
	r.do(func() error { return h.BiasResidual(x, proj, bias[3], x1, n, w) }) // y = x₁ + c_proj(act)
	return true
}
