package autograd

import (
	"fmt"
	"math"

	"github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// SelfAttention is multi-head scaled dot-product self-attention over a batch
// of sequences, from the fused projection qkv = x·in_projᵀ + in_bias
// [batch·tokens, 3·width]: columns [0, width) are the queries, then the keys,
// then the values, each split into heads of width/heads columns. Rows are
// sequence-major (all tokens of sequence 0, then sequence 1, …).
//
// Every head computes softmax(q·kᵀ/√head_dim)·v; with causal set, token i
// attends only to tokens 0…i. The heads are concatenated into the result
// [batch·tokens, width], ready for the output projection (a separate Linear).
// It panics if the shape does not split into batch sequences and heads.
func SelfAttention(qkv mat.Tensor, batch, heads int, causal bool) mat.Tensor {
	rows, cols := dims(qkv)
	if batch <= 0 || heads <= 0 || rows%batch != 0 || cols%3 != 0 || (cols/3)%heads != 0 {
		panic(fmt.Sprintf("autograd: SelfAttention: qkv [%d, %d] does not split into %d sequences of 3×%d heads", rows, cols, batch, heads))
	}
	if is32("SelfAttention", qkv) {
		return run(newAttention[float32](qkv, batch, heads, causal))
	}
	return run(newAttention[float64](qkv, batch, heads, causal))
}

type attentionOp[T dtype] struct {
	qkv                  mat.Tensor
	batch, tokens, heads int
	width, headDim       int
	causal               bool
	probs                []T // [batch, heads, tokens, tokens], kept for backward
	operands             []mat.Tensor
}

func newAttention[T dtype](qkv mat.Tensor, batch, heads int, causal bool) *attentionOp[T] {
	rows, cols := dims(qkv)
	w := cols / 3
	return &attentionOp[T]{qkv: qkv, batch: batch, tokens: rows / batch, heads: heads,
		width: w, headDim: w / heads, causal: causal, operands: []mat.Tensor{qkv}}
}

func (op *attentionOp[T]) Operands() []mat.Tensor { return op.operands }

func (op *attentionOp[T]) scale() T { return T(1 / math.Sqrt(float64(op.headDim))) }

func (op *attentionOp[T]) Forward() (mat.Tensor, error) {
	n, w, d, h := op.tokens, op.width, op.headDim, op.heads
	qkv := values[T](op.qkv)
	out := make([]T, op.batch*n*w)
	// The probabilities are kept only when a backward pass may need them.
	var pooled *[]T
	if op.qkv.RequiresGrad() {
		op.probs = make([]T, op.batch*h*n*n)
	} else {
		pooled = getBuf[T](op.batch * h * n * n)
		op.probs = *pooled
	}
	scale := op.scale()
	parallelFor(op.batch*h, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			b, hd := i/h, i%h
			base := b*n*3*w + hd*d
			q, k, v := qkv[base:], qkv[base+w:], qkv[base+2*w:]
			p := op.probs[i*n*n : (i+1)*n*n]
			gemmSerial(false, true, n, n, d, scale, q, 3*w, k, 3*w, 0, p, n)
			kernel.Softmax(p, p, n, n, 1, op.causal)
			gemmSerial(false, false, n, d, n, 1, p, n, v, 3*w, 0, out[b*n*w+hd*d:], w)
		}
	})
	if pooled != nil {
		putBuf(pooled)
		op.probs = nil
	}
	return newMatrix(out, op.batch*n, w), nil
}

func (op *attentionOp[T]) Backward(gy mat.Tensor) error {
	if !op.qkv.RequiresGrad() {
		return nil
	}
	n, w, d, h := op.tokens, op.width, op.headDim, op.heads
	qkv := values[T](op.qkv)
	dout := values[T](gy)
	buf := getBuf[T](op.batch * n * 3 * w)
	dqkv := *buf
	scale := op.scale()
	parallelFor(op.batch*h, func(lo, hi int) {
		dpBuf := getBuf[T](n * n)
		dp := *dpBuf
		for i := lo; i < hi; i++ {
			b, hd := i/h, i%h
			base := b*n*3*w + hd*d
			q, k, v := qkv[base:], qkv[base+w:], qkv[base+2*w:]
			dq, dk, dv := dqkv[base:], dqkv[base+w:], dqkv[base+2*w:]
			do := dout[b*n*w+hd*d:]
			p := op.probs[i*n*n : (i+1)*n*n]
			gemmSerial(false, true, n, n, d, 1, do, w, v, 3*w, 0, dp, n)        // dP = dO·Vᵀ
			gemmSerial(true, false, n, d, n, 1, p, n, do, w, 0, dv, 3*w)        // dV = Pᵀ·dO
			kernel.SoftmaxBackward(dp, dp, p, n, n, 1)                          // dS
			gemmSerial(false, false, n, d, n, scale, dp, n, k, 3*w, 0, dq, 3*w) // dQ = s·dS·K
			gemmSerial(true, false, n, d, n, scale, dp, n, q, 3*w, 0, dk, 3*w)  // dK = s·dSᵀ·Q
		}
		putBuf(dpBuf)
	})
	accGrad(op.qkv, dqkv)
	putBuf(buf)
	return nil
}
