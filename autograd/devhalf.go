package autograd

import (
	"math"

	"github.com/subtta/subtta/autograd/kernel"
)

// blockForwardHalf is blockForward with 16-bit operands, on a kernel.Half
// device whose format is bf16 or fp16 (--precision), when every linear
// weight of the block has a 16-bit copy there: ln_1, the merged heads, ln_2
// and the activation are written in 16 bits only, each the input of one
// product, and the four linear products take those and the resident 16-bit
// weights (float32 sums); q|k|v's product and c_fc's write their outputs
// in 16 bits, which the head split and the activation read (each bias
// added in float32), and attention's q, k, v and probabilities are 16-bit
// too (attendHalf). LayerNorm's and softmax's statistics, the other
// products' outputs (the scores, the heads' outputs, out_proj's and
// c_proj's), the biases, the residuals and the block's output stay
// float32: out_proj and c_proj add their products onto the residual stream
// (float32, beta = 1) that ln_1 and ln_2 write with their bias. Where
// batch·tokens·width is odd, q, k and v, three parts of one 16-bit buffer,
// would not each start on a float32 slot of it: there q|k|v's product
// writes float32 and attention takes float32 operands as in a pass without
// 16-bit operands (attendThen), only its output written in 16 bits. It
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
	// gemm16 is gemm with beta = 0 into the 16-bit y16.
	gemm16 := func(l *LinearParams, a16, w16, y16 kernel.Buf) {
		r.do(func() error {
			return h.GemmHalf16(false, true, n, l.Out(), l.In(), 1, a16, l.In(), w16, l.In(), 0, y16, l.Out())
		})
	}
	// ln writes ln(x) in 16 bits and res = x + bias in float32. Its γ and β
	// are the device's resident copies, as in float32 (devRun.layerNorm):
	// no upload a pass, and a pass a recording (TowerGraphs) can replay.
	ln := func(x kernel.Buf, l *LayerNormParams, res, bias kernel.Buf) {
		g, b := r.resident(l.Gamma), r.resident(l.Beta)
		r.do(func() error { return h.LayerNormHalf(h16, x, n, w, g, b, l.Eps, res, bias) })
	}
	x1 := r.alloc(n * w)
	ln(x, p.LN1, x1, bias[1]) // and x₁ = x + out_proj's bias
	if n*w%2 == 0 {
		qkv16 := r.alloc(kernel.HalfLen(3 * n * w)) // q|k|v, without its bias, in 16 bits
		gemm16(p.QKV, h16, w16[0], qkv16)
		r.attendHalf(h, op.a, qkv16, bias[0], h16)
	} else {
		qkv := r.alloc(3 * n * w)
		gemm(p.QKV, h16, w16[0], 0, qkv)
		a := op.a
		r.attendThen(a, qkv, bias[0], func(o kernel.Buf) error {
			return h.MergeHeadsHalf(h16, o, a.batch, a.tokens, a.heads, a.headDim())
		})
	}
	gemm(p.Out, h16, w16[1], 1, x1)            // x₁ += out_proj(attn)
	ln(x1, p.LN2, x, bias[3])                  // and y = x₁ + c_proj's bias, where x was
	hidden16 := r.alloc(kernel.HalfLen(n * m)) // c_fc's output, without its bias, in 16 bits
	gemm16(p.FC, h16, w16[2], hidden16)
	r.do(func() error { return h.BiasActivationHalf16(h16, hidden16, n, m, bias[2], activationOf(p)) })
	gemm(p.Proj, h16, w16[3], 1, x) // y += c_proj(act)
	return true
}

// attendHalf is attend with 16-bit operands, on a kernel.Half device, from
// the 16-bit q|k|v product qkv16 into the 16-bit out16 (out_proj's
// input): q|k|v split into heads with in_proj's bias added in float32 and
// written in 16 bits only (SplitHeadsHalf16), S = s·Q·Kᵀ a strided-batched
// product of 16-bit operands with float32 sums into the float32 S, the
// softmax of its rows (statistics in float32 and double) written in 16
// bits only as P (SoftmaxHalf), P·V likewise into float32 heads' outputs,
// which the merge writes in 16 bits. q, k and v are three parts of one
// 16-bit buffer and must each start on a float32 slot of it:
// batch·tokens·width must be even (blockForwardHalf sees to it).
func (r *devRun) attendHalf(h kernel.Half, a attention, qkv16, bias, out16 kernel.Buf) {
	n, w, dh, bh := a.tokens, a.width, a.headDim(), a.batch*a.heads
	nw := a.batch * n * w
	defer r.freeFrom(len(r.bufs))
	scale := float32(1 / math.Sqrt(float64(dh)))
	hq := r.alloc(kernel.HalfLen(3 * nw))
	r.do(func() error { return h.SplitHeadsHalf16(hq, qkv16, bias, a.batch, n, 3, a.heads, dh) })
	q, k, v := slice(hq, 0, nw/2), slice(hq, nw/2, nw), slice(hq, nw, 3*nw/2)
	s := r.alloc(bh * n * n)
	r.do(func() error {
		return h.GemmBatchedHalf(false, true, bh, n, n, dh, scale, q, dh, n*dh, k, dh, n*dh, 0, s, n, n*n)
	})
	p := r.alloc(kernel.HalfLen(bh * n * n))
	r.do(func() error { return h.SoftmaxHalf(p, s, bh*n, n, 1, a.causal) })
	o := slice(qkv16, 0, nw) // q|k|v is read: the heads' float32 outputs go there (3·nw/2 slots)
	r.do(func() error {
		return h.GemmBatchedHalf(false, false, bh, n, dh, n, 1, p, n, n*n, v, dh, n*dh, 0, o, dh, n*dh)
	})
	r.do(func() error { return h.MergeHeadsHalf(out16, o, a.batch, n, a.heads, dh) })
}
