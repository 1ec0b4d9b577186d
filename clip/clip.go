package clip

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	smat "github.com/nlpodyssey/spago/mat"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/vit"
	"github.com/subtta/subtta/weights"
	"github.com/subtta/subtta/zeroshot"
)

// Model is a CLIP model: both towers and the learned logit scale.
type Model struct {
	Config *weights.CLIPConfig
	Vision *vit.Model
	Text   *textenc.Model
	// LogitScale is exp(logit_scale), the temperature of the logits
	// (100 for OpenAI's trained models).
	LogitScale float64
	// Classes and Templates are the class names and prompt templates the
	// model was trained with, when its checkpoint records them (the
	// weights.MetadataClasses and weights.MetadataTemplates of `subtta
	// train`'s export); nil otherwise.
	Classes, Templates []string
}

// Options adjust how a model is loaded.
type Options struct {
	// Float64 builds both towers in float64 (reference runs).
	Float64 bool
	// Config, if not nil, is the architecture, in place of the one stored
	// with the checkpoint or read off its tensor shapes (which takes
	// OpenAI's heads = width/64); it is validated against the tensors.
	Config *weights.CLIPConfig
	// StoredWins makes Config only fill in what the checkpoint does not
	// store: where the checkpoint stores an architecture, a Config other
	// than it is ErrArchDiffers (Create sets this: a user's architecture
	// is for checkpoints without one, and one that contradicts the
	// checkpoint's is more likely a mistake than a fix).
	StoredWins bool
}

// ErrArchDiffers: Options.StoredWins is set and Options.Config is not the
// architecture the checkpoint stores (weights.ErrArchDiffers, the same
// error as weights.LoadCLIPGiven's).
var ErrArchDiffers = weights.ErrArchDiffers

// Load reads a CLIP checkpoint in any supported format and layout (see
// weights.LoadCLIP) and builds both towers.
func Load(path string, opt Options) (*Model, error) {
	s, cfg, err := weights.LoadCLIP(path)
	if err != nil {
		return nil, err
	}
	if opt.Config != nil {
		c := *opt.Config
		c.HasLogitScale = s.Has("logit_scale")
		c.Inferred = false
		if opt.StoredWins && !cfg.Inferred && c != *cfg {
			return nil, fmt.Errorf("%w: %s stores %s; given %s", ErrArchDiffers, path, cfg.Summary(), c.Summary())
		}
		if err := c.Validate(s); err != nil {
			return nil, err
		}
		cfg = &c
	}
	return New(s, cfg, opt)
}

// New builds a model from a state in OpenAI names and its configuration.
// A weight that is NaN or infinite is an error naming its tensor
// (weights.ErrNotFinite).
func New(s *weights.State, cfg *weights.CLIPConfig, opt Options) (*Model, error) {
	// A NaN or infinite weight would make every output NaN.
	if err := s.CheckFinite(cfg.Names()); err != nil {
		return nil, err
	}
	v, err := vit.New(s, cfg, vit.Options{Float64: opt.Float64})
	if err != nil {
		return nil, err
	}
	t, err := textenc.New(s, cfg, textenc.Options{Float64: opt.Float64})
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Vision: v, Text: t, LogitScale: 100}
	for _, f := range []struct {
		key string
		dst *[]string
	}{{weights.MetadataClasses, &m.Classes}, {weights.MetadataTemplates, &m.Templates}} {
		if v, ok := s.Metadata[f.key]; ok {
			if err := json.Unmarshal([]byte(v), f.dst); err != nil {
				return nil, fmt.Errorf("clip: metadata %q: want a JSON list of strings: %w", f.key, err)
			}
		}
	}
	if cfg.HasLogitScale {
		ls, err := s.Scalar("logit_scale")
		if err != nil {
			return nil, fmt.Errorf("clip: %w", err)
		}
		m.LogitScale = math.Exp(float64(ls))
		if math.IsInf(m.LogitScale, 0) {
			// Every logit would be ±Inf and every probability NaN.
			return nil, fmt.Errorf("clip: logit_scale %g: its exponential, the logits' scale, overflows", ls)
		}
	}
	return m, nil
}

// VisionOnly returns a model of the vision tower alone (Text is nil), with
// logit scale 100: enough for image features, test-time adaptation with a
// head made elsewhere, and benchmarks.
func VisionOnly(cfg *weights.CLIPConfig, v *vit.Model) *Model {
	return &Model{Config: cfg, Vision: v, LogitScale: 100}
}

// SetPrecision runs the linear layers of both towers in prec (kernel.Int8,
// kernel.BF16, or kernel.FP32 to restore float32) in passes that record no
// gradient: encoding images and prompts, frozen answers; adaptation's and
// training's passes stay float32 (vit.Model.SetPrecision says what else
// does). The error names the tensor that cannot be converted, wraps
// kernel.ErrPrecisionUnsupported when the CPU has no kernel for prec
// (kernel.Select decides it here, once for both towers), or wraps
// ErrPrecisionOnDevice when a device is set: reduced precision has CPU
// kernels only, and a model does not fall back to fp32 without a word.
func (m *Model) SetPrecision(prec kernel.Precision) error {
	if _, err := kernel.Select(prec); err != nil {
		return err
	}
	if prec != kernel.FP32 && autograd.CurrentDevice() != nil {
		return fmt.Errorf("%w: %v", ErrPrecisionOnDevice, prec)
	}
	if err := m.Vision.SetPrecision(prec); err != nil {
		return err
	}
	if err := m.Text.SetPrecision(prec); err != nil {
		m.Vision.SetPrecision(kernel.FP32)
		return err
	}
	return nil
}

// ErrPrecisionOnDevice: the linear layers are in a reduced precision,
// which runs on the CPU only, and a device is set (autograd.SetDevice).
var ErrPrecisionOnDevice = errors.New("clip: reduced precision runs on the CPU only, and a device is set")

// checkDevice refuses a pass of a model in reduced precision while a
// device is set, where its layers would run in fp32 instead.
func (m *Model) checkDevice() error {
	if autograd.CurrentDevice() == nil {
		return nil
	}
	if p := m.Precision(); p != kernel.FP32 {
		return fmt.Errorf("%w: the linear layers are in %v: set the precision to fp32, or leave out the device", ErrPrecisionOnDevice, p)
	}
	return nil
}

// Precision is the arithmetic of the linear layers in passes without
// gradients (SetPrecision).
func (m *Model) Precision() kernel.Precision {
	if m.Vision != nil {
		if p := m.Vision.Precision(); p != kernel.FP32 {
			return p
		}
	}
	if m.Text != nil {
		return m.Text.Precision()
	}
	return kernel.FP32
}

// ImageFeatures runs the vision tower on images [n, 3·H·W] (Images) and
// returns the unnormalised features [n, embed]. When a LayerNorm requires
// gradients (SetVisionTrainable) the pass is recorded on the tape for
// ag.Backward; otherwise it keeps nothing.
func (m *Model) ImageFeatures(images smat.Tensor) smat.Tensor { return m.Vision.Forward(images, nil) }

// VisionLayerNorms returns the LayerNorms of the vision tower (ln_pre, each
// block's ln_1 and ln_2, ln_post), the parameters test-time adaptation
// trains, and the OpenAI names of their tensors, γ then β of each.
func (m *Model) VisionLayerNorms() ([]*autograd.LayerNormParams, []string) {
	return m.Vision.LayerNorms(), m.Vision.LayerNormNames()
}

// NamedParams lists the tensors of both towers under their checkpoint
// names (the vision tower's, then the text tower's, each in the order it
// read them): the model's named parameters. The temperature is not among
// them (LogitScale is a number).
func (m *Model) NamedParams() []autograd.Named {
	named := append([]autograd.Named(nil), m.Vision.Params...)
	if m.Text != nil {
		named = append(named, m.Text.Params...)
	}
	return named
}

// SetVisionTrainable marks every LayerNorm of the vision tower as requiring
// gradients, or none.
func (m *Model) SetVisionTrainable(on bool) { m.Vision.SetTrainable(on) }

// Float64 reports whether the model computes in float64.
func (m *Model) Float64() bool {
	_, ok := m.Vision.Proj.(*smat.Dense[float64])
	return ok
}

// PromptFeatures encodes tokenized prompts with the context vectors ctx
// [n, text width] in place of the token embeddings at positions 1…n of
// every prompt (textenc.Model.ForwardContext): the unnormalised text
// features [prompts, embed], recorded on the tape so that their gradient
// reaches ctx. The text tower's own weights stay frozen.
func (m *Model) PromptFeatures(tokens [][]int, ctx smat.Tensor) (smat.Tensor, error) {
	if err := m.checkDevice(); err != nil {
		return nil, err
	}
	return m.Text.ForwardContext(tokens, ctx)
}

// TokenEmbeddings returns a copy of the token embeddings of ids
// [len(ids), text width] in the model's precision: the initial value of
// learnable context vectors.
func (m *Model) TokenEmbeddings(ids []int) (smat.Matrix, error) {
	for _, id := range ids {
		if id < 0 || id >= m.Config.Text.VocabSize {
			return nil, fmt.Errorf("clip: TokenEmbeddings: token id %d outside the vocabulary (%d)", id, m.Config.Text.VocabSize)
		}
	}
	if t, ok := m.Text.Token.(*smat.Dense[float64]); ok {
		return smat.NewDense[float64](smat.WithShape(len(ids), t.Shape()[1]), smat.WithBacking(gatherRows(t.Data().F64(), ids, t.Shape()[1]))), nil
	}
	t, ok := m.Text.Token.(*smat.Dense[float32])
	if !ok {
		return nil, fmt.Errorf("clip: TokenEmbeddings: token embedding of type %T", m.Text.Token)
	}
	return smat.NewDense[float32](smat.WithShape(len(ids), t.Shape()[1]), smat.WithBacking(gatherRows(t.Data().F32(), ids, t.Shape()[1]))), nil
}

// gatherRows copies the rows ids of a row-major matrix of width w.
func gatherRows[T float32 | float64](all []T, ids []int, w int) []T {
	out := make([]T, 0, len(ids)*w)
	for _, id := range ids {
		out = append(out, all[id*w:(id+1)*w]...)
	}
	return out
}

// TextContextLength is the text tower's context length (77 for OpenAI's
// models).
func (m *Model) TextContextLength() int { return m.Config.Text.ContextLength }

// EmbedDim returns the width of the joint embedding: the number of image
// and text features.
func (m *Model) EmbedDim() int { return m.Config.EmbedDim }

// InverseTemperature returns LogitScale, exp(logit_scale): CLIP's learned
// 1/τ, which multiplies the cosine similarities to give the logits.
func (m *Model) InverseTemperature() float64 { return m.LogitScale }

// Images wraps preprocessed images (n rows of C·H·W values, NCHW) as the
// vision tower's input matrix, in the model's precision.
func (m *Model) Images(pixels []float32, n int) (smat.Matrix, error) {
	size := 3 * m.Config.Vision.ImageSize * m.Config.Vision.ImageSize
	if n <= 0 || len(pixels) != n*size {
		return nil, fmt.Errorf("clip: %d pixel values for %d images of %d×%d: want %d", len(pixels), n, m.Config.Vision.ImageSize, m.Config.Vision.ImageSize, n*size)
	}
	if err := m.checkDevice(); err != nil {
		return nil, err
	}
	if m.Float64() {
		d := make([]float64, len(pixels))
		for i, v := range pixels {
			d[i] = float64(v)
		}
		return smat.NewDense[float64](smat.WithShape(n, size), smat.WithBacking(d)), nil
	}
	return smat.NewDense[float32](smat.WithShape(n, size), smat.WithBacking(pixels)), nil
}

// EncodeImage returns the unnormalised image features [n, embed] of
// preprocessed images (n rows of C·H·W values).
func (m *Model) EncodeImage(pixels []float32, n int) (smat.Tensor, error) {
	x, err := m.Images(pixels, n)
	if err != nil {
		return nil, err
	}
	return m.Vision.Forward(x, nil), nil
}

// EncodeText returns the unnormalised text features [len(tokens), embed].
func (m *Model) EncodeText(tokens [][]int) (smat.Tensor, error) {
	if err := m.checkDevice(); err != nil {
		return nil, err
	}
	return m.Text.Forward(tokens, nil)
}

// Logits returns logit_scale · normalize(images) · normalize(texts)ᵀ
// [images, texts]: CLIP's logits_per_image.
func (m *Model) Logits(imageFeatures, textFeatures smat.Tensor) smat.Tensor {
	sim := autograd.MatMul(autograd.L2Normalize(imageFeatures), autograd.L2Normalize(textFeatures), false, true)
	return autograd.Scale(sim, m.LogitScale)
}

// ZeroShot is a classifier head: one L2-normalised text embedding per class.
type ZeroShot struct {
	Classes []string
	// Weights is [classes, embed], each row of unit norm.
	Weights smat.Matrix
}

// ZeroShotHead embeds every class name in every template ("a photo of a
// {}." — "{}" is replaced by the class name) and averages per class: each
// prompt embedding is L2-normalised, the mean over templates is normalised
// again (OpenAI's prompt ensembling). One template gives the plain head.
// A prompt longer than the model's text context (Config.Text.ContextLength
// tokens, start and end included) is cut silently, as clip.tokenize with
// truncate=True does: its first tokens are kept, the last becomes the end
// token, and no error is returned.
func (m *Model) ZeroShotHead(tok textenc.Tokenizer, classes, templates []string) (*ZeroShot, error) {
	switch {
	case tok == nil:
		return nil, fmt.Errorf("clip: ZeroShotHead: no tokenizer (Bundle.Tokenizer gives the model's)")
	case len(classes) == 0 || len(templates) == 0:
		return nil, fmt.Errorf("clip: ZeroShotHead: need at least one class and one template")
	}
	ctx := m.Config.Text.ContextLength
	embed := m.Config.EmbedDim
	w := make([]float64, len(classes)*embed)
	for _, tmpl := range templates {
		if !strings.Contains(tmpl, "{}") {
			return nil, fmt.Errorf("clip: ZeroShotHead: template %q has no {} for the class name", tmpl)
		}
		prompts := make([]string, len(classes))
		for i, c := range classes {
			prompts[i] = strings.ReplaceAll(tmpl, "{}", c)
		}
		ids := make([][]int, len(prompts))
		for i, p := range prompts {
			var err error
			if ids[i], err = tok.Tokenize(p, ctx, true); err != nil {
				return nil, fmt.Errorf("clip: ZeroShotHead: %w", err)
			}
		}
		f, err := m.EncodeText(ids)
		if err != nil {
			return nil, err
		}
		feats := f.Value().Data().F64()
		for i := range classes {
			row := feats[i*embed : (i+1)*embed]
			n := norm(row)
			for j, v := range row {
				w[i*embed+j] += v / n
			}
		}
	}
	for i := range classes {
		row := w[i*embed : (i+1)*embed]
		n := norm(row)
		for j := range row {
			row[j] /= n
		}
	}
	var wm smat.Matrix
	if m.Float64() {
		wm = smat.NewDense[float64](smat.WithShape(len(classes), embed), smat.WithBacking(w))
	} else {
		w32 := make([]float32, len(w))
		for i, v := range w {
			w32[i] = float32(v)
		}
		wm = smat.NewDense[float32](smat.WithShape(len(classes), embed), smat.WithBacking(w32))
	}
	return &ZeroShot{Classes: append([]string(nil), classes...), Weights: wm}, nil
}

// ZeroShotWeights returns the class weights of ZeroShotHead alone
// ([classes, embed], unit rows, in the model's precision): what a
// classifier that does not need the class names takes.
func (m *Model) ZeroShotWeights(tok textenc.Tokenizer, classes, templates []string) (smat.Matrix, error) {
	z, err := m.ZeroShotHead(tok, classes, templates)
	if err != nil {
		return nil, err
	}
	return z.Weights, nil
}

func norm(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

// Classify returns the zero-shot logits logit_scale · normalize(features) ·
// Weightsᵀ [images, classes] of image features from EncodeImage: those of
// ZeroShotLogits, in float64 whatever the model's precision, as a float64
// tensor that is not recorded on the tape.
func (m *Model) Classify(head *ZeroShot, imageFeatures smat.Tensor) smat.Tensor {
	l := ZeroShotLogits(denseOf(imageFeatures.Value()), denseOf(head.Weights), m.LogitScale)
	r, c := l.Dims()
	return smat.NewDense[float64](smat.WithShape(r, c), smat.WithBacking(l.RawMatrix().Data))
}

// ZeroShotLogits returns scale · normalize(features) · weightsᵀ [images,
// classes], every row of features (image features, [images, embed])
// divided by max(‖row‖, 1e-12) as torch.nn.functional.normalize does, and
// weights taken as given (a head's unit rows, [classes, embed]). It is the
// one scorer of zero-shot logits: Classify (subtta classify, training's
// accuracy) and serve's frozen answers run it, in float64: it is
// zeroshot.Classify, which every adaptation method predicts with, so all of
// them give the same bits for the same features and head.
func ZeroShotLogits(features, weights mat.Matrix, scale float64) *mat.Dense {
	logits, _ := zeroshot.Classify(features, weights, scale)
	return logits
}

// denseOf returns the values of m in float64 as a gonum matrix (sharing
// float64 data, converting any other).
func denseOf(m smat.Tensor) *mat.Dense {
	s := m.Shape()
	return mat.NewDense(s[0], s[1], m.Data().F64())
}

// Softmax returns the row-wise softmax of logits as float64 probabilities.
func Softmax(logits smat.Tensor) [][]float64 {
	s := logits.Value().Shape()
	v := logits.Value().Data().F64()
	out := make([][]float64, s[0])
	for i := range out {
		out[i] = SoftmaxRow(v[i*s[1] : (i+1)*s[1]])
	}
	return out
}

// SoftmaxRow returns the softmax of one row of logits (exp(x − max x),
// normalised).
func SoftmaxRow(row []float64) []float64 {
	mx := math.Inf(-1)
	for _, x := range row {
		mx = max(mx, x)
	}
	p := make([]float64, len(row))
	var sum float64
	for j, x := range row {
		p[j] = math.Exp(x - mx)
		sum += p[j]
	}
	for j := range p {
		p[j] /= sum
	}
	return p
}
