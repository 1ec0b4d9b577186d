package autograd

import (
	"math"
	"runtime"
	"sync"

	"github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// devBlock is what a recording TransformerBlock keeps on the device for its
// backward pass: the block's input, the LayerNorm statistics, q|k|v, x₁
// and the activation's slope. free releases them once; a cleanup calls it
// if the graph is dropped without a backward pass.
type devBlock struct {
	d                         kernel.Device
	x, stats, qkv, x1, hidden kernel.Buf

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
// the device: every row computed, no trace, and only the input and the
// LayerNorm parameters trainable (the linear layers' gradients are computed
// on the CPU).
func (op *blockOp[T]) recordsOnDevice() bool {
	p := &op.p
	return op.sel == nil && op.trace == nil &&
		!p.QKV.trainable() && !p.Out.trainable() && !p.FC.trainable() && !p.Proj.trainable()
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
	h := y // ln_1(x), the attention output and ln_2(x₁) go where y will be
	r.layerNorm(h, x, n, w, p.LN1, slice(stats, 0, n), slice(stats, n, 2*n))
	qkv := r.allocKept(3 * n * w)
	r.linear(p.QKV, n, h, qkv)
	r.attend(op.a, qkv, h)
	proj := r.alloc(n * w)
	r.linear(p.Out, n, h, proj)
	x1 := r.allocKept(n * w)
	r.do(func() error { return d.Add(x1, x, proj, n*w) }) // x₁ = x + out_proj(attn)
	r.layerNorm(h, x1, n, w, p.LN2, slice(stats, 2*n, 3*n), slice(stats, 3*n, 4*n))
	hidden := r.allocKept(n * m)
	r.linear(p.FC, n, h, hidden)
	act := r.alloc(n * m)
	// hidden becomes the activation's slope, all backward needs of it.
	r.do(func() error {
		if p.GELU {
			if err := d.GELU(act, hidden, n*m); err != nil {
				return err
			}
			return d.GELUSlope(hidden, hidden, n*m)
		}
		return d.QuickGELUSlope(act, hidden, hidden, n*m)
	})
	r.linear(p.Proj, n, act, proj)
	r.do(func() error { return d.Add(y, x1, proj, n*w) }) // y = x₁ + c_proj(act)
	return &devBlock{d: d, x: x, stats: stats, qkv: qkv, x1: x1, hidden: hidden,
		bufs: []kernel.Buf{x, stats, qkv, x1, hidden}}
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
// and the LayerNorm parameters' gradients come back.
func blockBackwardOnDevice(op *blockOp[float32], dy []float32) {
	k := op.dev
	r := &devRun{d: k.d}
	defer r.close()
	if dx := r.blockBackward(op, k, r.upload(dy), op.x.RequiresGrad()); dx != nil {
		r.accInputGrad(op.x, dx, len(dy))
	}
}

// accInputGrad downloads the input gradient dx (n values) and adds it to
// x's gradient.
func (r *devRun) accInputGrad(x mat.Tensor, dx kernel.Buf, n int) {
	g := getBuf[float32](n)
	defer putBuf(g)
	r.do(func() error { return r.d.Download(*g, dx) })
	if r.err == nil {
		accGrad(x, *g)
	}
}

// blockBackward runs the block's backward pass on the device from the
// output gradient dyd, with what blockRecord kept in k: the LayerNorm
// parameters' gradients are downloaded and accumulated, and with wantDx the
// input gradient is returned in one of k's buffers (nil otherwise, or on an
// error). Its scratch buffers are freed before it returns.
func (r *devRun) blockBackward(op *blockOp[float32], k *devBlock, dyd kernel.Buf, wantDx bool) kernel.Buf {
	defer r.freeFrom(len(r.bufs))
	d := r.d
	n, w, m := op.rows, op.a.width, op.mlp
	p := &op.p
	for _, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
		if l.trainable() {
			panic("autograd: TransformerBlock: a linear layer became trainable after the forward pass")
		}
	}

	// MLP: y = x₁ + c_proj(act(c_fc(ln_2(x₁)))).
	dHidden := r.alloc(n * m)
	r.inputGrad(p.Proj, n, dyd, dHidden)
	r.do(func() error { return d.Mul(dHidden, dHidden, k.hidden, n*m) }) // by the slope
	dH2 := r.alloc(n * w)
	r.inputGrad(p.FC, n, dHidden, dH2)
	dx1 := r.alloc(n * w)
	r.layerNormBackward(dx1, dH2, k.x1, n, w, p.LN2, slice(k.stats, 2*n, 3*n), slice(k.stats, 3*n, 4*n))
	r.do(func() error { return d.Add(dx1, dx1, dyd, n*w) }) // the residual path

	// Attention: x₁ = x + out_proj(attention(in_proj(ln_1(x)))).
	dAttn := dH2
	r.inputGrad(p.Out, n, dx1, dAttn)
	dqkv := r.alloc(3 * n * w)
	r.attendBackward(op.a, k.qkv, dAttn, dqkv)
	dH1 := dAttn
	r.inputGrad(p.QKV, n, dqkv, dH1)
	var dx kernel.Buf
	if wantDx {
		dx = k.x1 // x₁ is no longer needed
	}
	r.layerNormBackward(dx, dH1, k.x, n, w, p.LN1, slice(k.stats, 0, n), slice(k.stats, n, 2*n))
	if dx == nil {
		return nil
	}
	r.do(func() error { return d.Add(dx, dx, dx1, n*w) })
	if r.err != nil {
		return nil
	}
	return dx
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
// that require them are downloaded and accumulated.
func (r *devRun) layerNormBackward(dx, dy, x kernel.Buf, rows, cols int, ln *LayerNormParams, mean, rstd kernel.Buf) {
	trainG, trainB := ln.Gamma.RequiresGrad(), ln.Beta.RequiresGrad()
	if dx == nil && !trainG && !trainB {
		return
	}
	g := r.upload(values[float32](ln.Gamma))
	var dg, db kernel.Buf
	if trainG || trainB {
		dp := r.alloc(2 * cols)
		dg, db = slice(dp, 0, cols), slice(dp, cols, 2*cols)
	}
	r.do(func() error { return r.d.LayerNormBackward(dx, dg, db, dy, x, rows, cols, g, mean, rstd) })
	if dg == nil {
		return
	}
	buf := getBuf[float32](2 * cols)
	defer putBuf(buf)
	r.do(func() error { return r.d.Download((*buf)[:cols], dg) })
	r.do(func() error { return r.d.Download((*buf)[cols:], db) })
	if r.err != nil {
		return
	}
	if trainG {
		accGrad(ln.Gamma, (*buf)[:cols])
	}
	if trainB {
		accGrad(ln.Beta, (*buf)[cols:])
	}
}

// attendBackward is attendBackward on the device into a separate dqkv:
// per head, for every sequence at once, the probabilities recomputed from
// q and k, dP = dO·Vᵀ, dV = Pᵀ·dO, dS from the softmax's backward, dK =
// s·dSᵀ·Q and dQ = s·dS·K.
func (r *devRun) attendBackward(a attention, qkv, dout, dqkv kernel.Buf) {
	n, w, dh, heads, b := a.tokens, a.width, a.headDim(), a.heads, a.batch
	scale := float32(1 / math.Sqrt(float64(dh)))
	p := r.alloc(b * n * n)
	dp := r.alloc(b * n * n)
	for hd := range heads {
		if r.err != nil {
			return
		}
		q, k, v := qkv.Slice(hd*dh, qkv.Len()), qkv.Slice(w+hd*dh, qkv.Len()), qkv.Slice(2*w+hd*dh, qkv.Len())
		dq, dk, dv := dqkv.Slice(hd*dh, dqkv.Len()), dqkv.Slice(w+hd*dh, dqkv.Len()), dqkv.Slice(2*w+hd*dh, dqkv.Len())
		do := dout.Slice(hd*dh, dout.Len())
		r.do(func() error {
			return r.d.GemmBatched(false, true, b, n, n, dh, scale, q, 3*w, n*3*w, k, 3*w, n*3*w, 0, p, n, n*n)
		})
		r.do(func() error { return r.d.Softmax(p, p, b*n, n, 1, a.causal) })
		r.do(func() error {
			return r.d.GemmBatched(false, true, b, n, n, dh, 1, do, w, n*w, v, 3*w, n*3*w, 0, dp, n, n*n)
		})
		r.do(func() error {
			return r.d.GemmBatched(true, false, b, n, dh, n, 1, p, n, n*n, do, w, n*w, 0, dv, 3*w, n*3*w)
		})
		r.do(func() error { return r.d.SoftmaxBackward(dp, dp, p, b*n, n, 1) })
		r.do(func() error {
			return r.d.GemmBatched(true, false, b, n, dh, n, scale, dp, n, n*n, q, 3*w, n*3*w, 0, dk, 3*w, n*3*w)
		})
		r.do(func() error {
			return r.d.GemmBatched(false, false, b, n, dh, n, scale, dp, n, n*n, k, 3*w, n*3*w, 0, dq, 3*w, n*3*w)
		})
	}
}
