package autograd

import (
	"fmt"
	"maps"
	"math"
	"slices"

	smat "github.com/nlpodyssey/spago/mat"
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
func SelfAttention(qkv smat.Tensor, batch, heads int, causal bool) smat.Tensor {
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
	qkv      smat.Tensor
	a        attention
	operands []smat.Tensor
}

func newAttention[T dtype](qkv smat.Tensor, batch, heads int, causal bool) *attentionOp[T] {
	rows, cols := dims(qkv)
	a := attention{batch: batch, tokens: rows / batch, heads: heads, width: cols / 3, causal: causal}
	return &attentionOp[T]{qkv: qkv, a: a, operands: []smat.Tensor{qkv}}
}

func (op *attentionOp[T]) Operands() []smat.Tensor { return op.operands }

func (op *attentionOp[T]) Forward() (smat.Tensor, error) {
	a := op.a
	out := make([]T, a.batch*a.tokens*a.width)
	attend(a, values[T](op.qkv), out)
	return newMatrix(out, a.batch*a.tokens, a.width), nil
}

func (op *attentionOp[T]) Backward(gy smat.Tensor) error {
	if !op.qkv.RequiresGrad() {
		return nil
	}
	a := op.a
	buf := getBuf[T](a.batch * a.tokens * 3 * a.width)
	attendBackward(a, values[T](op.qkv), values[T](gy), *buf)
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

func (a attention) headDim() int { return a.width / a.heads }

// attend computes the attention output out [batch·tokens, width] from qkv
// [batch·tokens, 3·width]. The probabilities are not kept: attendBackward
// recomputes them, which costs one small product per sequence and head and
// saves batch·heads·tokens² values per layer.
func attend[T dtype](a attention, qkv, out []T) {
	n, w, d, h := a.tokens, a.width, a.headDim(), a.heads
	scale := T(1 / math.Sqrt(float64(d)))
	parallelFor(a.batch*h, func(lo, hi int) {
		pBuf := getBuf[T](n * n)
		p := *pBuf
		for i := lo; i < hi; i++ {
			b, hd := i/h, i%h
			base := b*n*3*w + hd*d
			q, k, v := qkv[base:], qkv[base+w:], qkv[base+2*w:]
			gemmSerial(false, true, n, n, d, scale, q, 3*w, k, 3*w, 0, p, n) // S = s·Q·Kᵀ
			kernel.Softmax(p, p, n, n, 1, a.causal)                          // P
			gemmSerial(false, false, n, d, n, 1, p, n, v, 3*w, 0, out[b*n*w+hd*d:], w)
		}
		putBuf(pBuf)
	})
}

// attendBackward computes dqkv [batch·tokens, 3·width] (overwritten) from
// the output gradient dout [batch·tokens, width] and qkv. dqkv may be qkv
// itself: each head's keys are copied aside, and every block of qkv is
// overwritten only after its last read.
func attendBackward[T dtype](a attention, qkv, dout, dqkv []T) {
	n, w, d, h := a.tokens, a.width, a.headDim(), a.heads
	scale := T(1 / math.Sqrt(float64(d)))
	parallelFor(a.batch*h, func(lo, hi int) {
		buf := getBuf[T](2*n*n + n*d)
		p, dp, keys := (*buf)[:n*n], (*buf)[n*n:2*n*n], (*buf)[2*n*n:]
		for i := lo; i < hi; i++ {
			b, hd := i/h, i%h
			base := b*n*3*w + hd*d
			q, k, v := qkv[base:], qkv[base+w:], qkv[base+2*w:]
			dq, dk, dv := dqkv[base:], dqkv[base+w:], dqkv[base+2*w:]
			do := dout[b*n*w+hd*d:]
			gemmSerial(false, true, n, n, d, scale, q, 3*w, k, 3*w, 0, p, n) // S = s·Q·Kᵀ
			kernel.Softmax(p, p, n, n, 1, a.causal)                          // P, as in attend
			gemmSerial(false, true, n, n, d, 1, do, w, v, 3*w, 0, dp, n)     // dP = dO·Vᵀ
			gemmSerial(true, false, n, d, n, 1, p, n, do, w, 0, dv, 3*w)     // dV = Pᵀ·dO (V is read)
			kernel.SoftmaxBackward(dp, dp, p, n, n, 1)                       // dS
			for t := range n {
				copy(keys[t*d:(t+1)*d], k[t*3*w:t*3*w+d])
			}
			gemmSerial(true, false, n, d, n, scale, dp, n, q, 3*w, 0, dk, 3*w)   // dK = s·dSᵀ·Q
			gemmSerial(false, false, n, d, n, scale, dp, n, keys, d, 0, dq, 3*w) // dQ = s·dS·K
		}
		putBuf(buf)
	})
}

// bySequence groups the indices of sel (rows of the batch) by the sequence
// their row belongs to.
func (a attention) bySequence(sel []int) map[int][]int {
	groups := map[int][]int{}
	for i, r := range sel {
		b := r / a.tokens
		groups[b] = append(groups[b], i)
	}
	return groups
}

// attendRows is attend for some query rows only: out [len(sel), width]
// receives, in row i, the attention output of row sel[i] of the batch (its
// query against its sequence's keys and values).
func attendRows[T dtype](a attention, qkv []T, sel []int, out []T) {
	n, w, d, h := a.tokens, a.width, a.headDim(), a.heads
	scale := T(1 / math.Sqrt(float64(d)))
	parallelFor(len(sel)*h, func(lo, hi int) {
		pBuf := getBuf[T](n)
		p := *pBuf
		for j := lo; j < hi; j++ {
			i, hd := j/h, j%h
			r := sel[i]
			base := r/n*n*3*w + hd*d // the sequence's first row, this head
			q, k, v := qkv[r*3*w+hd*d:], qkv[base+w:], qkv[base+2*w:]
			rowProbs(a, p, q, k, r%n, scale)
			gemmSerial(false, false, 1, d, n, 1, p, n, v, 3*w, 0, out[i*w+hd*d:], w)
		}
		putBuf(pBuf)
	})
}

// rowProbs computes the attention probabilities p (tokens values) of one
// query at position t against its sequence's keys k (rows 3·width apart),
// with the operations attend uses for that row.
func rowProbs[T dtype](a attention, p, q, k []T, t int, scale T) {
	n, w := a.tokens, a.width
	gemmSerial(false, true, 1, n, a.headDim(), scale, q, 3*w, k, 3*w, 0, p, n)
	m := n
	if a.causal {
		m = t + 1
	}
	kernel.Softmax(p[:m], p[:m], 1, m, 1, false)
	clear(p[m:])
}

// attendRowsBackward overwrites qkv [batch·tokens, 3·width] with the
// gradient of attendRows with respect to it, given dout [len(sel), width].
// One goroutine handles a sequence's selected rows for one head, summing
// their key and value gradients in scratch before it writes that head's
// columns of the sequence; the rows of sequences without a selected row get
// zero.
func attendRowsBackward[T dtype](a attention, qkv []T, sel []int, dout []T) {
	n, w, d, h := a.tokens, a.width, a.headDim(), a.heads
	scale := T(1 / math.Sqrt(float64(d)))
	groups := a.bySequence(sel)
	seqs := slices.Sorted(maps.Keys(groups))
	parallelFor(len(seqs)*h, func(lo, hi int) {
		buf := getBuf[T](2*n + 3*n*d)
		p, dp := (*buf)[:n], (*buf)[n:2*n]
		grads := (*buf)[2*n:] // dQ, dK, dV of the sequence: n×d each
		dQ, dK, dV := grads[:n*d], grads[n*d:2*n*d], grads[2*n*d:]
		for j := lo; j < hi; j++ {
			b, hd := seqs[j/h], j%h
			base := b*n*3*w + hd*d
			k, v := qkv[base+w:], qkv[base+2*w:]
			clear(grads)
			for _, i := range groups[b] {
				r := sel[i]
				t := r % n
				q := qkv[r*3*w+hd*d:]
				do := dout[i*w+hd*d:]
				rowProbs(a, p, q, k, t, scale)
				gemmSerial(false, true, 1, n, d, 1, do, w, v, 3*w, 0, dp, n)            // dp = do·Vᵀ
				gemmSerial(true, false, n, d, 1, 1, p, n, do, w, 1, dV, d)              // dV += pᵀ·do
				kernel.SoftmaxBackward(dp, dp, p, 1, n, 1)                              // ds
				gemmSerial(false, false, 1, d, n, scale, dp, n, k, 3*w, 1, dQ[t*d:], d) // dq += s·ds·K
				gemmSerial(true, false, n, d, 1, scale, dp, n, q, 3*w, 1, dK, d)        // dK += s·dsᵀ·q
			}
			for t := range n {
				row := qkv[base+t*3*w:]
				copy(row[:d], dQ[t*d:(t+1)*d])
				copy(row[w:w+d], dK[t*d:(t+1)*d])
				copy(row[2*w:2*w+d], dV[t*d:(t+1)*d])
			}
		}
		putBuf(buf)
	})
	for b := range a.batch {
		if _, ok := groups[b]; !ok {
			clear(qkv[b*n*3*w : (b+1)*n*3*w])
		}
	}
}
