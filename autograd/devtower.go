package autograd

import (
	"fmt"
	"runtime"
	"sync"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// VisionTower is a vision transformer's parameters, for VisionTowerOnDevice:
// CLIP's encode_image.
type VisionTower struct {
	Geometry PatchGeometry
	Patch    *LinearParams // the patch embedding [width, C·P·P]
	Class    smat.Tensor   // the class token, width values
	Pos      smat.Tensor   // the positional embedding [grid+1, width]
	LNPre    *LayerNormParams
	Blocks   []*BlockParams
	LNPost   *LayerNormParams
	Proj     smat.Tensor // the projection [width, embed]

	// Graphs, when not nil, keeps recordings of the passes without
	// gradients on a device that records them (TowerGraphs); the model
	// that owns the tower owns it.
	Graphs *TowerGraphs
}

// operands returns every tensor of the tower.
func (v *VisionTower) operands() []smat.Tensor {
	ts := []smat.Tensor{v.Class, v.Pos, v.Proj}
	for _, ps := range [][]smat.Matrix{v.Patch.Parameters(), v.LNPre.Parameters(), v.LNPost.Parameters()} {
		for _, t := range ps {
			ts = append(ts, t)
		}
	}
	for _, b := range v.Blocks {
		ts = append(ts, blockOperands(b)...)
	}
	return ts
}

// VisionTowerOnDevice runs the whole tower on the device set by SetDevice,
// from the images [batch, C·H·W] to the unnormalised features [batch,
// embed]: the images go up once and only the features come back. Between
// them, on the device: the patches and their embedding (one product), the
// class token and the positional embedding, ln_pre, the blocks (as
// TransformerBlocks runs them there, the last for every token), the class
// tokens picked, ln_post and the projection. The patch weight, when its
// layer keeps it packed, and the blocks' frozen weights stay on the device
// between calls; so do the LayerNorm parameters, the embeddings and the
// projection, uploaded again only when their values change (an optimizer
// step: devRun.resident).
//
// A pass that records for backward (adaptation: the LayerNorms, or any of
// the blocks' parameters, require gradients) runs so too, as one op whose
// activations stay on the device until its backward pass: that uploads the
// features' gradient and downloads only the parameters' gradients. The
// images, the patch embedding, the class token, the positional embedding
// and the projection must then be frozen.
//
// It reports false, doing nothing, when no device is set, when the values
// are not float32, or when one of the tensors just named requires a
// gradient (the ops then run one by one). The results equal those of the
// ops run one by one (PatchEmbed, TokenEmbedding, LayerNorm,
// TransformerBlocks, GatherRows, LayerNorm, MatMul) within the device's
// rounding; on kernel.Host the features bit for bit. It panics on shapes
// that do not fit, as those ops do, and with a *DeviceError when the device
// fails.
func VisionTowerOnDevice(images smat.Tensor, v *VisionTower) (smat.Tensor, bool) {
	d := CurrentDevice()
	if d == nil || len(v.Blocks) == 0 {
		return nil, false
	}
	ops := append([]smat.Tensor{images}, v.operands()...)
	if !sameType("VisionTowerOnDevice", ops...) {
		return nil, false
	}
	fixed := []smat.Tensor{images, v.Class, v.Pos, v.Proj}
	for _, t := range v.Patch.Parameters() {
		fixed = append(fixed, t)
	}
	if anyRequiresGrad(fixed) {
		return nil, false
	}
	op := newTowerOp(d, images, v)
	op.operands = ops
	if !anyRequiresGrad(ops) {
		return op.forward(), true
	}
	below := v.LNPre.Gamma.RequiresGrad() || v.LNPre.Beta.RequiresGrad()
	for _, b := range op.blocks {
		op.needDx = append(op.needDx, below)
		below = below || anyRequiresGrad(blockOperands(&b.p))
	}
	return run(op), true
}

// towerOp is VisionTowerOnDevice: its shapes, and what a recording forward
// pass keeps on the device for backward.
type towerOp struct {
	d            kernel.Device
	images       smat.Tensor
	v            *VisionTower
	operands     []smat.Tensor
	batch, cols  int // images, values per image
	grid, w, emb int
	blocks       []*blockOp[float32]
	needDx       []bool // backward must reach block i's input
	kept         *towerKept
	spent        bool
}

// towerKept is what backward needs: ln_pre's input and statistics, each
// block's kept values, and ln_post's input (the class tokens) and
// statistics.
type towerKept struct {
	e, preStats, c, postStats kernel.Buf
	ks                        []*devBlock
	once                      sync.Once
}

func (k *towerKept) free(d kernel.Device) {
	k.once.Do(func() {
		for _, b := range []kernel.Buf{k.e, k.preStats, k.c, k.postStats} {
			d.Free(b)
		}
		freeBlocks(k.ks)
	})
}

func newTowerOp(d kernel.Device, images smat.Tensor, v *VisionTower) *towerOp {
	g := v.Geometry
	batch, cols := dims(images)
	gr, gc := g.Grid()
	if g.Channels <= 0 || g.Patch <= 0 || g.Height < g.Patch || g.Width < g.Patch || cols != g.Channels*g.Height*g.Width || batch == 0 {
		panic(fmt.Sprintf("autograd: VisionTowerOnDevice: %d images with %d values per row do not match %+v", batch, cols, g))
	}
	grid, rowLen, w := gr*gc, g.Channels*g.Patch*g.Patch, v.Patch.Out()
	pr, pc := dims(v.Pos)
	projRows, embed := dims(v.Proj)
	if v.Patch.In() != rowLen || v.Class.Size() != w || pr != grid+1 || pc != w || projRows != w ||
		v.LNPre.Gamma.Size() != w || v.LNPost.Gamma.Size() != w {
		panic(fmt.Sprintf("autograd: VisionTowerOnDevice: patches of %d values, width %d, class %d, pos [%d, %d], proj [%d, %d] do not fit",
			rowLen, w, v.Class.Size(), pr, pc, projRows, embed))
	}
	return &towerOp{d: d, images: images, v: v, batch: batch, cols: cols, grid: grid, w: w, emb: embed,
		blocks: stackOps("VisionTowerOnDevice", batch*(grid+1), w, v.Blocks, batch)}
}

func (op *towerOp) Operands() []smat.Tensor { return op.operands }

// embed runs the patches of the images in img, their embedding and the
// token embedding into a new buffer e [rows, width], which the run keeps
// when keep is set.
func (op *towerOp) embed(r *devRun, img kernel.Buf, keep bool) kernel.Buf {
	d, g, v := r.d, op.v.Geometry, op.v
	batch, grid, w := op.batch, op.grid, op.w
	patches := r.alloc(batch * grid * g.Channels * g.Patch * g.Patch)
	r.do(func() error { return d.Patches(patches, img, batch, g.Channels, g.Height, g.Width, g.Patch) })
	emb := r.alloc(batch * grid * w)
	r.linear(v.Patch, batch*grid, patches, emb)
	var e kernel.Buf
	if keep {
		e = r.allocKept(batch * (grid + 1) * w)
	} else {
		e = r.alloc(batch * (grid + 1) * w)
	}
	cls, pos := r.resident(v.Class), r.resident(v.Pos)
	r.do(func() error { return d.TokenEmbed(e, emb, cls, pos, batch, grid, w) })
	return e
}

// projectInto computes the features [batch, embed] into f from the class
// tokens after ln_post, cn [batch, width].
func (op *towerOp) projectInto(r *devRun, cn, f kernel.Buf) {
	batch, w, embed := op.batch, op.w, op.emb
	proj := r.resident(op.v.Proj)
	r.do(func() error { return r.d.Gemm(false, false, batch, embed, w, 1, cn, w, proj, embed, 0, f, embed) })
}

// project computes the features from the class tokens after ln_post, cn
// [batch, width], and downloads them.
func (op *towerOp) project(r *devRun, cn kernel.Buf) smat.Tensor {
	f := r.alloc(op.batch * op.emb)
	op.projectInto(r, cn, f)
	return op.download(r, f)
}

// download returns the features in f [batch, embed].
func (op *towerOp) download(r *devRun, f kernel.Buf) smat.Tensor {
	y := make([]float32, op.batch*op.emb)
	r.do(func() error { return r.d.Download(y, f) })
	return newMatrix(y, op.batch, op.emb)
}

// forward is the pass without gradients: replayed from the tower's
// recording where it has one (TowerGraphs), else queued op by op.
func (op *towerOp) forward() smat.Tensor {
	if y, ok := op.replay(); ok {
		return y
	}
	r := &devRun{d: op.d}
	defer r.close()
	f := r.alloc(op.batch * op.emb)
	op.queue(r, r.input(op.images), f) // the input once per step where the images are held (HoldOnDevice)
	return op.download(r, f)
}

// queue queues the pass without gradients from the images in img to the
// features in f, uploading nothing and downloading nothing: what a
// recording (TowerGraphs) holds.
func (op *towerOp) queue(r *devRun, img, f kernel.Buf) {
	d, v := r.d, op.v
	batch, w, t := op.batch, op.w, op.grid+1
	rows := batch * t
	e := op.embed(r, img, false)
	x := r.alloc(rows * w)
	r.layerNorm(x, e, rows, w, v.LNPre, nil, nil)
	for _, b := range op.blocks {
		r.blockForward(b, x)
	}
	c := r.alloc(batch * w)
	r.do(func() error { return d.StrideRows(c, x, batch, w, t) })
	cn := r.alloc(batch * w)
	r.layerNorm(cn, c, batch, w, v.LNPost, nil, nil)
	op.projectInto(r, cn, f)
}

// Forward is the recording pass: forward's steps, keeping what backward
// needs on the device.
func (op *towerOp) Forward() (smat.Tensor, error) {
	r := &devRun{d: op.d}
	defer r.close()
	d, v := r.d, op.v
	batch, w, t := op.batch, op.w, op.grid+1
	rows := batch * t
	k := &towerKept{}
	k.e = op.embed(r, r.input(op.images), true)
	k.preStats = r.allocKept(2 * rows)
	x := r.allocKept(rows * w) // the first block's input, kept by it
	r.layerNorm(x, k.e, rows, w, v.LNPre, slice(k.preStats, 0, rows), slice(k.preStats, rows, 2*rows))
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
	k.c = r.allocKept(batch * w)
	r.do(func() error { return d.StrideRows(k.c, x, batch, w, t) })
	k.postStats = r.allocKept(2 * batch)
	cn := r.alloc(batch * w)
	r.layerNorm(cn, k.c, batch, w, v.LNPost, slice(k.postStats, 0, batch), slice(k.postStats, batch, 2*batch))
	y := op.project(r, cn)
	if r.err == nil {
		op.kept = k
		runtime.AddCleanup(op, func(k *towerKept) { k.free(d) }, k)
	}
	return y, nil
}

// Backward uploads the features' gradient, runs the projection's input
// gradient, ln_post's backward, the class tokens' gradient spread over the
// rows (zero elsewhere), the blocks' backward passes down to the first
// whose input needs no gradient, and ln_pre's backward, on the device;
// only the parameters' gradients come back.
func (op *towerOp) Backward(gy smat.Tensor) error {
	if op.spent {
		panic("autograd: VisionTowerOnDevice: backward run twice through one graph")
	}
	op.spent = true
	k := op.kept
	op.kept = nil
	r := &devRun{d: op.d}
	defer r.close()
	defer k.free(op.d)
	d, v := r.d, op.v
	batch, w, t, embed := op.batch, op.w, op.grid+1, op.emb
	rows := batch * t
	df := r.upload(values[float32](gy))
	dcn := r.alloc(batch * w)
	proj := r.resident(v.Proj)
	r.do(func() error { return d.Gemm(false, true, batch, w, embed, 1, df, embed, proj, embed, 0, dcn, w) })
	dc := r.alloc(batch * w)
	r.layerNormBackward(dc, dcn, k.c, batch, w, v.LNPost, slice(k.postStats, 0, batch), slice(k.postStats, batch, 2*batch))
	dy := r.alloc(rows * w)
	zero := r.upload(make([]float32, w))
	r.do(func() error { return d.FillRows(dy, rows, w, zero) })
	r.do(func() error { return d.SpreadRows(dy, dc, batch, w, t) })
	last := len(op.blocks) - 1
	for i := last; i >= 0 && dy != nil; i-- {
		dy = r.blockBackward(op.blocks[i], k.ks[i], dy, op.needDx[i])
		if i < last {
			k.ks[i+1].free() // its buffers held the gradient just used
		}
	}
	if dy != nil {
		r.layerNormBackward(nil, dy, k.e, rows, w, v.LNPre, slice(k.preStats, 0, rows), slice(k.preStats, rows, 2*rows))
	}
	return nil
}
