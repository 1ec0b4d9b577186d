package vit

import (
	"fmt"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/weights"
)

// Trace receives named intermediate results during a forward pass (for
// tests and inspection); it may be nil.
type Trace = autograd.Trace

// Model is the CLIP vision tower.
type Model struct {
	Config   weights.VisionConfig
	EmbedDim int
	Patch    *autograd.LinearParams // conv1 as [width, 3·patch·patch], no bias
	Class    smat.Matrix            // class_embedding, width values
	Pos      smat.Matrix            // positional_embedding [grid²+1, width]
	LNPre    *autograd.LayerNormParams
	Blocks   []*autograd.BlockParams
	LNPost   *autograd.LayerNormParams
	Proj     smat.Matrix // proj [width, embed]
	// Params are the tower's tensors under their checkpoint names, in the
	// order New read them: its named parameters. A copy of the Model that
	// replaces one of the matrices above must replace it here too.
	Params []autograd.Named

	low *lowTower // nil unless SetPrecision chose int8 or bf16

	// graphs keeps the recordings of the tower's passes without gradients
	// on a device that records them (autograd.TowerGraphs); New makes it.
	// A copy of the Model shares it: a recording is of given tensors, so
	// the copy's own LayerNorms make passes of their own.
	graphs *autograd.TowerGraphs
}

// Graphs returns what the recordings of the model's passes on a device did
// (autograd.TowerGraphs): zero for a Model not made by New.
func (m *Model) Graphs() autograd.GraphStats {
	if m.graphs == nil {
		return autograd.GraphStats{}
	}
	return m.graphs.Stats()
}

// Forward encodes images [batch, 3·H·W] (NCHW, preprocessed, one image per
// row) into unnormalised features [batch, embed]: encode_image of CLIP.
// Without a trace the last block runs past its keys and values for the
// class tokens only (autograd.TransformerBlockRows), the rows the features
// are made of, unless a device is set: then a pass without gradients runs
// whole there (autograd.VisionTowerOnDevice), and in one that records them
// the blocks are one op (autograd.TransformerBlocks); with a trace, every
// stage is computed in full.
func (m *Model) Forward(images smat.Tensor, trace Trace) smat.Tensor {
	c := m.Config
	batch := images.Value().Shape()[0]
	g := autograd.PatchGeometry{Channels: 3, Height: c.ImageSize, Width: c.ImageSize, Patch: c.PatchSize}

	if trace == nil {
		// On a device (SetDevice), a pass without gradients runs whole
		// there: the images go up and the features come back.
		tower := &autograd.VisionTower{Geometry: g, Patch: m.Patch, Class: m.Class, Pos: m.Pos, LNPre: m.LNPre,
			Blocks: m.Blocks, LNPost: m.LNPost, Proj: m.Proj, Graphs: m.graphs}
		if y, ok := autograd.VisionTowerOnDevice(images, tower); ok {
			return y
		}
	}
	patch, blocks := m.Patch, m.Blocks
	if m.low != nil && autograd.Frozen(m.Params, images) {
		patch, blocks = m.low.patch, m.low.blocks
	}
	x := autograd.PatchEmbed(images, patch, g) // [batch·grid², width]
	trace.Emit("patches", x)
	x = autograd.TokenEmbedding(x, m.Class, m.Pos, batch) // [batch·tokens, width]
	trace.Emit("embed", x)
	x = autograd.LayerNorm(x, m.LNPre)
	trace.Emit("ln_pre", x)
	// The class token of every image goes on to ln_post and the projection.
	tokens := x.Value().Shape()[0] / batch
	cls := make([]int, batch)
	for i := range cls {
		cls[i] = i * tokens
	}
	last := len(blocks) - 1
	switch {
	case trace == nil && last >= 0 && autograd.CurrentDevice() != nil:
		// On a device (SetDevice) every block is one op and the
		// activations stay there: computing the last block for every token
		// costs less than moving its input and q|k|v between host and
		// device.
		x = autograd.TransformerBlocks(x, blocks, batch)
		x = autograd.GatherRows(x, cls)
	case trace == nil && last >= 0:
		// Only the class tokens of the last block are used: compute the
		// keys and values of all tokens, the rest for those rows.
		x = autograd.TransformerBlocks(x, blocks[:last], batch)
		x = autograd.TransformerBlockRows(x, blocks[last], batch, cls)
	default:
		for i, b := range blocks {
			x = b.Forward(x, batch, fmt.Sprintf("block%d.", i), trace)
		}
		x = autograd.GatherRows(x, cls)
	}
	x = autograd.LayerNorm(x, m.LNPost)
	trace.Emit("ln_post", x)
	x = autograd.MatMul(x, m.Proj, false, false)
	trace.Emit("final", x)
	return x
}

// LayerNorms lists every LayerNorm of the tower in order: ln_pre, each
// block's ln_1 and ln_2, ln_post. These are the parameters TTA adapts.
func (m *Model) LayerNorms() []*autograd.LayerNormParams {
	ln := []*autograd.LayerNormParams{m.LNPre}
	for _, b := range m.Blocks {
		ln = append(ln, b.LN1, b.LN2)
	}
	return append(ln, m.LNPost)
}

// LayerNormNames returns the OpenAI state-dict names of the tensors of
// LayerNorms(), gamma then beta for each: visual.ln_pre.weight, ….bias, …,
// as Params records them (New reads the LayerNorms in that order).
func (m *Model) LayerNormNames() []string {
	var names []string
	for _, p := range m.Params {
		if p.LayerNorm {
			names = append(names, p.Name)
		}
	}
	return names
}

// KeepPacked makes every linear layer of the tower keep its frozen weight
// packed for the GEMM kernel rather than pack it on every call (see
// autograd.LinearParams.KeepPacked): 2% of a ViT-B/32 pass at batch 64, for
// up to twice the weights' size in memory (350 MB per copy for ViT-B/32; the
// second copy, in the layout of the input gradients, is made by the first
// backward pass). New and Random turn it on; KeepPacked(false) frees the
// copies. After writing into a frozen weight, call KeepPacked(true) again.
func (m *Model) KeepPacked(keep bool) {
	m.Patch.KeepPacked(keep)
	for _, b := range m.Blocks {
		for _, l := range []*autograd.LinearParams{b.QKV, b.Out, b.FC, b.Proj} {
			l.KeepPacked(keep)
		}
	}
}

// SetPrecision runs the tower's linear layers (the patch projection and
// every block's four) in prec in the passes that record no gradient at all
// (no tensor of the tower and not the images requires one); see
// autograd.LinearParams.SetPrecision, whose errors it returns naming the
// tensor. The tower keeps copies of its blocks for those passes, sharing
// every tensor: a pass that records gradients (adaptation, training) runs
// in float32 throughout, and so does every pass while a device is set.
// Attention's products (the scores q·kᵀ and their weighted sum of the
// values), LayerNorm, the activation and the final projection stay
// float32. kernel.FP32 drops the copies. After writing into a weight, call
// it again.
func (m *Model) SetPrecision(prec kernel.Precision) error {
	if prec == kernel.FP32 {
		m.low = nil
		return nil
	}
	patch, err := m.Patch.LowPrecisionCopy(prec, paramName(m.Params, m.Patch.Weight))
	if err != nil {
		return fmt.Errorf("vit: %w", err)
	}
	blocks, err := autograd.LowPrecisionBlocks(m.Blocks, m.Params, prec)
	if err != nil {
		return fmt.Errorf("vit: %w", err)
	}
	m.low = &lowTower{prec: prec, patch: patch, blocks: blocks}
	return nil
}

// Precision is the precision SetPrecision set (kernel.FP32 by default).
func (m *Model) Precision() kernel.Precision {
	if m.low == nil {
		return kernel.FP32
	}
	return m.low.prec
}

// lowTower is the tower's patch projection and blocks in reduced precision.
type lowTower struct {
	prec   kernel.Precision
	patch  *autograd.LinearParams
	blocks []*autograd.BlockParams
}

// paramName is the name params record for the matrix x.
func paramName(params []autograd.Named, x smat.Matrix) string {
	for _, p := range params {
		if p.Value == x {
			return p.Name
		}
	}
	return "?"
}

// SetTrainable marks every LayerNorm trainable (or frozen).
func (m *Model) SetTrainable(trainable bool) {
	for _, ln := range m.LayerNorms() {
		ln.SetTrainable(trainable)
	}
}
