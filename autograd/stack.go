package autograd

import (
	"runtime"
	"slices"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// TransformerBlocks applies the blocks to x [batch·tokens, width] one after
// another, as a loop of TransformerBlock does, with the same values and
// gradients. It differs only on a device (SetDevice), for float32 values:
// there the blocks are one op whose activations stay on the device from
// the first block to the last: x goes up once and only the last output
// comes back, and in backward the output gradient goes up once and only
// the input gradient and the gradients of the trainable parameters come
// back. Each block's scratch is freed as the next one starts.
func TransformerBlocks(x smat.Tensor, blocks []*BlockParams, batch int) smat.Tensor {
	if d := CurrentDevice(); d != nil && len(blocks) > 1 {
		if op := newStack(d, x, blocks, batch); op != nil {
			return run(op)
		}
	}
	for i, p := range blocks {
		y := TransformerBlock(x, p, batch, nil)
		if i > 0 {
			releaseBetween(x, y)
		}
		x = y
	}
	return x
}

// releaseBetween gives x, the output of one block and the input of the
// next, back to the buffer pool when neither it nor the next block's output
// y is on the tape: nothing but this loop holds x then.
func releaseBetween(x, y smat.Tensor) {
	if _, ok := x.(*ag.Operator); ok {
		return
	}
	if _, ok := y.(*ag.Operator); ok {
		return
	}
	switch x.Value().(type) {
	case *smat.Dense[float32]:
		v := values[float32](x)
		putBuf(&v)
	case *smat.Dense[float64]:
		v := values[float64](x)
		putBuf(&v)
	}
}

// stackOp is TransformerBlocks on a device.
type stackOp struct {
	d        kernel.Device
	x        smat.Tensor
	ops      []*blockOp[float32] // each block's shapes and parameters; their x is unused
	operands []smat.Tensor
	// needDx[i]: backward must reach block i's input (x requires a
	// gradient, or a parameter of an earlier block does).
	needDx []bool

	dev   []*devBlock // kept by a recording forward pass
	spent bool
}

// newStack returns the op of TransformerBlocks on d, or nil when the values
// are not all float32.
func newStack(d kernel.Device, x smat.Tensor, blocks []*BlockParams, batch int) *stackOp {
	rows, w := dims(x)
	s := &stackOp{d: d, x: x, operands: []smat.Tensor{x}}
	for _, p := range blocks {
		s.operands = append(s.operands, blockOperands(p)...)
	}
	s.ops = stackOps("TransformerBlocks", rows, w, blocks, batch)
	if !sameType("TransformerBlocks", s.operands...) {
		return nil
	}
	below := x.RequiresGrad()
	for _, op := range s.ops {
		s.needDx = append(s.needDx, below)
		below = below || slices.ContainsFunc(blockOperands(&op.p), smat.Tensor.RequiresGrad)
	}
	return s
}

// stackOps returns each block's shapes and parameters for a run on a
// device, checking that they fit x [rows, w] in batch sequences.
func stackOps(name string, rows, w int, blocks []*BlockParams, batch int) []*blockOp[float32] {
	var ops []*blockOp[float32]
	for _, p := range blocks {
		checkBlock(name, rows, w, p, batch)
		a := attention{batch: batch, tokens: rows / batch, heads: p.Heads, width: w, causal: p.Causal}
		ops = append(ops, &blockOp[float32]{p: *p, a: a, rows: rows, out: rows, mlp: p.FC.Out()})
	}
	return ops
}

func (s *stackOp) Operands() []smat.Tensor { return s.operands }

func (s *stackOp) Forward() (smat.Tensor, error) {
	r := &devRun{d: s.d}
	defer r.close()
	n, w := s.ops[0].rows, s.ops[0].a.width
	y := make([]float32, n*w)
	if !anyRequiresGrad(s.operands) {
		x := r.upload(values[float32](s.x))
		for _, op := range s.ops {
			r.blockForward(op, x)
		}
		r.do(func() error { return r.d.Download(y, x) })
		return newMatrix(y, n, w), nil
	}
	x := r.allocKept(n * w)
	r.do(func() error { return r.d.Upload(x, values[float32](s.x)) })
	var ks []*devBlock
	last := len(s.ops) - 1
	for i, op := range s.ops {
		var out kernel.Buf
		if i < last {
			out = r.allocKept(n * w) // the next block's input, kept by it
		} else {
			out = r.alloc(n * w)
		}
		ks = append(ks, r.blockRecord(op, x, out))
		x = out
	}
	r.do(func() error { return r.d.Download(y, x) })
	if r.err == nil {
		s.dev = ks
		runtime.AddCleanup(s, freeBlocks, ks)
	}
	return newMatrix(y, n, w), nil
}

func (s *stackOp) Backward(gy smat.Tensor) error {
	if s.spent {
		panic("autograd: TransformerBlocks: backward run twice through one graph")
	}
	s.spent = true
	ks := s.dev
	s.dev = nil
	r := &devRun{d: s.d}
	defer r.close()
	defer freeBlocks(ks)
	dy := values[float32](gy)
	dyd := r.upload(dy)
	for i := len(s.ops) - 1; i >= 0 && dyd != nil; i-- {
		dyd = r.blockBackward(s.ops[i], ks[i], dyd, s.needDx[i])
		if i < len(s.ops)-1 {
			ks[i+1].free() // its buffers held the gradient just used
		}
	}
	if dyd != nil && s.x.RequiresGrad() {
		r.accGrad(s.x, dyd, len(dy))
	}
	return nil
}

// freeBlocks frees what the blocks kept for backward.
func freeBlocks(ks []*devBlock) {
	for _, k := range ks {
		k.free()
	}
}
