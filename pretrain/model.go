package pretrain

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// initialLogitScale is log(1/0.07), the temperature CLIP starts training with.
var initialLogitScale = math.Log(1 / 0.07)

// maxLogitScale caps the learned temperature at 100, as CLIP clamps it.
var maxLogitScale = math.Log(100)

// RandomState returns a CLIP state in OpenAI names with the initialisation
// of OpenAI's CLIP.initialize_parameters, applied to both towers:
// in_proj N(0, width^-½), out_proj and c_proj N(0, width^-½·(2·layers)^-½),
// c_fc N(0, (2·width)^-½), biases 0, LayerNorms γ=1 β=0; token embedding
// N(0, 0.02), text positions N(0, 0.01); the class token, image positions and
// both projections N(0, width^-½); the patch convolution N(0, (3·p²)^-½/√3)
// (PyTorch's default fan-in scale); logit_scale log(1/0.07).
func RandomState(cfg *weights.CLIPConfig, seed uint64) (*weights.State, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, 0xc11b))
	s := weights.NewState("random")
	for _, name := range cfg.Names() {
		shape, _ := cfg.Shape(name)
		n := 1
		for _, d := range shape {
			n *= d
		}
		p := &weights.Param{Name: name, Shape: shape, DType: weights.F32, Data: make([]float32, n)}
		std, fill := initStd(cfg, name)
		for i := range p.Data {
			p.Data[i] = float32(fill + std*r.NormFloat64())
		}
		s.Set(p)
	}
	return s, nil
}

// initStd returns the standard deviation and centre of a tensor's initial
// values.
func initStd(cfg *weights.CLIPConfig, name string) (std, centre float64) {
	width, layers := cfg.Text.Width, cfg.Text.Layers
	if strings.HasPrefix(name, "visual.") {
		width, layers = cfg.Vision.Width, cfg.Vision.Layers
	}
	w := float64(width)
	attnStd := 1 / math.Sqrt(w)
	projStd := attnStd / math.Sqrt(2*float64(max(layers, 1)))
	switch {
	case name == "logit_scale":
		return 0, initialLogitScale
	case strings.HasSuffix(name, "ln_1.weight"), strings.HasSuffix(name, "ln_2.weight"),
		strings.HasSuffix(name, "ln_pre.weight"), strings.HasSuffix(name, "ln_post.weight"),
		name == "ln_final.weight":
		return 0, 1
	case strings.HasSuffix(name, ".bias"), strings.HasSuffix(name, "_bias"):
		return 0, 0
	case strings.HasSuffix(name, "attn.in_proj_weight"):
		return attnStd, 0
	case strings.HasSuffix(name, "attn.out_proj.weight"), strings.HasSuffix(name, "mlp.c_proj.weight"):
		return projStd, 0
	case strings.HasSuffix(name, "mlp.c_fc.weight"):
		return 1 / math.Sqrt(2*w), 0
	case name == "token_embedding.weight":
		return 0.02, 0
	case name == "positional_embedding":
		return 0.01, 0
	case name == "visual.conv1.weight":
		p := float64(cfg.Vision.PatchSize)
		return 1 / math.Sqrt(3*3*p*p), 0
	}
	// visual.class_embedding, visual.positional_embedding, visual.proj,
	// text_projection.
	return attnStd, 0
}

// checkConfig rejects configurations the trainer cannot use.
func checkConfig(cfg *weights.CLIPConfig) error {
	switch {
	case cfg == nil:
		return fmt.Errorf("pretrain: no model configuration")
	case !cfg.HasLogitScale:
		return fmt.Errorf("pretrain: the model needs a learned logit_scale")
	case cfg.Text.VocabSize != textenc.ByteVocabSize:
		return fmt.Errorf("pretrain: text vocabulary %d: the trainer uses the byte-level tokenizer (%d ids)", cfg.Text.VocabSize, textenc.ByteVocabSize)
	}
	return nil
}

// NamedParam is one tensor of a model being trained: its OpenAI name and
// shape, the matrix the towers compute with, and whether weight decay
// applies (linear and projection weights; not gains, biases, embeddings or
// the temperature).
type NamedParam struct {
	Name  string
	Shape []int
	Value smat.Matrix
	Decay bool
}

// Params lists every tensor of m in the order of CLIPConfig.Names, with
// logitScale (a 1×1 matrix) as logit_scale. The matrices are m's own: an
// optimizer that writes into them changes the model.
func Params(m *clip.Model, logitScale smat.Matrix) ([]NamedParam, error) {
	byName := map[string]smat.Matrix{"logit_scale": logitScale}
	blocks := func(prefix string, bs []*autograd.BlockParams) {
		for i, b := range bs {
			p := prefix + strconv.Itoa(i) + "."
			byName[p+"attn.in_proj_weight"] = b.QKV.Weight
			byName[p+"attn.in_proj_bias"] = b.QKV.Bias
			byName[p+"attn.out_proj.weight"] = b.Out.Weight
			byName[p+"attn.out_proj.bias"] = b.Out.Bias
			byName[p+"ln_1.weight"] = b.LN1.Gamma
			byName[p+"ln_1.bias"] = b.LN1.Beta
			byName[p+"mlp.c_fc.weight"] = b.FC.Weight
			byName[p+"mlp.c_fc.bias"] = b.FC.Bias
			byName[p+"mlp.c_proj.weight"] = b.Proj.Weight
			byName[p+"mlp.c_proj.bias"] = b.Proj.Bias
			byName[p+"ln_2.weight"] = b.LN2.Gamma
			byName[p+"ln_2.bias"] = b.LN2.Beta
		}
	}
	v, t := m.Vision, m.Text
	byName["visual.conv1.weight"] = v.Patch.Weight
	byName["visual.class_embedding"] = v.Class
	byName["visual.positional_embedding"] = v.Pos
	byName["visual.ln_pre.weight"], byName["visual.ln_pre.bias"] = v.LNPre.Gamma, v.LNPre.Beta
	blocks("visual.transformer.resblocks.", v.Blocks)
	byName["visual.ln_post.weight"], byName["visual.ln_post.bias"] = v.LNPost.Gamma, v.LNPost.Beta
	byName["visual.proj"] = v.Proj
	byName["token_embedding.weight"] = t.Token
	byName["positional_embedding"] = t.Pos
	blocks("transformer.resblocks.", t.Blocks)
	byName["ln_final.weight"], byName["ln_final.bias"] = t.LNFinal.Gamma, t.LNFinal.Beta
	byName["text_projection"] = t.Proj

	var out []NamedParam
	for _, name := range m.Config.Names() {
		x, ok := byName[name]
		if !ok || x == nil {
			return nil, fmt.Errorf("pretrain: the model has no tensor %q", name)
		}
		shape, _ := m.Config.Shape(name)
		n := 1
		for _, d := range shape {
			n *= d
		}
		if x.Size() != n {
			return nil, fmt.Errorf("pretrain: tensor %q has %d values, want %v", name, x.Size(), shape)
		}
		// Linear weights, the patch projection and both projections decay;
		// LayerNorms, biases, embeddings and the temperature do not.
		decay := strings.HasSuffix(name, "weight") && !strings.Contains(name, "ln_") && name != "token_embedding.weight" ||
			name == "visual.proj" || name == "text_projection"
		out = append(out, NamedParam{Name: name, Shape: shape, Value: x, Decay: decay})
	}
	return out, nil
}

// State copies the current values of params into a new state (float32).
func State(params []NamedParam) *weights.State {
	s := weights.NewState("pretrain")
	for _, p := range params {
		data := make([]float32, p.Value.Size())
		copy(data, p.Value.Data().F32())
		s.Set(&weights.Param{Name: p.Name, Shape: p.Shape, DType: weights.F32, Data: data})
	}
	return s
}
