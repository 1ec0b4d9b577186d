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
// stay float32: out_proj and c_proj add their products onto the residual
// stream (float32, beta = 1) that ln_1 and ln_2 write with their bias. It
// reports false, doing nothing, where it does not apply; a pass that
// records for backward never takes it (blockRecord keeps its float32
// values for backward, and its products round the float32 operands as the
// device's precision says).
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
	gemm := func(l *LinearParams, a16, w16 kernel.Buf, beta float32, y kernel.Buf) {
		r.do(func() error {
			return h.GemmHalf(false, true, n, l.Out(), l.In(), 1, a16, l.In(), w16, l.In(), beta, y, l.Out())
		})
	}
	// ln writes ln(x) in 16 bits and res = x + bias in float32.
	ln := func(x kernel.Buf, l *LayerNormParams, res, bias kernel.Buf) {
		g, b := r.upload(values[float32](l.Gamma)), r.upload(values[float32](l.Beta))
		r.do(func() error { return h.LayerNormHalf(h16, x, n, w, g, b, l.Eps, res, bias) })
	}
	x1 := r.alloc(n * w)
	ln(x, p.LN1, x1, bias[1]) // and x₁ = x + out_proj's bias
	qkv := r.alloc(3 * n * w)
	gemm(p.QKV, h16, w16[0], 0, qkv)
	r.attendThen(op.a, qkv, bias[0], func(o kernel.Buf) error {
		return h.MergeHeadsHalf(h16, o, op.a.batch, op.a.tokens, op.a.heads, op.a.headDim())
	})
	gemm(p.Out, h16, w16[1], 1, x1) // x₁ += out_proj(attn)
	ln(x1, p.LN2, x, bias[3])       // and y = x₁ + c_proj's bias, where x was
	hidden := r.alloc(n * m)
	gemm(p.FC, h16, w16[2], 0, hidden)
	r.do(func() error { return h.BiasActivationHalf(h16, hidden, n, m, bias[2], activationOf(p)) })
	gemm(p.Proj, h16, w16[3], 1, x) // y += c_proj(act)
	return true
}
