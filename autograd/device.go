package autograd

import (
	"fmt"
	"math"
	"runtime"

	"github.com/subtta/subtta/autograd/kernel"
)

// device holds the kernel.Device set by SetDevice; nil for the CPU.

// SetDevice makes float32 ops run their heavy parts on d (nil: the CPU,
// the default):
//
//   - a TransformerBlock none of whose operands requires a gradient (a
//     forward pass without a tape) runs whole on d: its input is uploaded
//     once, its result downloaded once;
//   - a TransformerBlock recording for backward, with every row computed
//     and no trace, runs forward and backward on d: forward keeps what
//     backward needs on d and downloads its result; backward uploads the
//     output gradient and downloads the input gradient and the gradients
//     of the trainable parameters (LayerNorms in adaptation, every weight
//     in training);
//   - TransformerBlocks of such blocks is one op: the activations stay on d
//     from the first block to the last;
//   - the towers run whole on d as one op each (VisionTowerOnDevice,
//     TextTowerOnDevice), with or without a tape;
//   - the products of any other Linear layer whose weight is frozen, x·Wᵀ +
//     b and the input gradient dy·W, run on d in every pass: the operand is
//     uploaded and the product downloaded at each call.
//
// A frozen weight (and bias) of a layer that keeps its weight packed or on
// the device (LinearParams.KeepPacked, KeepOnDevice) is uploaded once and
// kept on d, under the same rules as the packed copies. Other weights, the
// LayerNorm parameters, the towers' embeddings and projections and TPT's
// context are kept on d too, and uploaded again only when their values
// change (an optimizer step): a host copy of the values last uploaded is
// compared with them at each use (devRun.resident). Everything else (the
// row-wise ops of the blocks that trace or select rows, Linear layers with
// a trainable weight outside the blocks, float64) stays on the CPU. A
// device error panics, as forward passes cannot return errors. Do not call
// SetDevice while ops run.
//
// In the blocks, a linear layer is a product with beta = 0 followed by one
// pass that adds its bias with the activation or the head split
// (kernel.Device.BiasActivation, SplitHeadsBias); the two layers whose
// output joins the residual (out_proj, c_proj) are a product with beta = 1
// onto the residual stream, which the LayerNorm before them wrote with
// their bias added (LayerNormResidual). The results differ from the CPU's,
// which adds the bias with the product's first block of K and the
// residual after the product, by a rounding of each value. On a
// kernel.Half device in bf16 or fp16 a forward pass without a tape takes
// 16-bit operands in those products (the weights kept in 16 bits on d;
// blockForwardHalf).
//
// The device is kept by kernel.SetCurrent, where code that runs beside the
// model without the tape (the float64 feature math) finds it too.
func SetDevice(d kernel.Device) { kernel.SetCurrent(d) }

// CurrentDevice returns the device set by SetDevice, or nil.
func CurrentDevice() kernel.Device { return kernel.Current() }

// devRun is one computation on a device: the buffers it allocated, freed by
// close, and its first error, after which its calls do nothing.
type devRun struct {
	d    kernel.Device
	err  error
	bufs []kernel.Buf
	kept []kernel.Buf // outlive the run unless it fails (allocKept)
	keep []any        // values to keep alive until close (resident weights)
	ones kernel.Buf   // onesColumn's, freed by close

	// Gradients queued by gradFor for flushGrads, in arena chunks or
	// buffers of their own, freed by close.
	grads     []pendingGrad
	arena     []kernel.Buf
	arenaUsed int
	gradBufs  []kernel.Buf

	// For TowerGraphs: a dry run queues nothing and allocates nothing
	// (alloc returns placeholders of the right length) but looks up the
	// parameters' device copies as a real run would, uploading those that
	// changed; with track set, every parameter buffer looked up (resident,
	// weights, weights16) is appended to seen, in the order of the pass.
	// own marks a run that uploaded values for itself alone (an operand
	// that is not a matrix of its own), which a recording cannot replay.
	dry, track bool
	seen       []kernel.Buf
	own        bool
}

// dryBuf is a dry run's placeholder for device memory.
type dryBuf int

func (b dryBuf) Len() int                  { return int(b) }
func (b dryBuf) Slice(i, j int) kernel.Buf { return dryBuf(j - i) }

// note records b as a parameter buffer the run looked up (devRun.track).
func (r *devRun) note(b kernel.Buf) kernel.Buf {
	if r.track && b != nil {
		r.seen = append(r.seen, b)
	}
	return b
}

// do runs f unless an earlier call failed.
func (r *devRun) do(f func() error) {
	if r.err == nil && !r.dry {
		r.err = f()
	}
}

// alloc returns a buffer of n values that close frees.
func (r *devRun) alloc(n int) kernel.Buf {
	if r.err != nil {
		return nil
	}
	if r.dry {
		return dryBuf(n)
	}
	b, err := r.d.Alloc(n)
	if err != nil {
		r.err = err
		return nil
	}
	r.bufs = append(r.bufs, b)
	return b
}

// allocKept returns a buffer of n values that close frees only if the run
// failed: the caller takes r.kept over.
func (r *devRun) allocKept(n int) kernel.Buf {
	b := r.alloc(n)
	if b != nil && !r.dry {
		r.bufs = r.bufs[:len(r.bufs)-1]
		r.kept = append(r.kept, b)
	}
	return b
}

// upload returns v in a buffer that close frees.
func (r *devRun) upload(v []float32) kernel.Buf {
	r.own = true
	b := r.alloc(len(v))
	r.do(func() error { return r.d.Upload(b, v) })
	return b
}

// freeFrom frees the run's buffers from the mark-th on: the scratch of one
// block among many.
func (r *devRun) freeFrom(mark int) {
	for _, b := range r.bufs[mark:] {
		r.d.Free(b)
	}
	r.bufs = r.bufs[:mark]
}

// close adds the queued gradients to their tensors (flushGrads), frees the
// run's buffers and panics with its error, if any.
func (r *devRun) close() {
	if err := r.release(); err != nil {
		panic(&DeviceError{Device: r.d.Name(), Err: err})
	}
}

// release is close returning the run's error rather than panicking.
func (r *devRun) release() error {
	r.flushGrads()
	for _, b := range r.bufs {
		r.d.Free(b)
	}
	if r.ones != nil {
		r.d.Free(r.ones)
	}
	for _, b := range append(r.arena, r.gradBufs...) {
		r.d.Free(b)
	}
	runtime.KeepAlive(r.keep)
	if r.err != nil {
		for _, b := range r.kept {
			r.d.Free(b)
		}
	}
	return r.err
}

// DeviceError is the panic value of an op whose device failed (out of
// memory, a CUDA error): ops cannot return errors, so a caller that wants
// one recovers it.
type DeviceError struct {
	Device string // the device's name
	Err    error
}

func (e *DeviceError) Error() string { return fmt.Sprintf("autograd: device %s: %v", e.Device, e.Err) }
func (e *DeviceError) Unwrap() error { return e.Err }

// weights returns the layer's weight and its bias (nil without one) on the
// device: kept copies of a frozen weight (and bias) when the layer keeps its
// weight packed or on the device (KeepPacked, KeepOnDevice), checked by
// identity; else copies checked against the values at each call and
// uploaded when they changed (devRun.resident), as is a trainable bias.
func (r *devRun) weights(p *LinearParams) (w, b kernel.Buf) {
	w, b = r.lookupWeights(p)
	r.note(w)
	r.note(b)
	return w, b
}

// lookupWeights is weights without devRun.note.
func (r *devRun) lookupWeights(p *LinearParams) (w, b kernel.Buf) {
	if r.err != nil {
		return nil, nil
	}
	wv := values[float32](p.Weight)
	var bv, frozenB []float32
	if p.Bias != nil {
		bv = values[float32](p.Bias)
		if !p.Bias.RequiresGrad() && len(bv) > 0 {
			frozenB = bv
		}
	}
	c := p.packs
	if c != nil && p.Weight.RequiresGrad() {
		// A trainable weight changes between runs: never kept.
		c.mu.Lock()
		c.dev = nil
		c.mu.Unlock()
		c = nil
	}
	if c == nil || len(wv) == 0 {
		w = r.lookupResident(p.Weight)
		if bv != nil {
			b = r.lookupResident(p.Bias)
		}
		return w, b
	}
	c.mu.Lock()
	dc := c.dev
	if dc == nil || dc.d != r.d || dc.src != &wv[0] || dc.bsrc != first(frozenB) {
		dc, r.err = newDevCopy(r.d, wv, frozenB)
		c.dev = dc
	}
	c.mu.Unlock()
	if r.err != nil {
		return nil, nil
	}
	r.keep = append(r.keep, dc)
	w, b = dc.w, dc.b
	if b == nil && bv != nil {
		b = r.lookupResident(p.Bias)
	}
	return w, b
}

// first returns &v[0], or nil for an empty v.
func first(v []float32) *float32 {
	if len(v) == 0 {
		return nil
	}
	return &v[0]
}

// devCopy is a frozen weight, and its bias when that is frozen too, kept in
// a device's memory; a cleanup frees them once no layer or run holds it.
type devCopy struct {
	d         kernel.Device
	src, bsrc *float32 // the first values copied: a new matrix is noticed
	w, b      kernel.Buf
	w16       kernel.Buf // w in 16 bits, on a kernel.Half device (HalfOf)
}

// newDevCopy uploads w and bias (nil for none) to d.
func newDevCopy(d kernel.Device, w, bias []float32) (*devCopy, error) {
	dc := &devCopy{d: d, src: first(w), bsrc: first(bias)}
	var bufs []kernel.Buf
	free := func(bufs []kernel.Buf) {
		for _, b := range bufs {
			d.Free(b)
		}
	}
	for i, v := range [][]float32{w, bias} {
		if v == nil {
			continue
		}
		buf, err := d.Alloc(len(v))
		if err == nil {
			bufs = append(bufs, buf)
			err = d.Upload(buf, v)
		}
		if err != nil {
			free(bufs)
			return nil, err
		}
		if i == 0 {
			dc.w = buf
		} else {
			dc.b = buf
		}
	}
	if h, _ := kernel.HalfOf(d); h != nil && len(w) > 0 {
		buf, err := d.Alloc(kernel.HalfLen(len(w)))
		if err == nil {
			bufs = append(bufs, buf)
			err = h.ToHalf(buf, dc.w, len(w))
		}
		if err != nil {
			free(bufs)
			return nil, err
		}
		dc.w16 = buf
	}
	runtime.AddCleanup(dc, free, bufs)
	return dc, nil
}

// weights16 returns the layer's frozen weight in 16 bits and its bias on
// the device (newDevCopy), or nil when the weight has no 16-bit copy
// there (not kept: trainable, or a layer that does not keep its weight
// packed).
func (r *devRun) weights16(p *LinearParams) (w16, b kernel.Buf) {
	w, b := r.weights(p)
	if w == nil || p.packs == nil || p.Weight.RequiresGrad() {
		return nil, nil
	}
	p.packs.mu.Lock()
	dc := p.packs.dev
	p.packs.mu.Unlock()
	if dc == nil || dc.d != r.d || dc.src != first(values[float32](p.Weight)) || dc.w16 == nil {
		return nil, nil
	}
	return r.note(dc.w16), b
}

// linear computes y = x·Wᵀ + b on the device for x [rows, in] into y
// [rows, out]: the bias is copied into y first and the product added to it
// as the CPU kernel adds it (the bias with the first block of the sum).
func (r *devRun) linear(p *LinearParams, rows int, x, y kernel.Buf) {
	in, out := p.In(), p.Out()
	w, b := r.weights(p)
	beta := float32(0)
	if b != nil {
		r.do(func() error { return r.d.FillRows(y, rows, out, b) })
		beta = 1
	}
	r.do(func() error { return r.d.Gemm(false, true, rows, out, in, 1, x, in, w, in, beta, y, out) })
}

// product computes y = x·Wᵀ on the device for x [rows, in] into y [rows,
// out], with beta = 0, and returns the layer's bias there (nil without
// one) for the row-wise pass after it to add (BiasActivation,
// SplitHeadsBias): the bias and the activation in one pass rather than
// written into y before the product and added after it. The bias is added
// after the whole sum, where linear and the CPU add it with the sum's
// first block: the two differ by a rounding of each value.
func (r *devRun) product(p *LinearParams, rows int, x, y kernel.Buf) kernel.Buf {
	in, out := p.In(), p.Out()
	w, b := r.weights(p)
	r.do(func() error { return r.d.Gemm(false, true, rows, out, in, 1, x, in, w, in, 0, y, out) })
	return b
}

// productOnto adds x·Wᵀ to y [rows, out] on the device for x [rows, in],
// w the layer's weight there (devRun.weights): a Gemm with beta = 1 onto y,
// which holds the residual with the layer's bias already added
// (layerNormResidual), so that neither takes a pass of its own. cuBLAS adds
// y to the product's sum in its epilogue: the block's output x + b + Σ is
// rounded as x + b, then (x + b) + Σ, where a product with beta = 0 and a
// pass after it rounded Σ + b, then (Σ + b) + x. kernel.Host's Gemm adds
// each K block's partial sum to y in turn (a rounding at y's magnitude
// per 256 terms).
func (r *devRun) productOnto(p *LinearParams, rows int, x, w, y kernel.Buf) {
	in, out := p.In(), p.Out()
	r.do(func() error { return r.d.Gemm(false, true, rows, out, in, 1, x, in, w, in, 1, y, out) })
}

// linearOnDevice computes y = x·Wᵀ + b (x [rows, in], y [rows, out]) on d,
// or with grad set the input gradient y = x·W (x = dy [rows, out], y = dx
// [rows, in]). The weight must be frozen.
func linearOnDevice(d kernel.Device, p *LinearParams, rows int, x, y []float32, grad bool) {
	r := &devRun{d: d}
	defer r.close()
	in, out := p.In(), p.Out()
	xd := r.upload(x)
	yd := r.alloc(len(y))
	if grad {
		w, _ := r.weights(p)
		r.do(func() error { return d.Gemm(false, false, rows, in, out, 1, xd, out, w, in, 0, yd, in) })
	} else {
		r.linear(p, rows, xd, yd)
	}
	r.do(func() error { return d.Download(y, yd) })
}

// blockOnDevice is op.Forward without a tape, run on d (blockForward). The
// output rows op.sel, if set, are picked from the whole block's output after
// the download.
func blockOnDevice(d kernel.Device, op *blockOp[float32]) []float32 {
	r := &devRun{d: d}
	defer r.close()
	n, w := op.rows, op.a.width
	x := r.upload(values[float32](op.x))
	r.blockForward(op, x)
	y := make([]float32, n*w)
	r.do(func() error { return r.d.Download(y, x) })
	if op.sel == nil {
		return y
	}
	out := make([]float32, len(op.sel)*w)
	gatherRows(out, y, op.sel, w)
	return out
}

// blockForward replaces x on the device with the block's output, without
// a tape: the CPU path's steps in the same order, each as the device
// operation that its kernel call corresponds to. Its scratch buffers are
// freed before it returns.
func (r *devRun) blockForward(op *blockOp[float32], x kernel.Buf) {
	defer r.freeFrom(len(r.bufs))
	if r.blockForwardHalf(op, x) {
		return
	}
	d := r.d
	n, w, m := op.rows, op.a.width, op.mlp
	p := &op.p
	wOut, bOut := r.weights(p.Out)
	wProj, bProj := r.weights(p.Proj)
	h := r.alloc(n * w)
	x1 := r.alloc(n * w)
	r.layerNormResidual(h, x, n, w, p.LN1, nil, nil, x1, bOut) // and x₁ = x + out_proj's bias
	qkv := r.alloc(3 * n * w)
	b := r.product(p.QKV, n, h, qkv)
	r.attend(op.a, qkv, b, h)            // the attention output goes where ln_1(x) was
	r.productOnto(p.Out, n, h, wOut, x1) // x₁ += out_proj(attn)
	// ln_2, and y = x₁ + c_proj's bias where x was (x is read no more).
	r.layerNormResidual(h, x1, n, w, p.LN2, nil, nil, x, bProj)
	hidden := r.alloc(n * m)
	b = r.product(p.FC, n, h, hidden)
	r.do(func() error { return d.BiasActivation(hidden, nil, hidden, n, m, b, activationOf(p), kernel.KeepNone) })
	r.productOnto(p.Proj, n, hidden, wProj, x) // y += c_proj(act)
}

// activationOf returns the block's MLP activation.
func activationOf(p *BlockParams) kernel.Activation {
	if p.GELU {
		return kernel.GELUActivation
	}
	return kernel.QuickGELUActivation
}

// layerNormResidual is layerNorm that also writes res = x + bias (bias nil:
// res = x; kernel.Device.LayerNormResidual): the residual stream, with the
// bias of the linear layer that productOnto then adds onto it.
func (r *devRun) layerNormResidual(y, x kernel.Buf, rows, cols int, ln *LayerNormParams, mean, rstd, res, bias kernel.Buf) {
	g, b := r.resident(ln.Gamma), r.resident(ln.Beta)
	r.do(func() error { return r.d.LayerNormResidual(y, x, rows, cols, g, b, ln.Eps, mean, rstd, res, bias) })
}

// layerNorm normalises the rows of x into y with ln's parameters, kept on
// the device and uploaded again when they change (they are what adaptation
// changes: devRun.resident), and writes the row statistics to mean and rstd
// unless they are nil.
func (r *devRun) layerNorm(y, x kernel.Buf, rows, cols int, ln *LayerNormParams, mean, rstd kernel.Buf) {
	g, b := r.resident(ln.Gamma), r.resident(ln.Beta)
	r.do(func() error { return r.d.LayerNorm(y, x, rows, cols, g, b, ln.Eps, mean, rstd) })
}

// attend is attend on the device, every head of every sequence in one
// launch per step: q|k|v split into heads ([3, batch, heads, tokens, dh],
// kernel.Device.SplitHeadsBias, which adds in_proj's bias, nil for none:
// qkv is a product with beta = 0), S = s·Q·Kᵀ as one strided-batched product over
// batch×heads, the softmax of all its rows, P·V likewise, and the heads
// merged back into out's columns.
func (r *devRun) attend(a attention, qkv, bias, out kernel.Buf) {
	r.attendThen(a, qkv, bias, func(o kernel.Buf) error {
		return r.d.MergeHeads(out, o, a.batch, a.tokens, 1, a.heads, a.headDim())
	})
}

// attendThen is attend with merge in place of the last step: it gets the
// heads' outputs [batch, heads, tokens, dh].
func (r *devRun) attendThen(a attention, qkv, bias kernel.Buf, merge func(o kernel.Buf) error) {
	defer r.freeFrom(len(r.bufs))
	n, w, dh, bh := a.tokens, a.width, a.headDim(), a.batch*a.heads
	scale := float32(1 / math.Sqrt(float64(dh)))
	nw := a.batch * n * w
	hq := r.alloc(3 * nw)
	r.do(func() error { return r.d.SplitHeadsBias(hq, qkv, bias, a.batch, n, 3, a.heads, dh) })
	q, k, v := slice(hq, 0, nw), slice(hq, nw, 2*nw), slice(hq, 2*nw, 3*nw)
	s := r.alloc(bh * n * n)
	r.do(func() error {
		return r.d.GemmBatched(false, true, bh, n, n, dh, scale, q, dh, n*dh, k, dh, n*dh, 0, s, n, n*n)
	})
	r.do(func() error { return r.d.Softmax(s, s, bh*n, n, 1, a.causal) })
	o := q // Q is read: the heads' outputs go there
	r.do(func() error {
		return r.d.GemmBatched(false, false, bh, n, dh, n, 1, s, n, n*n, v, dh, n*dh, 0, o, dh, n*dh)
	})
	r.do(func() error { return merge(o) })
}
