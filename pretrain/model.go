package pretrain

import (
	"fmt"
	"math"
	"math/rand/v2"

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
	inits := initStds(cfg)
	r := rand.New(rand.NewPCG(seed, 0xc11b))
	s := weights.NewState("random")
	for _, name := range cfg.Names() {
		shape, _ := cfg.Shape(name)
		n := 1
		for _, d := range shape {
			n *= d
		}
		p := &weights.Param{Name: name, Shape: shape, DType: weights.F32, Data: make([]float32, n)}
		init, ok := inits[name]
		if !ok {
			return nil, fmt.Errorf("pretrain: no initialisation for tensor %q", name)
		}
		for i := range p.Data {
			p.Data[i] = float32(init.centre + init.std*r.NormFloat64())
		}
		s.Set(p)
	}
	return s, nil
}

// initValue is the distribution of a tensor's initial values.
type initValue struct{ std, centre float64 }

// initStds returns the standard deviation and centre of every tensor's
// initial values (see RandomState), by name.
func initStds(cfg *weights.CLIPConfig) map[string]initValue {
	n := cfg.TensorNames()
	out := map[string]initValue{}
	zero, one := initValue{0, 0}, initValue{0, 1}
	norm := func(ln weights.LayerNormNames) { out[ln.Weight], out[ln.Bias] = one, zero }
	// tower sets a tower's blocks and returns width^-½, the scale of its
	// attention and of its other matrices.
	tower := func(width, layers int, blocks []weights.BlockNames) float64 {
		w := float64(width)
		attn := 1 / math.Sqrt(w)
		proj := attn / math.Sqrt(2*float64(max(layers, 1)))
		for _, b := range blocks {
			out[b.QKV.Weight], out[b.QKV.Bias] = initValue{attn, 0}, zero
			out[b.Out.Weight], out[b.Out.Bias] = initValue{proj, 0}, zero
			out[b.FC.Weight], out[b.FC.Bias] = initValue{1 / math.Sqrt(2*w), 0}, zero
			out[b.Proj.Weight], out[b.Proj.Bias] = initValue{proj, 0}, zero
			norm(b.LN1)
			norm(b.LN2)
		}
		return attn
	}
	v, t := n.Vision, n.Text
	attn := tower(cfg.Vision.Width, cfg.Vision.Layers, v.Blocks)
	p := float64(cfg.Vision.PatchSize)
	out[v.Conv] = initValue{1 / math.Sqrt(3*3*p*p), 0}
	out[v.Class], out[v.Pos], out[v.Proj] = initValue{attn, 0}, initValue{attn, 0}, initValue{attn, 0}
	norm(v.LNPre)
	norm(v.LNPost)
	attn = tower(cfg.Text.Width, cfg.Text.Layers, t.Blocks)
	out[t.Proj] = initValue{attn, 0}
	out[t.Token], out[t.Pos] = initValue{0.02, 0}, initValue{0.01, 0}
	norm(t.LNFinal)
	if n.LogitScale != "" {
		out[n.LogitScale] = initValue{0, initialLogitScale}
	}
	return out
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
// logitScale (a 1×1 matrix) as logit_scale: the model's named parameters
// (clip.Model.NamedParams), whose Decay says which weight decay applies to.
// The matrices are m's own: an optimizer that writes into them changes the
// model.
func Params(m *clip.Model, logitScale smat.Matrix) ([]NamedParam, error) {
	byName := map[string]autograd.Named{}
	for _, p := range m.NamedParams() {
		byName[p.Name] = p
	}
	if name := m.Config.TensorNames().LogitScale; name != "" {
		byName[name] = autograd.Named{Name: name, Value: logitScale}
	}
	var out []NamedParam
	for _, name := range m.Config.Names() {
		p, ok := byName[name]
		if !ok || p.Value == nil {
			return nil, fmt.Errorf("pretrain: the model has no tensor %q", name)
		}
		shape, _ := m.Config.Shape(name)
		n := 1
		for _, d := range shape {
			n *= d
		}
		if p.Value.Size() != n {
			return nil, fmt.Errorf("pretrain: tensor %q has %d values, want %v", name, p.Value.Size(), shape)
		}
		out = append(out, NamedParam{Name: name, Shape: shape, Value: p.Value, Decay: p.Decay})
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
