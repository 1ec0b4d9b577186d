package autograd

import (
	"fmt"

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
// embed], in a pass that records no gradient: the ids (and TPT's context,
// when it changed) go up and only the features come back. Between them, on
// the device: the token embeddings looked up, with the context's rows in
// place of some, and the positional embedding added (one kernel), the
// blocks (as TransformerBlocks runs them there), each sequence's pooled
// row picked (one kernel), ln_final on those rows and the projection. The token embedding,
// the positional embedding, the projection and the blocks' weights stay on
// the device between calls (the blocks' when their layers keep them there:
// LinearParams.KeepOnDevice or KeepPacked), as do the LayerNorm parameters
// and the context, uploaded again only when their values change
// (devRun.resident).
//
// It reports false, doing nothing, when no device is set, when the tower
// has no block, when the values are not float32, or when any of them, the
// context included, requires a gradient: the ops then run one by one as
// before (the blocks still one op on the device, TransformerBlocks), so
// that TPT's recording pass through the context keeps its CPU embedding,
// ln_final and projection. The results equal those of the ops run one by
// one (GatherRows, ReplaceRows, AddTiled, TransformerBlocks, LayerNorm,
// GatherRows, MatMul; ln_final is row by row, so it gives the same values
// on the pooled rows alone) within the device's rounding; on kernel.Host bit for
// bit. It panics on input that does not fit the tower, and with a
// *DeviceError when the device fails.
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
	if !sameType("TextTowerOnDevice", ops...) || anyRequiresGrad(ops) {
		return nil, false
	}
	op := newTextOp(d, in, t)
	return op.forward(), true
}

// textOp is TextTowerOnDevice's shapes.
type textOp struct {
	d                kernel.Device
	in               TextInput
	t                *TextTower
	batch, L, w, emb int
	blocks           []*blockOp[float32]
	ids, pool        []float32
	vocab, ctxRows   int
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
