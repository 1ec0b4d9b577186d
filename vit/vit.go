package vit

import (
	"fmt"

	"github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/weights"
)

// Block is one pre-LN residual attention block.
type Block struct {
	LN1    *autograd.LayerNormParams
	QKV    *autograd.LinearParams // attn.in_proj: [3·width, width], rows q, k, v
	Out    *autograd.LinearParams // attn.out_proj
	LN2    *autograd.LayerNormParams
	FC     *autograd.LinearParams // mlp.c_fc: [mlp, width]
	Proj   *autograd.LinearParams // mlp.c_proj: [width, mlp]
	Heads  int
	Causal bool
	GELU   bool // exact GELU instead of QuickGELU
}

// Trace receives named intermediate results during a forward pass (for
// tests and inspection); it may be nil.
type Trace func(name string, t mat.Tensor)

// Forward applies the block to x [batch·tokens, width]:
// x + attn(ln_1(x)), then + mlp(ln_2(·)).
func (b *Block) Forward(x mat.Tensor, batch int, prefix string, trace Trace) mat.Tensor {
	h := autograd.LayerNorm(x, b.LN1)
	trace.Emit(prefix+"ln_1", h)
	qkv := autograd.Linear(h, b.QKV)
	a := autograd.Linear(autograd.SelfAttention(qkv, batch, b.Heads, b.Causal), b.Out)
	trace.Emit(prefix+"attn", a)
	x = autograd.Add(x, a)
	trace.Emit(prefix+"after_attn", x)
	h = autograd.LayerNorm(x, b.LN2)
	trace.Emit(prefix+"ln_2", h)
	h = autograd.Linear(h, b.FC)
	if b.GELU {
		h = autograd.GELU(h)
	} else {
		h = autograd.QuickGELU(h)
	}
	trace.Emit(prefix+"mlp_hidden", h)
	h = autograd.Linear(h, b.Proj)
	trace.Emit(prefix+"mlp_out", h)
	x = autograd.Add(x, h)
	trace.Emit(prefix+"out", x)
	return x
}

// Emit passes a named intermediate to the trace; a nil Trace ignores it.
func (trace Trace) Emit(name string, t mat.Tensor) {
	if trace != nil {
		trace(name, t)
	}
}

// Model is the CLIP vision tower.
type Model struct {
	Config   weights.VisionConfig
	EmbedDim int
	Patch    *autograd.LinearParams // conv1 as [width, 3·patch·patch], no bias
	Class    mat.Matrix             // class_embedding, width values
	Pos      mat.Matrix             // positional_embedding [grid²+1, width]
	LNPre    *autograd.LayerNormParams
	Blocks   []*Block
	LNPost   *autograd.LayerNormParams
	Proj     mat.Matrix // proj [width, embed]
}

// Forward encodes images [batch, 3·H·W] (NCHW, preprocessed, one image per
// row) into unnormalised features [batch, embed]: encode_image of CLIP.
func (m *Model) Forward(images mat.Tensor, trace Trace) mat.Tensor {
	c := m.Config
	batch := images.Value().Shape()[0]
	g := autograd.PatchGeometry{Channels: 3, Height: c.ImageSize, Width: c.ImageSize, Patch: c.PatchSize}

	x := autograd.PatchEmbed(images, m.Patch, g) // [batch·grid², width]
	trace.Emit("patches", x)
	x = autograd.TokenEmbedding(x, m.Class, m.Pos, batch) // [batch·tokens, width]
	trace.Emit("embed", x)
	x = autograd.LayerNorm(x, m.LNPre)
	trace.Emit("ln_pre", x)
	for i, b := range m.Blocks {
		x = b.Forward(x, batch, fmt.Sprintf("block%d.", i), trace)
	}
	// The class token of every image, then ln_post and the projection.
	tokens := x.Value().Shape()[0] / batch
	cls := make([]int, batch)
	for i := range cls {
		cls[i] = i * tokens
	}
	x = autograd.LayerNorm(autograd.GatherRows(x, cls), m.LNPost)
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
// LayerNorms(), gamma then beta for each: visual.ln_pre.weight, ….bias, ….
func (m *Model) LayerNormNames() []string {
	names := []string{"visual.ln_pre.weight", "visual.ln_pre.bias"}
	for i := range m.Blocks {
		for _, ln := range []string{"ln_1", "ln_2"} {
			p := fmt.Sprintf("visual.transformer.resblocks.%d.%s.", i, ln)
			names = append(names, p+"weight", p+"bias")
		}
	}
	return append(names, "visual.ln_post.weight", "visual.ln_post.bias")
}

// SetTrainable marks every LayerNorm trainable (or frozen).
func (m *Model) SetTrainable(trainable bool) {
	for _, ln := range m.LayerNorms() {
		ln.SetTrainable(trainable)
	}
}
