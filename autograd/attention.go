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
	qkv      mat.Tensor
	a        attention
	probs    []T // [batch, heads, tokens, tokens], kept for backward
	operands []mat.Tensor
}

func newAttention[T dtype](qkv mat.Tensor, batch, heads int, causal bool) *attentionOp[T] {
	rows, cols := dims(qkv)
	a := attention{batch: batch, tokens: rows / batch, heads: heads, width: cols / 3, causal: causal}
	return &attentionOp[T]{qkv: qkv, a: a, operands: []mat.Tensor{qkv}}
}

func (op *attentionOp[T]) Operands() []mat.Tensor { return op.operands }

func (op *attentionOp[T]) Forward() (mat.Tensor, error) {
	a := op.a
	out := make([]T, a.batch*a.tokens*a.width)
	// The probabilities are kept only when a backward pass may need them.
	if op.qkv.RequiresGrad() {
		op.probs = make([]T, a.probsLen())
	}
	attend(a, values[T](op.qkv), op.probs, out)
	return newMatrix(out, a.batch*a.tokens, a.width), nil
}

func (op *attentionOp[T]) Backward(gy mat.Tensor) error {
	if !op.qkv.RequiresGrad() {
		return nil
	}
	a := op.a
	buf := getBuf[T](a.batch * a.tokens * 3 * a.width)
	attendBackward(a, values[T](op.qkv), op.probs, values[T](gy), *buf)
	accGrad(op.qkv, *buf)
	putBuf(buf)
	return nil
}

// attention is the geometry of multi-head self-attention over a batch of
// sequences (see SelfAttention).
type attention struct {
	batch, tokens, heads, width int
	causal                      bool
}

func (a attention) headDim() int  { return a.width / a.heads }
func (a attention) probsLen() int { return a.batch * a.heads * a.tokens * a.tokens }

// attend computes the attention output out [batch·tokens, width] from qkv
// [batch·tokens, 3·width]. With probs non-nil (probsLen values) the
// probabilities of every sequence and head are kept there for
// attendBackward; otherwise each goroutine reuses one tokens×tokens scratch.
func attend[T dtype](a attention, qkv, probs, out []T) {
	n, w, d, h := a.tokens, a.width, a.headDim(), a.heads
	scale := T(1 / math.Sqrt(float64(d)))
	parallelFor(a.batch*h, func(lo, hi int) {
		var scratch *[]T
		if probs == nil {
			scratch = getBuf[T](n * n)
			defer putBuf(scratch)
		}
		for i := lo; i < hi; i++ {
			b, hd := i/h, i%h
			base := b*n*3*w + hd*d
			q, k, v := qkv[base:], qkv[base+w:], qkv[base+2*w:]
			var p []T
			if probs != nil {
				p = probs[i*n*n : (i+1)*n*n]
			} else {
				p = *scratch
			}
			gemmSerial(false, true, n, n, d, scale, q, 3*w, k, 3*w, 0, p, n)
			kernel.Softmax(p, p, n, n, 1, a.causal)
			gemmSerial(false, false, n, d, n, 1, p, n, v, 3*w, 0, out[b*n*w+hd*d:], w)
		}
	})
}

// attendBackward computes dqkv [batch·tokens, 3·width] (overwritten) from
// the output gradient dout [batch·tokens, width], qkv and the probabilities
// kept by attend.
func attendBackward[T dtype](a attention, qkv, probs, dout, dqkv []T) {
	n, w, d, h := a.tokens, a.width, a.headDim(), a.heads
	scale := T(1 / math.Sqrt(float64(d)))
	parallelFor(a.batch*h, func(lo, hi int) {
		dpBuf := getBuf[T](n * n)
		dp := *dpBuf
		for i := lo; i < hi; i++ {
			b, hd := i/h, i%h
			base := b*n*3*w + hd*d
			q, k, v := qkv[base:], qkv[base+w:], qkv[base+2*w:]
			dq, dk, dv := dqkv[base:], dqkv[base+w:], dqkv[base+2*w:]
			do := dout[b*n*w+hd*d:]
			p := probs[i*n*n : (i+1)*n*n]
			gemmSerial(false, true, n, n, d, 1, do, w, v, 3*w, 0, dp, n)        // dP = dO·Vᵀ
			gemmSerial(true, false, n, d, n, 1, p, n, do, w, 0, dv, 3*w)        // dV = Pᵀ·dO
			kernel.SoftmaxBackward(dp, dp, p, n, n, 1)                          // dS
			gemmSerial(false, false, n, d, n, scale, dp, n, k, 3*w, 0, dq, 3*w) // dQ = s·dS·K
			gemmSerial(true, false, n, d, n, scale, dp, n, q, 3*w, 0, dk, 3*w)  // dK = s·dSᵀ·Q
		}
		putBuf(dpBuf)
	})
}
