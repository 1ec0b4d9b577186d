package autograd

import (
	"math"
	"runtime"
	"sync"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// devBlock is what a recording TransformerBlock keeps on the device for its
// backward pass: the block's input, the LayerNorm statistics, q|k|v
// (without in_proj's bias, which the head split adds), x₁,
// the MLP's pre-activation or, when c_proj's weight is frozen, the
// activation's slope, and the attention output when out_proj's weight is
// trainable. free releases them once; a cleanup calls it if the graph is
// dropped without a backward pass.
type devBlock struct {
	d                         kernel.Device
	x, stats, qkv, x1, hidden kernel.Buf
	attn                      kernel.Buf // nil unless out_proj's weight is trainable
	slope                     bool       // hidden holds the slope

	mu   sync.Mutex
	bufs []kernel.Buf
}

func (k *devBlock) free() {
	k.mu.Lock()
	bufs := k.bufs
	k.bufs = nil
	k.mu.Unlock()
	for _, b := range bufs {
		k.d.Free(b)
	}
}

// recordsOnDevice reports whether a recording pass of the block can run on
// the device: every row computed and no trace.
func (op *blockOp[T]) recordsOnDevice() bool {
	return op.sel == nil && op.trace == nil
}

// blockRecordOnDevice is op.Forward recording for backward, run on d
// (blockRecord), with what backward needs kept on the device in op.dev
// rather than in host memory.
func blockRecordOnDevice(d kernel.Device, op *blockOp[float32]) []float32 {
	r := &devRun{d: d}
	defer r.close()
	n, w := op.rows, op.a.width
	x := r.allocKept(n * w)
	r.do(func() error { return d.Upload(x, values[float32](op.x)) })
	h := r.alloc(n * w)
	k := r.blockRecord(op, x, h)
	y := make([]float32, n*w)
	r.do(func() error { return d.Download(y, h) })
	if r.err == nil {
		runtime.AddCleanup(op, (*devBlock).free, k)
		op.dev = k
	}
	return y
}

// blockRecord computes the block's output from x into y on the device,
// recording for backward: the CPU path's steps as device operations. The
// returned devBlock holds x (which the caller allocated with allocKept)
// and the other values backward needs, in buffers the run keeps; its
// scratch buffers are freed before it returns.
func (r *devRun) blockRecord(op *blockOp[float32], x, y kernel.Buf) *devBlock {
	defer r.freeFrom(len(r.bufs))
	d := r.d
	n, w, m := op.rows, op.a.width, op.mlp
	p := &op.p
	stats := r.allocKept(4 * n)
	wOut, bOut := r.weights(p.Out)
	wProj, bProj := r.weights(p.Proj)
	h := r.alloc(n * w) // ln_1(x), the attention output and ln_2(x₁)
	x1 := r.allocKept(n * w)
	// ln_1, and x₁ = x + out_proj's bias, onto which its product goes.
	r.layerNormResidual(h, x, n, w, p.LN1, slice(stats, 0, n), slice(stats, n, 2*n), x1, bOut)
	qkv := r.allocKept(3 * n * w) // without in_proj's bias, which the head split adds
	qb := r.product(p.QKV, n, h, qkv)
	// out_proj's weight gradient reads the attention output: keep it.
	var kept kernel.Buf
	attn, bufs := h, []kernel.Buf{x, stats, qkv}
	if p.Out.Weight.RequiresGrad() {
		kept = r.allocKept(n * w)
		attn, bufs = kept, append(bufs, kept)
	}
	r.attend(op.a, qkv, qb, attn)
	r.productOnto(p.Out, n, attn, wOut, x1) // x₁ += out_proj(attn)
	// ln_2, and y = x₁ + c_proj's bias, onto which its product goes.
	r.layerNormResidual(h, x1, n, w, p.LN2, slice(stats, 2*n, 3*n), slice(stats, 3*n, 4*n), y, bProj)
	hidden := r.allocKept(n * m)
	b := r.product(p.FC, n, h, hidden)
	act := r.alloc(n * m)
	// hidden becomes the activation's slope, all backward needs of it,
	// unless c_proj's weight gradient needs the activation: then it keeps
	// the pre-activation (with the bias), from which backward recomputes
	// both.
	slope := !p.Proj.Weight.RequiresGrad()
	keep := kernel.KeepInput
	if slope {
		keep = kernel.KeepSlope
	}
	r.do(func() error { return d.BiasActivation(act, hidden, hidden, n, m, b, activationOf(p), keep) })
	r.productOnto(p.Proj, n, act, wProj, y) // y += c_proj(act)
	return &devBlock{d: d, x: x, stats: stats, qkv: qkv, x1: x1, hidden: hidden, attn: kept, slope: slope,
		bufs: append(bufs, x1, hidden)}
}

// slice is b.Slice(i, j), or nil for a buffer that failed to allocate.
func slice(b kernel.Buf, i, j int) kernel.Buf {
	if b == nil {
		return nil
	}
	return b.Slice(i, j)
}

// blockBackwardOnDevice is op.Backward for a forward pass that ran on d
// (blockRecordOnDevice): dy is uploaded once, and only the input gradient
// and the trainable parameters' gradients come back.
func blockBackwardOnDevice(op *blockOp[float32], dy []float32) {
	k := op.dev
	r := &devRun{d: k.d}
	defer r.close()
	if dx := r.blockBackward(op, k, r.upload(dy), op.x.RequiresGrad()); dx != nil {
		r.accGrad(op.x, dx, len(dy))
	}
}

// blockBackward runs the block's backward pass on the device from the
// output gradient dyd, with what blockRecord kept in k: the gradients of
// the block's trainable parameters are queued for flushGrads, and
// with wantDx the input gradient is returned in one of k's buffers (nil
// otherwise, or on an error). It follows the CPU's Backward step for step;
// like it, it recomputes ln_1(x) and ln_2(x₁) for the weight gradients of
// in_proj and c_fc rather than keeping them. Its scratch buffers are freed
// before it returns.
func (r *devRun) blockBackward(op *blockOp[float32], k *devBlock, dyd kernel.Buf, wantDx bool) kernel.Buf {
	defer r.freeFrom(len(r.bufs))
	d := r.d
	n, w, m := op.rows, op.a.width, op.mlp
	p := &op.p
	if k.slope && p.Proj.Weight.RequiresGrad() || k.attn == nil && p.Out.Weight.RequiresGrad() {
		panic("autograd: TransformerBlock: a linear weight became trainable after the forward pass")
	}

	// MLP: y = x₁ + c_proj(act(c_fc(ln_2(x₁)))).
	dHidden := r.alloc(n * m)
	r.inputGrad(p.Proj, n, dyd, dHidden)
	if k.slope {
		r.paramGrads(p.Proj, n, dyd, nil) // the bias's gradient, if trainable
		// By the kept slope: a pass of its own, after a product.
		r.do(func() error { return d.Mul(dHidden, dHidden, k.hidden, n*m) })
	} else {
		// The activation for c_proj's weight gradient, recomputed from its
		// input, and dHidden times the slope there, in one pass.
		act := r.alloc(n * m)
		r.do(func() error {
			return d.BiasActivation(act, dHidden, k.hidden, n, m, nil, activationOf(p), kernel.MulSlope)
		})
		r.paramGrads(p.Proj, n, dyd, act)
	}
	dH2 := r.alloc(n * w)
	if p.FC.trainable() {
		h2 := r.alloc(n * w)
		r.layerNorm(h2, k.x1, n, w, p.LN2, nil, nil)
		r.paramGrads(p.FC, n, dHidden, h2)
	}
	r.inputGrad(p.FC, n, dHidden, dH2)
	dx1 := r.alloc(n * w)
	// With the residual path's dy added in the same pass.
	r.layerNormBackwardResidual(dx1, dH2, k.x1, dyd, n, w, p.LN2, slice(k.stats, 2*n, 3*n), slice(k.stats, 3*n, 4*n))

	// Attention: x₁ = x + out_proj(attention(in_proj(ln_1(x)))).
	dAttn := dH2
	r.inputGrad(p.Out, n, dx1, dAttn)
	if p.Out.trainable() {
		r.paramGrads(p.Out, n, dx1, k.attn) // attn is nil when only the bias is trainable
	}
	dqkv := r.alloc(3 * n * w)
	_, qb := r.weights(p.QKV)
	r.attendBackward(op.a, k.qkv, qb, dAttn, dqkv)
	if p.QKV.trainable() {
		h1 := r.alloc(n * w)
		r.layerNorm(h1, k.x, n, w, p.LN1, nil, nil)
		r.paramGrads(p.QKV, n, dqkv, h1)
	}
	dH1 := dAttn
	r.inputGrad(p.QKV, n, dqkv, dH1)
	var dx kernel.Buf
	if wantDx {
		dx = k.x1 // x₁ is no longer needed
	}
	var res kernel.Buf // the residual path's gradient, added in the same pass
	if dx != nil {
		res = dx1
	}
	r.layerNormBackwardResidual(dx, dH1, k.x, res, n, w, p.LN1, slice(k.stats, 0, n), slice(k.stats, n, 2*n))
	if dx == nil || r.err != nil {
		return nil
	}
	return dx
}

// paramGrads is linearParamGrads on the device: dyᵀ·x [out, in] (x is the
// layer's input [rows, in]; unread when the weight is frozen) and the
// column sums of dy [rows, out] are computed there, downloaded and added
// to the gradients of the weight and the bias, for those that require
// them. The column sums are a product with a column of ones, so that they
// need no kernel of their own; the CPU sums the rows in another order.
func (r *devRun) paramGrads(p *LinearParams, rows int, dy, x kernel.Buf) {
	in, out := p.In(), p.Out()
	if p.Weight.RequiresGrad() {
		dw := r.gradFor(p.Weight, out*in)
		r.do(func() error { return r.d.Gemm(true, false, out, in, rows, 1, dy, out, x, in, 0, dw, in) })
	}
	if p.Bias != nil && p.Bias.RequiresGrad() {
		ones := r.onesColumn(rows)
		db := r.gradFor(p.Bias, out)
		r.do(func() error { return r.d.Gemm(true, false, out, 1, rows, 1, dy, out, ones, 1, 0, db, 1) })
	}
}

// onesColumn returns n ones on the device: uploaded once per run, since
// every block of a run has the same rows, and outside the blocks' scratch.
func (r *devRun) onesColumn(n int) kernel.Buf {
	if r.err != nil || r.ones != nil && r.ones.Len() >= n {
		return r.ones
	}
	if r.ones != nil {
		r.d.Free(r.ones)
		r.ones = nil
	}
	b, err := r.d.Alloc(n)
	if err != nil {
		r.err = err
		return nil
	}
	r.ones = b
	v := getBuf[float32](n)
	defer putBuf(v)
	for i := range *v {
		(*v)[i] = 1
	}
	r.do(func() error { return r.d.Upload(b, *v) })
	return b
}

// gradArena is the number of values of a chunk of device memory that
// allocGrad hands out small gradients from: a backward pass's LayerNorm
// gradients (52 × 768 values for ViT-B/32) come back in one download.
const gradArena = 1 << 18

// pendingGrad is a gradient on the device that flushGrads adds to t's:
// n values at g, or at off in arena chunk chunk when g is nil.
type pendingGrad struct {
	t          smat.Tensor
	g          kernel.Buf
	chunk, off int
	n          int
}

// gradFor returns a buffer of n values for a gradient, which lives until
// the run closes (past the scratch of the block that computes it): a slice
// of the run's arena when small, else a buffer of its own. With t set, what
// the buffer holds at flushGrads is added to t's gradient then, so that a
// backward pass waits for the device once rather than once per parameter.
func (r *devRun) gradFor(t smat.Tensor, n int) kernel.Buf {
	if r.err != nil {
		return nil
	}
	if n > gradArena/4 {
		b, err := r.d.Alloc(n)
		if err != nil {
			r.err = err
			return nil
		}
		r.gradBufs = append(r.gradBufs, b)
		if t != nil {
			r.grads = append(r.grads, pendingGrad{t: t, g: b, chunk: -1, n: n})
		}
		return b
	}
	if len(r.arena) == 0 || r.arenaUsed+n > gradArena {
		b, err := r.d.Alloc(gradArena)
		if err != nil {
			r.err = err
			return nil
		}
		r.arena = append(r.arena, b)
		r.arenaUsed = 0
	}
	off := r.arenaUsed
	r.arenaUsed += n
	if t != nil {
		r.grads = append(r.grads, pendingGrad{t: t, chunk: len(r.arena) - 1, off: off, n: n})
	}
	return slice(r.arena[len(r.arena)-1], off, off+n)
}

// accGrad downloads the n values of g now and adds them to t's gradient.
func (r *devRun) accGrad(t smat.Tensor, g kernel.Buf, n int) {
	buf := getBuf[float32](n)
	defer putBuf(buf)
	r.do(func() error { return r.d.Download(*buf, g) })
	if r.err == nil {
		accGrad(t, *buf)
	}
}

// flushGrads downloads the queued gradients, each arena chunk once, and
// adds them to their tensors in the order queued. close calls it.
func (r *devRun) flushGrads() {
	gs := r.grads
	r.grads = nil
	chunks := make([]*[]float32, len(r.arena))
	defer func() {
		for _, c := range chunks {
			if c != nil {
				putBuf(c)
			}
		}
	}()
	for _, p := range gs {
		if r.err != nil {
			return
		}
		if r.sinkGrad(p) { // kept on the device (DeviceAdam)
			continue
		}
		if p.g == nil {
			c := chunks[p.chunk]
			if c == nil {
				c = getBuf[float32](gradArena)
				chunks[p.chunk] = c
				n := gradArena
				if p.chunk == len(r.arena)-1 {
					n = r.arenaUsed
				}
				r.do(func() error { return r.d.Download((*c)[:n], r.arena[p.chunk]) })
				if r.err != nil {
					return
				}
			}
			accGrad(p.t, (*c)[p.off:p.off+p.n])
			continue
		}
		buf := getBuf[float32](p.n)
		r.do(func() error { return r.d.Download(*buf, p.g) })
		if r.err == nil {
			accGrad(p.t, *buf)
		}
		putBuf(buf)
	}
}

// inputGrad computes the input gradient dx = dy·W [rows, in] of a layer
// with a frozen weight from dy [rows, out] on the device.
func (r *devRun) inputGrad(p *LinearParams, rows int, dy, dx kernel.Buf) {
	in, out := p.In(), p.Out()
	w, _ := r.weights(p)
	r.do(func() error { return r.d.Gemm(false, false, rows, in, out, 1, dy, out, w, in, 0, dx, in) })
}

// layerNormBackward is blockOp.layerNormBackward on the device: dx
// (skipped when nil) is overwritten, and the gradients of ln's parameters
// that require them are queued for flushGrads.
func (r *devRun) layerNormBackward(dx, dy, x kernel.Buf, rows, cols int, ln *LayerNormParams, mean, rstd kernel.Buf) {
	r.layerNormBackwardResidual(dx, dy, x, nil, rows, cols, ln, mean, rstd)
}

// layerNormBackwardResidual is layerNormBackward with res, unless nil, added
// to dx in the same pass (kernel.Device.LayerNormBackwardResidual): the
// gradient of the residual path around the LayerNorm. dx must be set when
// res is.
func (r *devRun) layerNormBackwardResidual(dx, dy, x, res kernel.Buf, rows, cols int, ln *LayerNormParams, mean, rstd kernel.Buf) {
	trainG, trainB := ln.Gamma.RequiresGrad(), ln.Beta.RequiresGrad()
	if dx == nil && !trainG && !trainB {
		return
	}
	g := r.resident(ln.Gamma)
	var dg, db kernel.Buf
	if trainG || trainB {
		var tg, tb smat.Tensor // nil: computed with the other, not wanted
		if trainG {
			tg = ln.Gamma
		}
		if trainB {
			tb = ln.Beta
		}
		dg, db = r.gradFor(tg, cols), r.gradFor(tb, cols)
	}
	if res != nil {
		r.do(func() error { return r.d.LayerNormBackwardResidual(dx, dg, db, dy, x, res, rows, cols, g, mean, rstd) })
		return
	}
	r.do(func() error { return r.d.LayerNormBackward(dx, dg, db, dy, x, rows, cols, g, mean, rstd) })
}

// attendBackward is attendBackward on the device into a separate dqkv,
// every head of every sequence in one launch per step (as attend): q|k|v
// and dO split into heads, the probabilities recomputed from q and k, dP =
// dO·Vᵀ, dV = Pᵀ·dO, dS from the softmax's backward, dK = s·dSᵀ·Q and dQ =
// s·dS·K, each a strided-batched product over batch×heads, and dQ|dK|dV
// merged into dqkv.
func (r *devRun) attendBackward(a attention, qkv, bias, dout, dqkv kernel.Buf) {
	defer r.freeFrom(len(r.bufs))
	n, w, dh, bh := a.tokens, a.width, a.headDim(), a.batch*a.heads
	scale := float32(1 / math.Sqrt(float64(dh)))
	nw := a.batch * n * w
	hq, dhq, do := r.alloc(3*nw), r.alloc(3*nw), r.alloc(nw)
	r.do(func() error { return r.d.SplitHeadsBias(hq, qkv, bias, a.batch, n, 3, a.heads, dh) })
	r.do(func() error { return r.d.SplitHeads(do, dout, a.batch, n, 1, a.heads, dh) })
	q, k, v := slice(hq, 0, nw), slice(hq, nw, 2*nw), slice(hq, 2*nw, 3*nw)
	dq, dk, dv := slice(dhq, 0, nw), slice(dhq, nw, 2*nw), slice(dhq, 2*nw, 3*nw)
	p, dp := r.alloc(bh*n*n), r.alloc(bh*n*n)
	r.do(func() error {
		return r.d.GemmBatched(false, true, bh, n, n, dh, scale, q, dh, n*dh, k, dh, n*dh, 0, p, n, n*n)
	})
	r.do(func() error { return r.d.Softmax(p, p, bh*n, n, 1, a.causal) })
	r.do(func() error {
		return r.d.GemmBatched(false, true, bh, n, n, dh, 1, do, dh, n*dh, v, dh, n*dh, 0, dp, n, n*n)
	})
	r.do(func() error {
		return r.d.GemmBatched(true, false, bh, n, dh, n, 1, p, n, n*n, do, dh, n*dh, 0, dv, dh, n*dh)
	})
	r.do(func() error { return r.d.SoftmaxBackward(dp, dp, p, bh*n, n, 1) })
	r.do(func() error {
		return r.d.GemmBatched(true, false, bh, n, dh, n, scale, dp, n, n*n, q, dh, n*dh, 0, dk, dh, n*dh)
	})
	r.do(func() error {
		return r.d.GemmBatched(false, false, bh, n, dh, n, scale, dp, n, n*n, k, dh, n*dh, 0, dq, dh, n*dh)
	})
	r.do(func() error { return r.d.MergeHeads(dqkv, dhq, a.batch, n, 3, a.heads, dh) })
}
