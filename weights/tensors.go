package weights

import "strconv"

// The OpenAI tensor names of a CLIP are written here and nowhere else: the
// model builders read a tower's tensors by the names TensorNames gives, the
// towers record them with the matrices (their named parameters), and
// Names, Shape, InferConfig and the Hugging Face map derive from them.

// LayerNormNames are the names of a LayerNorm's gain (γ) and shift (β).
type LayerNormNames struct{ Weight, Bias string }

// LinearNames are the names of a linear layer's weight and bias.
type LinearNames struct{ Weight, Bias string }

// BlockNames are the names of the tensors of one pre-LN residual block.
type BlockNames struct {
	QKV  LinearNames // attn.in_proj_weight [3·width, width] (rows q; k; v), attn.in_proj_bias
	Out  LinearNames // attn.out_proj
	LN1  LayerNormNames
	FC   LinearNames // mlp.c_fc [mlp, width]
	Proj LinearNames // mlp.c_proj [width, mlp]
	LN2  LayerNormNames
}

// VisionNames are the names of the vision tower's tensors.
type VisionNames struct {
	Class  string // class token [width]
	Pos    string // positional embedding [grid²+1, width]
	Proj   string // projection into the joint space [width, embed]
	Conv   string // patch convolution [width, 3, patch, patch], no bias
	LNPre  LayerNormNames
	Blocks []BlockNames
	LNPost LayerNormNames
}

// TextNames are the names of the text tower's tensors.
type TextNames struct {
	Pos     string // positional embedding [context, width]
	Proj    string // projection into the joint space [width, embed]
	Blocks  []BlockNames
	Token   string // token embedding [vocab, width]
	LNFinal LayerNormNames
}

// CLIPNames are the names of every tensor of a CLIP of some configuration.
type CLIPNames struct {
	Vision     VisionNames
	Text       TextNames
	LogitScale string // "" when the configuration has no learned temperature
}

// The layer prefixes of the two towers: block N's tensors are named
// prefix + "N." + the name within the block.
const (
	visionBlocks = "visual.transformer.resblocks."
	textBlocks   = "transformer.resblocks."
)

// logitScale names the learned temperature.
const logitScale = "logit_scale"

// blockNames returns the names of the block whose tensors start with prefix.
func blockNames(prefix string) BlockNames {
	lin := func(n string) LinearNames { return LinearNames{prefix + n + ".weight", prefix + n + ".bias"} }
	ln := func(n string) LayerNormNames { return LayerNormNames{prefix + n + ".weight", prefix + n + ".bias"} }
	return BlockNames{
		QKV: LinearNames{prefix + "attn.in_proj_weight", prefix + "attn.in_proj_bias"},
		Out: lin("attn.out_proj"), LN1: ln("ln_1"), FC: lin("mlp.c_fc"), Proj: lin("mlp.c_proj"), LN2: ln("ln_2"),
	}
}

// blocks returns the names of layers blocks under prefix.
func blocks(prefix string, layers int) []BlockNames {
	out := make([]BlockNames, layers)
	for i := range out {
		out[i] = blockNames(prefix + strconv.Itoa(i) + ".")
	}
	return out
}

// TensorNames returns the OpenAI names of the tensors of a model of this
// configuration, tower by tower.
func (c *CLIPConfig) TensorNames() CLIPNames {
	n := CLIPNames{
		Vision: VisionNames{Class: "visual.class_embedding", Pos: "visual.positional_embedding", Proj: "visual.proj",
			Conv: "visual.conv1.weight", LNPre: LayerNormNames{"visual.ln_pre.weight", "visual.ln_pre.bias"},
			Blocks: blocks(visionBlocks, c.Vision.Layers), LNPost: LayerNormNames{"visual.ln_post.weight", "visual.ln_post.bias"}},
		Text: TextNames{Pos: "positional_embedding", Proj: "text_projection", Blocks: blocks(textBlocks, c.Text.Layers),
			Token: "token_embedding.weight", LNFinal: LayerNormNames{"ln_final.weight", "ln_final.bias"}},
	}
	if c.HasLogitScale {
		n.LogitScale = logitScale
	}
	return n
}

// tensor is one tensor of a model: its name and shape.
type tensor struct {
	name  string
	shape []int
}

// tensors lists the tensors of a model of this configuration with their
// shapes, in OpenAI's state-dict order.
func (c *CLIPConfig) tensors() []tensor {
	n, v, t := c.TensorNames(), c.Vision, c.Text
	var out []tensor
	add := func(name string, shape ...int) { out = append(out, tensor{name, append([]int{}, shape...)}) }
	norm := func(ln LayerNormNames, w int) { add(ln.Weight, w); add(ln.Bias, w) }
	block := func(b BlockNames, w, mlp int) {
		add(b.QKV.Weight, 3*w, w)
		add(b.QKV.Bias, 3*w)
		add(b.Out.Weight, w, w)
		add(b.Out.Bias, w)
		norm(b.LN1, w)
		add(b.FC.Weight, mlp, w)
		add(b.FC.Bias, mlp)
		add(b.Proj.Weight, w, mlp)
		add(b.Proj.Bias, w)
		norm(b.LN2, w)
	}
	add(n.Text.Pos, t.ContextLength, t.Width)
	add(n.Text.Proj, t.Width, c.EmbedDim)
	if n.LogitScale != "" {
		add(n.LogitScale)
	}
	add(n.Vision.Class, v.Width)
	add(n.Vision.Pos, v.Grid()*v.Grid()+1, v.Width)
	add(n.Vision.Proj, v.Width, c.EmbedDim)
	add(n.Vision.Conv, v.Width, 3, v.PatchSize, v.PatchSize)
	norm(n.Vision.LNPre, v.Width)
	for _, b := range n.Vision.Blocks {
		block(b, v.Width, v.MLPWidth)
	}
	norm(n.Vision.LNPost, v.Width)
	for _, b := range n.Text.Blocks {
		block(b, t.Width, t.MLPWidth)
	}
	add(n.Text.Token, t.VocabSize, t.Width)
	norm(n.Text.LNFinal, t.Width)
	return out
}

// Names lists the OpenAI tensor names a model of this configuration has, in
// OpenAI's order.
func (c *CLIPConfig) Names() []string {
	var names []string
	for _, t := range c.tensors() {
		names = append(names, t.name)
	}
	return names
}

// Shape returns the shape an OpenAI-named tensor has in a model of this
// configuration, or false for a name the model does not have.
func (c *CLIPConfig) Shape(name string) ([]int, bool) {
	for _, t := range c.tensors() {
		if t.name == name {
			return t.shape, true
		}
	}
	return nil, false
}
