package textenc

import (
	"fmt"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/build"
	"github.com/subtta/subtta/weights"
)

// Model is the CLIP text tower: token and positional embeddings, causal
// pre-LN residual blocks, ln_final, pooling at the end-of-text token and a
// projection into the joint image-text space.
type Model struct {
	Config   weights.TextConfig
	EmbedDim int
	Token    smat.Matrix // token_embedding [vocab, width]
	Pos      smat.Matrix // positional_embedding [context, width]
	Blocks   []*autograd.BlockParams
	LNFinal  *autograd.LayerNormParams
	Proj     smat.Matrix // text_projection [width, embed]
	// Params are the tower's tensors under their checkpoint names, in the
	// order New read them: its named parameters. A copy of the Model that
	// replaces one of the matrices above must replace it here too.
	Params []autograd.Named

	lowBlocks []*autograd.BlockParams // SetPrecision's copies, or nil
}

// Options adjust how the tower is built.
type Options struct {
	// Float64 builds the weights as float64 (slow; for reference runs).
	Float64 bool
}

// New builds the text tower from a state in OpenAI names (see
// weights.LoadCLIP) and its configuration.
func New(s *weights.State, cfg *weights.CLIPConfig, opt Options) (*Model, error) {
	c, n := cfg.Text, cfg.TensorNames().Text
	b := &build.Builder{State: s, F64: opt.Float64, Eps: cfg.LayerNormEps}
	m := &Model{Config: c, EmbedDim: cfg.EmbedDim}
	m.Token = b.Matrix(n.Token, c.VocabSize, c.Width)
	m.Pos = b.Matrix(n.Pos, c.ContextLength, c.Width)
	for _, names := range n.Blocks {
		m.Blocks = append(m.Blocks, b.Block(names, c.Width, c.MLPWidth, c.Heads, true, cfg.Activation))
	}
	m.LNFinal = b.LayerNorm(n.LNFinal, c.Width)
	m.Proj = b.Weight(n.Proj, c.Width, cfg.EmbedDim)
	if b.Err != nil {
		return nil, fmt.Errorf("textenc: %w", b.Err)
	}
	m.Params = b.Params
	// On a device (autograd.SetDevice) the blocks' frozen weights are
	// uploaded once and kept there; on the CPU this costs nothing.
	for _, blk := range m.Blocks {
		for _, l := range []*autograd.LinearParams{blk.QKV, blk.Out, blk.FC, blk.Proj} {
			l.KeepOnDevice(true)
		}
	}
	return m, nil
}

// SetPrecision runs the tower's linear layers (every block's four) in prec
// in the passes that record no gradient at all, on copies of the blocks
// that share every tensor (see vit.Model.SetPrecision); the errors name the
// tensor. Attention's products, LayerNorm, the activation, the embeddings
// and the final projection stay float32. kernel.FP32 drops the copies.
func (m *Model) SetPrecision(prec kernel.Precision) error {
	if prec == kernel.FP32 {
		m.lowBlocks = nil
		return nil
	}
	blocks, err := autograd.LowPrecisionBlocks(m.Blocks, m.Params, prec)
	if err != nil {
		return fmt.Errorf("textenc: %w", err)
	}
	m.lowBlocks = blocks
	return nil
}

// Precision reports whether SetPrecision set a reduced precision: the
// blocks' precision (kernel.FP32 by default).
func (m *Model) Precision() kernel.Precision {
	if len(m.lowBlocks) == 0 {
		return kernel.FP32
	}
	return m.lowBlocks[0].QKV.Precision()
}

// Forward encodes a batch of token sequences (each as Tokenize returns it:
// start token, ids, end token, then the tokenizer's padding) into
// unnormalised features [batch, embed]: encode_text of CLIP.
//
// The features are pooled at each sequence's highest id, which is its first
// end-of-text token (as OpenAI's code, and Hugging Face's with the legacy
// eos_token_id 2). Because the mask is causal, the rows after the longest
// sequence's end token cannot change the result, so Forward only computes
// the first L positions, where L is that end token's position plus one.
// On a device (autograd.SetDevice) a pass without a trace runs whole there
// (autograd.TextTowerOnDevice): the ids go up and the features come back.
func (m *Model) Forward(tokens [][]int, trace autograd.Trace) (smat.Tensor, error) {
	return m.forward(tokens, nil, trace)
}

// ForwardContext is Forward with learnable context vectors: the token
// embeddings at positions 1…n of every sequence (after the start token)
// are replaced by the n rows of ctx [n, width], as TPT's prompt learner
// builds [SOS] ctx₁…ctxₙ ⟨class tokens⟩ [EOS]. The gradient of the
// features reaches ctx when it requires one (autograd.ReplaceRows).
func (m *Model) ForwardContext(tokens [][]int, ctx smat.Tensor) (smat.Tensor, error) {
	if ctx == nil {
		return nil, fmt.Errorf("textenc: ForwardContext: no context")
	}
	return m.forward(tokens, ctx, nil)
}

func (m *Model) forward(tokens [][]int, context smat.Tensor, trace autograd.Trace) (smat.Tensor, error) {
	batch := len(tokens)
	if batch == 0 {
		return nil, fmt.Errorf("textenc: Forward: no sequences")
	}
	ctx, vocab := m.Config.ContextLength, m.Config.VocabSize
	eot := make([]int, batch) // position of the pooled token in each sequence
	L := 0
	for i, seq := range tokens {
		if len(seq) == 0 || len(seq) > ctx {
			return nil, fmt.Errorf("textenc: Forward: sequence %d has %d tokens, want 1…%d", i, len(seq), ctx)
		}
		for j, id := range seq {
			if id < 0 || id >= vocab {
				return nil, fmt.Errorf("textenc: Forward: sequence %d: token id %d outside the vocabulary (%d)", i, id, vocab)
			}
			if id > seq[eot[i]] {
				eot[i] = j
			}
		}
		L = max(L, eot[i]+1)
	}
	// Embed the first L tokens of every sequence (padding past a short one).
	ids := make([]int, 0, batch*L)
	for _, seq := range tokens {
		for j := 0; j < L; j++ {
			id := 0
			if j < len(seq) {
				id = seq[j]
			}
			ids = append(ids, id)
		}
	}
	var rows, src []int // the context's rows in the embeddings, and which
	if context != nil {
		n, w := context.Value().Shape()[0], context.Value().Shape()[1]
		if w != m.Config.Width {
			return nil, fmt.Errorf("textenc: ForwardContext: context of width %d, the tower's is %d", w, m.Config.Width)
		}
		for i := range tokens {
			if 1+n >= eot[i] {
				return nil, fmt.Errorf("textenc: ForwardContext: sequence %d ends at position %d, before the %d context vectors and a class token", i, eot[i], n)
			}
			for k := range n {
				rows, src = append(rows, i*L+1+k), append(src, k)
			}
		}
	}
	if trace == nil {
		// On a device (SetDevice), a pass without gradients runs whole
		// there: the ids go up and the features come back.
		if y, ok := m.onDevice(ids, batch, eot, context, rows, src); ok {
			return y, nil
		}
	}
	emb := autograd.GatherRows(m.Token, ids)
	if context != nil {
		emb = autograd.ReplaceRows(emb, rows, context, src)
	}
	x := autograd.AddTiled(emb, autograd.GatherRows(m.Pos, seqRange(L)))
	trace.Emit("embed", x)
	if trace == nil {
		blocks := m.Blocks
		if m.lowBlocks != nil && autograd.Frozen(m.Params, context) {
			blocks = m.lowBlocks
		}
		// One op on a device (SetDevice): the activations stay there.
		x = autograd.TransformerBlocks(x, blocks, batch)
	} else {
		for i, b := range m.Blocks {
			x = b.Forward(x, batch, fmt.Sprintf("block%d.", i), trace)
		}
	}
	x = autograd.LayerNorm(x, m.LNFinal)
	trace.Emit("ln_final", x)
	pool := make([]int, batch)
	for i := range pool {
		pool[i] = i*L + eot[i]
	}
	x = autograd.GatherRows(x, pool)
	trace.Emit("pooled", x)
	x = autograd.MatMul(x, m.Proj, false, false)
	trace.Emit("final", x)
	return x, nil
}

// onDevice runs the tower as one op on the device set by
// autograd.SetDevice (autograd.TextTowerOnDevice), reporting false when it
// does not run there (no device, or a pass that records gradients). The
// context's rows in the embeddings become negative ids.
func (m *Model) onDevice(ids []int, batch int, eot []int, context smat.Tensor, rows, src []int) (smat.Tensor, bool) {
	if autograd.CurrentDevice() == nil {
		return nil, false
	}
	if context != nil {
		ids = append([]int(nil), ids...)
		for i, r := range rows {
			ids[r] = -1 - src[i]
		}
	}
	t := &autograd.TextTower{Token: m.Token, Pos: m.Pos, Blocks: m.Blocks, LNFinal: m.LNFinal, Proj: m.Proj}
	return autograd.TextTowerOnDevice(autograd.TextInput{IDs: ids, Batch: batch, Context: context, Pool: eot}, t)
}

func seqRange(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}
