package autograd

import (
	"fmt"

	smat "github.com/nlpodyssey/spago/mat"
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
// between calls; the rest (LayerNorm parameters, embeddings, projection) is
// uploaded at each.
//
// It reports false, doing nothing, when no device is set, when any tensor
// requires a gradient (the pass records a graph: the ops run one by one),
// or when the values are not float32. The results equal those of the ops
// run one by one (PatchEmbed, TokenEmbedding, LayerNorm, TransformerBlocks,
// GatherRows, LayerNorm, MatMul) within the device's rounding; on
// kernel.Host bit for bit, except that the CPU's patch product packs the
// weight, which changes no sum's order. It panics on shapes that do not fit,
// as those ops do, and with a *DeviceError when the device fails.
func VisionTowerOnDevice(images smat.Tensor, v *VisionTower) (smat.Tensor, bool) {
	d := CurrentDevice()
	if d == nil || len(v.Blocks) == 0 {
		return nil, false
	}
	ops := append([]smat.Tensor{images}, v.operands()...)
	if anyRequiresGrad(ops) || !sameType("VisionTowerOnDevice", ops...) {
		return nil, false
	}
	g := v.Geometry
	batch, cols := dims(images)
	gr, gc := g.Grid()
	if g.Channels <= 0 || g.Patch <= 0 || g.Height < g.Patch || g.Width < g.Patch || cols != g.Channels*g.Height*g.Width || batch == 0 {
		panic(fmt.Sprintf("autograd: VisionTowerOnDevice: %d images with %d values per row do not match %+v", batch, cols, g))
	}
	grid, rowLen, w := gr*gc, g.Channels*g.Patch*g.Patch, v.Patch.Out()
	t := grid + 1
	pr, pc := dims(v.Pos)
	projRows, embed := dims(v.Proj)
	if v.Patch.In() != rowLen || v.Class.Size() != w || pr != t || pc != w || projRows != w ||
		v.LNPre.Gamma.Size() != w || v.LNPost.Gamma.Size() != w {
		panic(fmt.Sprintf("autograd: VisionTowerOnDevice: patches of %d values, width %d, class %d, pos [%d, %d], proj [%d, %d] do not fit",
			rowLen, w, v.Class.Size(), pr, pc, projRows, embed))
	}
	rows := batch * t
	blocks := stackOps("VisionTowerOnDevice", rows, w, v.Blocks, batch)

	r := &devRun{d: d}
	defer r.close()
	img := r.upload(values[float32](images))
	patches := r.alloc(batch * grid * rowLen)
	r.do(func() error { return d.Patches(patches, img, batch, g.Channels, g.Height, g.Width, g.Patch) })
	emb := r.alloc(batch * grid * w)
	r.linear(v.Patch, batch*grid, patches, emb)
	e, x := r.alloc(rows*w), r.alloc(rows*w)
	cls, pos := r.upload(values[float32](v.Class)), r.upload(values[float32](v.Pos))
	r.do(func() error { return d.TokenEmbed(e, emb, cls, pos, batch, grid, w) })
	r.layerNorm(x, e, rows, w, v.LNPre, nil, nil)
	for _, op := range blocks {
		r.blockForward(op, x)
	}
	c := r.alloc(batch * w)
	r.do(func() error { return d.StrideRows(c, x, batch, w, t) })
	cn := r.alloc(batch * w)
	r.layerNorm(cn, c, batch, w, v.LNPost, nil, nil)
	f := r.alloc(batch * embed)
	proj := r.upload(values[float32](v.Proj))
	r.do(func() error { return d.Gemm(false, false, batch, embed, w, 1, cn, w, proj, embed, 0, f, embed) })
	y := make([]float32, batch*embed)
	r.do(func() error { return d.Download(y, f) })
	return newMatrix(y, batch, embed), true
}
