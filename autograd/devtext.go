package autograd

import (
	"fmt"
	"runtime"
	"sync"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// TextTower is a causal text transformer's parameters, for
// TextTowerOnDevice: CLIP's encode_text.
type TextTower struct {
	Token   smat.Tensor // the token embedding [vocab, width]
	Pos     smat.Tensor // the positional embedding [context, width]
	Blocks  []*BlockParams
	LNFinal *LayerNormParams
	Proj    smat.Tensor // the projection [width, embed]
}

// TextInput is what TextTowerOnDevice encodes: batch sequences of the same
// length L, as rows of one matrix.
type TextInput struct {
	// IDs are the batch·L token ids, sequence after sequence. An id −1−k
	// stands for row k of Context (TPT's learnt context vectors), in place
	// of a token's embedding.
	IDs     []int
	Batch   int
	Context smat.Tensor // [n, width], or nil when no id is negative
	// Pool names, for each sequence, the position whose row is projected
	// (the end-of-text token): 0…L−1.
	Pool []int
}

// TextTowerOnDevice runs the whole text tower on the device set by
// SetDevice, from the token ids to the unnormalised features [batch,
// embed]: the ids (and TPT's context, when it changed) go up and only the
// features come back. Between them, on the device: the token embeddings
// looked up, with the context's rows in place of some, and the positional
// embedding added (one kernel), the blocks (as TransformerBlocks runs them
// there), each sequence's pooled row picked (one kernel), ln_final on those
// rows and the projection. The token embedding, the positional embedding,
// the projection and the blocks' weights stay on the device between calls
// (the blocks' when their layers keep them there: LinearParams.KeepOnDevice
// or KeepPacked), as do the LayerNorm parameters and the context, uploaded
// again only when their values change (devRun.resident).
//
// A pass that records for backward (TPT: the context requires a gradient;
// or any of the blocks' or ln_final's parameters) runs so too, as one op
// whose activations stay on the device until its backward pass: that
// uploads the features' gradient and downloads only the parameters'
// gradients, the context's summed there over the sequences. The token
// embedding, the positional embedding and the projection must then be
// frozen, and a trainable context's rows at positions 1…n of every
// sequence, as textenc.Model.ForwardContext puts them.
//
// It reports false, doing nothing, when no device is set, when the tower
// has no block, when the values are not float32, or when a recording pass
// does not meet those conditions: the ops then run one by one (the blocks
// still one op on the device, TransformerBlocks). The results equal those
// of the ops run one by one (GatherRows, ReplaceRows, AddTiled,
// TransformerBlocks, LayerNorm, GatherRows, MatMul; ln_final is row by row,
// so it gives the same values on the pooled rows alone) within the
// device's rounding; on kernel.Host the features bit for bit. It panics on
// input that does not fit the tower, and with a *DeviceError when the
// device fails.
func TextTowerOnDevice(in TextInput, t *TextTower) (smat.Tensor, bool) {
	d := CurrentDevice()
	if d == nil || len(t.Blocks) == 0 {
		return nil, false
	}
	ops := []smat.Tensor{t.Token, t.Pos, t.Proj, t.LNFinal.Gamma, t.LNFinal.Beta}
	for _, b := range t.Blocks {
		ops = append(ops, blockOperands(b)...)
	}
	if in.Context != nil {
		ops = append(ops, in.Context)
	}
	if !sameType("TextTowerOnDevice", ops...) || anyRequiresGrad([]smat.Tensor{t.Token, t.Pos, t.Proj}) {
		return nil, false
	}
	op := newTextOp(d, in, t)
	op.operands = ops
	if !anyRequiresGrad(ops) {
		return op.forward(), true
	}
	below := in.Context != nil && in.Context.RequiresGrad()
	if below && !op.contextAfterStart() {
		return nil, false
	}
	for _, b := range op.blocks {
		op.needDx = append(op.needDx, below)
		below = below || anyRequiresGrad(blockOperands(&b.p))
	}
	return run(op), true
}

// textOp is TextTowerOnDevice's shapes, and what a recording forward pass
// keeps on the device for backward.
type textOp struct {
	d                kernel.Device
	in               TextInput
	t                *TextTower
	operands         []smat.Tensor
	batch, L, w, emb int
	blocks           []*blockOp[float32]
	ids, pool        []float32
	vocab, ctxRows   int
	needDx           []bool // backward must reach block i's input
	kept             *textKept
	spent            bool
}

// textKept is what backward needs: each block's kept values, and
// ln_final's input (the pooled rows) and statistics.
type textKept struct {
	c, stats kernel.Buf
	ks       []*devBlock
	once     sync.Once
}

func (k *textKept) free(d kernel.Device) {
	k.once.Do(func() {
		d.Free(k.c)
		d.Free(k.stats)
		freeBlocks(k.ks)
	})
}

func newTextOp(d kernel.Device, in TextInput, t *TextTower) *textOp {
	vocab, w := dims(t.Token)
	posRows, pw := dims(t.Pos)
	projRows, embed := dims(t.Proj)
	batch := in.Batch
	if batch <= 0 || len(in.IDs)%batch != 0 || len(in.Pool) != batch {
		panic(fmt.Sprintf("autograd: TextTowerOnDevice: %d ids and %d pooled positions for %d sequences", len(in.IDs), len(in.Pool), batch))
	}
	L := len(in.IDs) / batch
	if L == 0 || L > posRows || pw != w || projRows != w || t.LNFinal.Gamma.Size() != w || vocab > kernel.MaxRowIndex || batch*L > kernel.MaxRowIndex {
		panic(fmt.Sprintf("autograd: TextTowerOnDevice: %d sequences of %d tokens, token embedding [%d, %d], pos [%d, %d], proj [%d, %d] do not fit",
			batch, L, vocab, w, posRows, pw, projRows, embed))
	}
	nctx := 0
	if in.Context != nil {
		var cw int
		nctx, cw = dims(in.Context)
		if cw != w {
			panic(fmt.Sprintf("autograd: TextTowerOnDevice: context of width %d, the tower's is %d", cw, w))
		}
	}
	op := &textOp{d: d, in: in, t: t, batch: batch, L: L, w: w, emb: embed, vocab: vocab, ctxRows: nctx}
	op.ids = make([]float32, len(in.IDs))
	for i, id := range in.IDs {
		if id >= vocab || id < -nctx {
			panic(fmt.Sprintf("autograd: TextTowerOnDevice: id %d at %d outside the vocabulary (%d) and the context (%d rows)", id, i, vocab, nctx))
		}
		op.ids[i] = float32(id)
	}
	op.pool = make([]float32, batch)
	for i, p := range in.Pool {
		if p < 0 || p >= L {
			panic(fmt.Sprintf("autograd: TextTowerOnDevice: sequence %d pooled at %d, outside 0…%d", i, p, L-1))
		}
		op.pool[i] = float32(i*L + p)
	}
	op.blocks = stackOps("TextTowerOnDevice", batch*L, w, t.Blocks, batch)
	return op
}

// forward is the pass without gradients.
func (op *textOp) forward() smat.Tensor {
	r := &devRun{d: op.d}
	defer r.close()
	d, t := r.d, op.t
	batch, L, w, embed := op.batch, op.L, op.w, op.emb
	rows := batch * L
	ids := r.upload(op.ids)
	token, pos := r.resident(t.Token), r.resident(t.Pos)
	var ctx kernel.Buf
	if op.in.Context != nil {
		ctx = r.resident(op.in.Context)
	}
	x := r.alloc(rows * w)
	r.do(func() error { return d.GatherRows(x, token, ctx, ids, rows, w, pos, L) })
	for _, b := range op.blocks {
		r.blockForward(b, x)
	}
	// ln_final is row by row: the pooled rows picked first give the same
	// values for a batch-th of the work.
	pool := r.upload(op.pool)
	c := r.alloc(batch * w)
	r.do(func() error { return d.GatherRows(c, x, nil, pool, batch, w, nil, 0) })
	cn := r.alloc(batch * w)
	r.layerNorm(cn, c, batch, w, t.LNFinal, nil, nil)
	f := r.alloc(batch * embed)
	proj := r.resident(t.Proj)
	r.do(func() error { return d.Gemm(false, false, batch, embed, w, 1, cn, w, proj, embed, 0, f, embed) })
	y := make([]float32, batch*embed)
	r.do(func() error { return d.Download(y, f) })
	return newMatrix(y, batch, embed)
}

func (op *textOp) Operands() []smat.Tensor { return op.operands }

// contextAfterStart reports whether the context's rows are where TPT puts
// them, and nowhere else: row k at position 1+k of every sequence (the
// layout whose gradient Backward sums with one product).
func (op *textOp) contextAfterStart() bool {
	n := op.ctxRows
	if 1+n > op.L {
		return false
	}
	for i, id := range op.in.IDs {
		p := i % op.L
		if want := -1 - (p - 1); p >= 1 && p <= n {
			if id != want {
				return false
			}
		} else if id < 0 {
			return false
		}
	}
	return true
}

// embed looks up the tokens' embeddings, the context's rows in place of
// some, plus the positional embedding, into x [batch·L, width].
func (op *textOp) embed(r *devRun, x kernel.Buf) {
	t := op.t
	ids := r.upload(op.ids)
	token, pos := r.resident(t.Token), r.resident(t.Pos)
	var ctx kernel.Buf
	if op.in.Context != nil {
		ctx = r.resident(op.in.Context)
	}
	r.do(func() error { return r.d.GatherRows(x, token, ctx, ids, op.batch*op.L, op.w, pos, op.L) })
}

// Forward is the recording pass: forward's steps, keeping what backward
// needs on the device.
func (op *textOp) Forward() (smat.Tensor, error) {
	r := &devRun{d: op.d}
	defer r.close()
	d, t := r.d, op.t
	batch, w, embed := op.batch, op.w, op.emb
	rows := batch * op.L
	k := &textKept{}
	x := r.allocKept(rows * w) // the first block's input, kept by it
	op.embed(r, x)
	last := len(op.blocks) - 1
	for i, b := range op.blocks {
		var out kernel.Buf
		if i < last {
			out = r.allocKept(rows * w) // the next block's input, kept by it
		} else {
			out = r.alloc(rows * w)
		}
		k.ks = append(k.ks, r.blockRecord(b, x, out))
		x = out
	}
	pool := r.upload(op.pool)
	k.c = r.allocKept(batch * w)
	r.do(func() error { return d.GatherRows(k.c, x, nil, pool, batch, w, nil, 0) })
	k.stats = r.allocKept(2 * batch)
	cn := r.alloc(batch * w)
	r.layerNorm(cn, k.c, batch, w, t.LNFinal, slice(k.stats, 0, batch), slice(k.stats, batch, 2*batch))
	f := r.alloc(batch * embed)
	proj := r.resident(t.Proj)
	r.do(func() error { return d.Gemm(false, false, batch, embed, w, 1, cn, w, proj, embed, 0, f, embed) })
	y := make([]float32, batch*embed)
	r.do(func() error { return d.Download(y, f) })
	if r.err == nil {
		op.kept = k
		runtime.AddCleanup(op, func(k *textKept) { k.free(d) }, k)
	}
	return newMatrix(y, batch, embed), nil
}

// Backward uploads the features' gradient and runs on the device the
// projection's input gradient, ln_final's backward, the pooled rows'
// gradient placed in their rows (zero elsewhere: one gather from it and a
// row of zeros), the blocks' backward passes down to the first whose input
// needs no gradient, and the context's gradient, the sum over the
// sequences of the rows it took (one product with a column of ones); only
// the parameters' gradients come back, in one download.
func (op *textOp) Backward(gy smat.Tensor) error {
	if op.spent {
		panic("autograd: TextTowerOnDevice: backward run twice through one graph")
	}
	op.spent = true
	k := op.kept
	op.kept = nil
	r := &devRun{d: op.d}
	defer r.close()
	defer k.free(op.d)
	d, t := r.d, op.t
	batch, L, w, embed := op.batch, op.L, op.w, op.emb
	rows := batch * L
	df := r.upload(values[float32](gy))
	dcn := r.alloc(batch * w)
	proj := r.resident(t.Proj)
	r.do(func() error { return d.Gemm(false, true, batch, w, embed, 1, df, embed, proj, embed, 0, dcn, w) })
	dc := r.alloc(batch * w)
	r.layerNormBackward(dc, dcn, k.c, batch, w, t.LNFinal, slice(k.stats, 0, batch), slice(k.stats, batch, 2*batch))
	// Row i of dy: dc's row s where i is sequence s's pooled row, else the
	// zero row (index −1 of alt).
	spread := make([]float32, rows)
	for i := range spread {
		spread[i] = -1
	}
	for s, p := range op.in.Pool {
		spread[s*L+p] = float32(s)
	}
	idx, zero := r.upload(spread), r.upload(make([]float32, w))
	dy := r.alloc(rows * w)
	r.do(func() error { return d.GatherRows(dy, dc, zero, idx, rows, w, nil, 0) })
	last := len(op.blocks) - 1
	for i := last; i >= 0 && dy != nil; i-- {
		dy = r.blockBackward(op.blocks[i], k.ks[i], dy, op.needDx[i])
		if i < last {
			k.ks[i+1].free() // its buffers held the gradient just used
		}
	}
	ctx := op.in.Context
	if dy == nil || ctx == nil || !ctx.RequiresGrad() {
		return nil
	}
	// The context's rows k are positions 1+k of every sequence: as a matrix
	// [batch, n·width] with leading dimension L·width, from row 1 of dy.
	n := op.ctxRows
	ones := r.onesColumn(batch)
	g := r.gradFor(ctx, n*w)
	r.do(func() error {
		return d.Gemm(false, false, 1, n*w, batch, 1, ones, batch, slice(dy, w, rows*w), L*w, 0, g, n*w)
	})
	return nil
}
