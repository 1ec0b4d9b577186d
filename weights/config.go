package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// CLIPConfig describes a ViT CLIP model: what the vision and text towers
// need to be built from OpenAI-named tensors.
type CLIPConfig struct {
	// EmbedDim is the width of the joint image-text space (the columns
	// of visual.proj and text_projection).
	EmbedDim int          `json:"embed_dim"`
	Vision   VisionConfig `json:"vision"`
	Text     TextConfig   `json:"text"`
	// HasLogitScale reports that the model carries a learned logit_scale.
	HasLogitScale bool    `json:"has_logit_scale"`
	LayerNormEps  float64 `json:"layer_norm_eps"`
	// Activation is the MLP nonlinearity: "quick_gelu" (x·σ(1.702x), as
	// OpenAI trained) or "gelu".
	Activation string `json:"activation"`
	// Inferred reports a configuration read off the tensor shapes
	// (InferConfig): the head counts are then OpenAI's width/64 rule, which
	// other models need not follow. Not stored.
	Inferred bool `json:"-"`
}

// VisionConfig describes the vision transformer.
type VisionConfig struct {
	Width     int `json:"width"`
	Layers    int `json:"layers"`
	Heads     int `json:"heads"`
	MLPWidth  int `json:"mlp_width"`
	PatchSize int `json:"patch_size"`
	ImageSize int `json:"image_size"`
}

// TextConfig describes the text transformer.
type TextConfig struct {
	Width         int `json:"width"`
	Layers        int `json:"layers"`
	Heads         int `json:"heads"`
	MLPWidth      int `json:"mlp_width"`
	ContextLength int `json:"context_length"`
	VocabSize     int `json:"vocab_size"`
}

// The conventions CLIP models share unless their configuration says
// otherwise: 64-wide attention heads (OpenAI's vision tower and open_clip's
// head_width), LayerNorm eps 1e-5, QuickGELU.
const (
	DefaultHeadWidth    = 64
	DefaultLayerNormEps = 1e-5
	QuickGELU           = "quick_gelu"
	GELU                = "gelu"
)

// ParseConfig reads a CLIP configuration in any of the forms met beside
// checkpoints: a Hugging Face config.json (vision_config/text_config), an
// open_clip model config (vision_cfg/text_cfg, possibly inside
// open_clip_config.json's model_cfg), OpenAI's clip.model.CLIP keyword
// arguments (possibly under clip_model_CLIP_kwargs, with optional
// vision_heads/text_heads beside them), or this package's own JSON form of
// CLIPConfig (as Convert writes it).
func ParseConfig(data []byte) (*CLIPConfig, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("weights: config: %w", err)
	}
	var c *CLIPConfig
	var err error
	switch {
	case top["vision"] != nil && top["text"] != nil:
		c = new(CLIPConfig)
		err = json.Unmarshal(data, c)
	case top["vision_config"] != nil:
		c, err = parseHFConfig(data)
	case top["model_cfg"] != nil:
		c, err = parseOpenCLIPConfig(top["model_cfg"])
	case top["vision_cfg"] != nil:
		c, err = parseOpenCLIPConfig(data)
	case top["clip_model_CLIP_kwargs"] != nil || top["vision_width"] != nil:
		c, err = parseOpenAIKwargs(top)
	default:
		return nil, errors.New("weights: config: not a CLIP configuration (no vision_config, vision_cfg, vision_width or vision)")
	}
	if err != nil {
		return nil, fmt.Errorf("weights: config: %w", err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("weights: config: %w", err)
	}
	return c, nil
}

// ReadConfig reads a configuration file in any form ParseConfig reads (a
// --model-config), naming the file in its errors.
func ReadConfig(path string) (*CLIPConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("weights: config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// For returns a copy of c fitted to the tensors of s, an OpenAI-layout
// state: HasLogitScale follows s (every CLIP configuration implies a
// logit_scale; the tensors tell whether this model has one), the copy is not
// marked Inferred, and it is validated against s.
func (c CLIPConfig) For(s *State) (*CLIPConfig, error) {
	c.HasLogitScale = s.Has(logitScale)
	c.Inferred = false
	if err := c.Validate(s); err != nil {
		return nil, err
	}
	return &c, nil
}

func parseHFConfig(data []byte) (*CLIPConfig, error) {
	type tower struct {
		HiddenSize   int     `json:"hidden_size"`
		Layers       int     `json:"num_hidden_layers"`
		Heads        int     `json:"num_attention_heads"`
		Intermediate int     `json:"intermediate_size"`
		PatchSize    int     `json:"patch_size"`
		ImageSize    int     `json:"image_size"`
		MaxPositions int     `json:"max_position_embeddings"`
		VocabSize    int     `json:"vocab_size"`
		HiddenAct    string  `json:"hidden_act"`
		LayerNormEps float64 `json:"layer_norm_eps"`
	}
	var h struct {
		ProjectionDim int   `json:"projection_dim"`
		Vision        tower `json:"vision_config"`
		Text          tower `json:"text_config"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, err
	}
	if h.Vision.HiddenAct != h.Text.HiddenAct || h.Vision.LayerNormEps != h.Text.LayerNormEps {
		return nil, fmt.Errorf("the towers differ in hidden_act (%q, %q) or layer_norm_eps (%g, %g)",
			h.Vision.HiddenAct, h.Text.HiddenAct, h.Vision.LayerNormEps, h.Text.LayerNormEps)
	}
	act := h.Vision.HiddenAct
	if act == "gelu_pytorch_tanh" || act == "" {
		return nil, fmt.Errorf("hidden_act %q is not supported", act)
	}
	c := &CLIPConfig{
		EmbedDim: h.ProjectionDim,
		Vision: VisionConfig{Width: h.Vision.HiddenSize, Layers: h.Vision.Layers, Heads: h.Vision.Heads,
			MLPWidth: h.Vision.Intermediate, PatchSize: h.Vision.PatchSize, ImageSize: h.Vision.ImageSize},
		Text: TextConfig{Width: h.Text.HiddenSize, Layers: h.Text.Layers, Heads: h.Text.Heads,
			MLPWidth: h.Text.Intermediate, ContextLength: h.Text.MaxPositions, VocabSize: h.Text.VocabSize},
		HasLogitScale: true,
		LayerNormEps:  h.Vision.LayerNormEps,
		Activation:    act,
	}
	if c.LayerNormEps == 0 {
		c.LayerNormEps = DefaultLayerNormEps
	}
	return c, nil
}

// openCLIPConfig is the part of an open_clip model config that
// parseOpenCLIPConfig reads (its JSON keys are the ones UnreadConfigKeys
// leaves out).
type openCLIPConfig struct {
	EmbedDim  int            `json:"embed_dim"`
	QuickGELU bool           `json:"quick_gelu"`
	Vision    openCLIPVision `json:"vision_cfg"`
	Text      openCLIPText   `json:"text_cfg"`
}

// openCLIPVision is the part of open_clip's CLIPVisionCfg that
// parseOpenCLIPConfig reads. Heads is not one of open_clip's keys (it
// derives the heads from width/head_width): it is read only to refuse a
// count the model would not have.
type openCLIPVision struct {
	ImageSize json.RawMessage `json:"image_size"`
	Layers    json.RawMessage `json:"layers"`
	Width     int             `json:"width"`
	HeadWidth int             `json:"head_width"`
	Heads     *int            `json:"heads"`
	MLPRatio  float64         `json:"mlp_ratio"`
	PatchSize int             `json:"patch_size"`
	Timm      string          `json:"timm_model_name"`
}

// openCLIPText is the part of open_clip's CLIPTextCfg that
// parseOpenCLIPConfig reads. HeadWidth is not one of open_clip's keys
// there (the text tower takes heads): it is read only to refuse a width
// the model's heads would not have.
type openCLIPText struct {
	ContextLength int     `json:"context_length"`
	VocabSize     int     `json:"vocab_size"`
	Width         int     `json:"width"`
	Heads         int     `json:"heads"`
	HeadWidth     *int    `json:"head_width"`
	Layers        int     `json:"layers"`
	MLPRatio      float64 `json:"mlp_ratio"`
	HFModel       string  `json:"hf_model_name"`
}

func parseOpenCLIPConfig(data []byte) (*CLIPConfig, error) {
	var o openCLIPConfig
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, err
	}
	if o.Vision.Timm != "" || o.Text.HFModel != "" {
		return nil, errors.New("open_clip towers from timm or Hugging Face models are not supported")
	}
	var layers, imageSize int
	if err := json.Unmarshal(o.Vision.Layers, &layers); err != nil {
		return nil, fmt.Errorf("vision_cfg.layers %s: only ViT towers (an integer layer count) are supported", o.Vision.Layers)
	}
	if err := json.Unmarshal(o.Vision.ImageSize, &imageSize); err != nil {
		return nil, fmt.Errorf("vision_cfg.image_size %s: want one integer", o.Vision.ImageSize)
	}
	headWidth, vRatio, tRatio := o.Vision.HeadWidth, o.Vision.MLPRatio, o.Text.MLPRatio
	if headWidth == 0 {
		headWidth = DefaultHeadWidth
	}
	if vRatio == 0 {
		vRatio = 4
	}
	if tRatio == 0 {
		tRatio = 4
	}
	act := GELU
	if o.QuickGELU {
		act = QuickGELU
	}
	textHeads := o.Text.Heads
	if textHeads == 0 {
		textHeads = 8 // open_clip's CLIPTextCfg default
	}
	visionHeads := o.Vision.Width / headWidth
	if h := o.Vision.Heads; h != nil && *h != visionHeads {
		hint := ""
		if *h > 0 && o.Vision.Width%*h == 0 {
			hint = fmt.Sprintf(" (head_width %d gives %d heads)", o.Vision.Width / *h, *h)
		}
		return nil, fmt.Errorf("vision_cfg.heads %d: open_clip takes the vision heads from width/head_width, %d/%d = %d, and reads no heads key there: give head_width instead%s",
			*h, o.Vision.Width, headWidth, visionHeads, hint)
	}
	if w := o.Text.HeadWidth; w != nil && (*w <= 0 || textHeads*(*w) != o.Text.Width) {
		return nil, fmt.Errorf("text_cfg.head_width %d: open_clip takes the text heads from text_cfg.heads (%d, of width %d/%d) and reads no head_width key there: give heads instead",
			*w, textHeads, o.Text.Width, textHeads)
	}
	return &CLIPConfig{
		EmbedDim: o.EmbedDim,
		Vision: VisionConfig{Width: o.Vision.Width, Layers: layers, Heads: visionHeads,
			MLPWidth: int(float64(o.Vision.Width) * vRatio), PatchSize: o.Vision.PatchSize, ImageSize: imageSize},
		Text: TextConfig{Width: o.Text.Width, Layers: o.Text.Layers, Heads: textHeads,
			MLPWidth: int(float64(o.Text.Width) * tRatio), ContextLength: o.Text.ContextLength, VocabSize: o.Text.VocabSize},
		HasLogitScale: true,
		LayerNormEps:  DefaultLayerNormEps,
		Activation:    act,
	}, nil
}

// UnreadConfigKeys returns the keys of an open_clip model config (the form
// with vision_cfg and text_cfg, possibly under model_cfg) that ParseConfig
// does not read, as "vision_cfg.ls_init_value", sorted: open_clip settings
// the towers built here do not have (layer scale, another pooling, a
// tokenizer of its own, ...) or misspelt keys, which would otherwise be
// ignored without a word. A key set to null (open_clip's default) is not
// counted. It returns nil for data in the other forms, whose files hold
// many keys beside the architecture (a Hugging Face config.json's
// id2label, a fixture's notes), and for data that is not such a JSON
// object (ParseConfig says why).
func UnreadConfigKeys(data []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return nil
	}
	// The forms in ParseConfig's order.
	switch {
	case top["vision"] != nil && top["text"] != nil, top["vision_config"] != nil:
		return nil
	case top["model_cfg"] != nil:
		var model map[string]json.RawMessage
		if json.Unmarshal(top["model_cfg"], &model) != nil {
			return nil
		}
		top = model
	case top["vision_cfg"] == nil:
		return nil
	}
	var unread []string
	add := func(prefix string, m map[string]json.RawMessage, read reflect.Type) {
		known := map[string]bool{}
		for i := range read.NumField() {
			name, _, _ := strings.Cut(read.Field(i).Tag.Get("json"), ",")
			known[name] = true
		}
		for k, v := range m {
			if !known[k] && string(bytes.TrimSpace(v)) != "null" {
				unread = append(unread, prefix+k)
			}
		}
	}
	add("", top, reflect.TypeFor[openCLIPConfig]())
	for _, t := range []struct {
		key  string
		read reflect.Type
	}{{"vision_cfg", reflect.TypeFor[openCLIPVision]()}, {"text_cfg", reflect.TypeFor[openCLIPText]()}} {
		var m map[string]json.RawMessage
		if json.Unmarshal(top[t.key], &m) == nil {
			add(t.key+".", m, t.read)
		}
	}
	slices.Sort(unread)
	return unread
}

// parseOpenAIKwargs reads clip.model.CLIP's keyword arguments. OpenAI
// derives the vision heads as vision_width // 64; a vision_heads or
// text_heads member beside the arguments overrides.
func parseOpenAIKwargs(top map[string]json.RawMessage) (*CLIPConfig, error) {
	args := top
	if raw := top["clip_model_CLIP_kwargs"]; raw != nil {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, err
		}
	}
	get := func(m map[string]json.RawMessage, key string) (int, error) {
		raw, ok := m[key]
		if !ok {
			return 0, fmt.Errorf("%s missing", key)
		}
		// Accept numbers and numeric strings (safetensors metadata is
		// all strings).
		s := strings.Trim(string(raw), `"`)
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("%s: %s is not an integer", key, raw)
		}
		return n, nil
	}
	var k [10]int
	names := []string{"embed_dim", "image_resolution", "vision_layers", "vision_width", "vision_patch_size",
		"context_length", "vocab_size", "transformer_width", "transformer_heads", "transformer_layers"}
	for i, n := range names {
		v, err := get(args, n)
		if err != nil {
			return nil, err
		}
		k[i] = v
	}
	c := &CLIPConfig{
		EmbedDim: k[0],
		Vision:   VisionConfig{Width: k[3], Layers: k[2], Heads: k[3] / DefaultHeadWidth, MLPWidth: 4 * k[3], PatchSize: k[4], ImageSize: k[1]},
		Text:     TextConfig{Width: k[7], Layers: k[9], Heads: k[8], MLPWidth: 4 * k[7], ContextLength: k[5], VocabSize: k[6]},

		HasLogitScale: true,
		LayerNormEps:  DefaultLayerNormEps,
		Activation:    QuickGELU,
	}
	for _, m := range []map[string]json.RawMessage{args, top} {
		if raw, ok := m["layer_norm_eps"]; ok {
			if err := json.Unmarshal(raw, &c.LayerNormEps); err != nil {
				return nil, fmt.Errorf("layer_norm_eps: %w", err)
			}
		}
		if _, ok := m["vision_heads"]; ok {
			v, err := get(m, "vision_heads")
			if err != nil {
				return nil, err
			}
			c.Vision.Heads = v
		}
		if _, ok := m["text_heads"]; ok {
			v, err := get(m, "text_heads")
			if err != nil {
				return nil, err
			}
			c.Text.Heads = v
		}
	}
	return c, nil
}

// check validates the numbers on their own.
func (c *CLIPConfig) check() error {
	v, t := c.Vision, c.Text
	for _, f := range []struct {
		name string
		n    int
	}{{"embed_dim", c.EmbedDim}, {"vision width", v.Width}, {"vision layers", v.Layers}, {"vision heads", v.Heads},
		{"vision MLP width", v.MLPWidth}, {"patch size", v.PatchSize}, {"image size", v.ImageSize},
		{"text width", t.Width}, {"text layers", t.Layers}, {"text heads", t.Heads}, {"text MLP width", t.MLPWidth},
		{"context length", t.ContextLength}, {"vocab size", t.VocabSize}} {
		if f.n <= 0 {
			return fmt.Errorf("%s is %d", f.name, f.n)
		}
	}
	if v.Width%v.Heads != 0 || t.Width%t.Heads != 0 {
		return fmt.Errorf("width not divisible by heads (vision %d/%d, text %d/%d)", v.Width, v.Heads, t.Width, t.Heads)
	}
	if v.ImageSize%v.PatchSize != 0 {
		return fmt.Errorf("image size %d is not a multiple of patch size %d", v.ImageSize, v.PatchSize)
	}
	if c.Activation != QuickGELU && c.Activation != GELU {
		return fmt.Errorf("activation %q, want %q or %q", c.Activation, QuickGELU, GELU)
	}
	if !(c.LayerNormEps > 0) {
		return fmt.Errorf("layer_norm_eps %g", c.LayerNormEps)
	}
	return nil
}

// Grid returns the number of patches along each side of the image.
func (v VisionConfig) Grid() int { return v.ImageSize / v.PatchSize }

// Summary describes c in a line: the fields an architecture given by hand
// most often gets wrong, for errors that compare two.
func (c *CLIPConfig) Summary() string {
	return fmt.Sprintf("vision %d×%d (%d heads, MLP %d, patch %d, %d px), text %d×%d (%d heads, MLP %d, context %d, vocabulary %d), embed %d, %s, LayerNorm eps %g",
		c.Vision.Layers, c.Vision.Width, c.Vision.Heads, c.Vision.MLPWidth, c.Vision.PatchSize, c.Vision.ImageSize,
		c.Text.Layers, c.Text.Width, c.Text.Heads, c.Text.MLPWidth, c.Text.ContextLength, c.Text.VocabSize,
		c.EmbedDim, c.Activation, c.LayerNormEps)
}

// InferConfig reads the configuration off the tensor shapes of an
// OpenAI-layout state. What the shapes do not say takes the CLIP defaults:
// heads = width/64 for both towers, LayerNorm eps 1e-5, QuickGELU. Set
// other values on the result (and Validate) when the model differs.
func InferConfig(s *State) (*CLIPConfig, error) {
	bad := func(err error) (*CLIPConfig, error) {
		return nil, fmt.Errorf("%w (inferring the config from the tensor shapes)", err)
	}
	n := (&CLIPConfig{}).TensorNames()
	if _, err := s.Get(n.Vision.Conv, -1, 3, -1, -1); err != nil {
		return bad(err)
	}
	cs, _ := s.Shape(n.Vision.Conv)
	vw, patch := cs[0], cs[2]
	if cs[3] != patch {
		return bad(fmt.Errorf("weights: %s: tensor %q: non-square patch %v: %w", s.Source, n.Vision.Conv, cs, ErrShape))
	}
	pos, err := s.Shape(n.Vision.Pos)
	if err != nil {
		return bad(err)
	}
	grid := 0
	if len(pos) == 2 {
		for grid*grid < pos[0]-1 {
			grid++
		}
	}
	if len(pos) != 2 || grid*grid != pos[0]-1 {
		return bad(fmt.Errorf("weights: %s: tensor %q: shape %v is not [grid²+1, width]: %w", s.Source, n.Vision.Pos, pos, ErrShape))
	}
	proj, err := s.Shape(n.Vision.Proj)
	if err != nil {
		return bad(err)
	}
	tok, err := s.Shape(n.Text.Token)
	if err != nil {
		return bad(err)
	}
	tpos, err := s.Shape(n.Text.Pos)
	if err != nil {
		return bad(err)
	}
	if len(proj) != 2 || len(tok) != 2 || len(tpos) != 2 {
		return bad(fmt.Errorf("weights: %s: %s %v, %s %v, %s %v: want matrices: %w", s.Source, n.Vision.Proj, proj, n.Text.Token, tok, n.Text.Pos, tpos, ErrShape))
	}
	c := &CLIPConfig{
		EmbedDim:      proj[1],
		Vision:        VisionConfig{Width: vw, Heads: vw / DefaultHeadWidth, PatchSize: patch, ImageSize: grid * patch},
		Text:          TextConfig{Width: tok[1], Heads: tok[1] / DefaultHeadWidth, ContextLength: tpos[0], VocabSize: tok[0]},
		HasLogitScale: s.Has(logitScale),
		LayerNormEps:  DefaultLayerNormEps,
		Activation:    QuickGELU,
		Inferred:      true,
	}
	c.Vision.Layers = countLayers(s, visionBlocks)
	c.Text.Layers = countLayers(s, textBlocks)
	if fc, err := s.Shape(blockNames(visionBlocks + "0.").FC.Weight); err == nil && len(fc) == 2 {
		c.Vision.MLPWidth = fc[0]
	}
	if fc, err := s.Shape(blockNames(textBlocks + "0.").FC.Weight); err == nil && len(fc) == 2 {
		c.Text.MLPWidth = fc[0]
	}
	if c.Vision.Heads == 0 {
		c.Vision.Heads = 1
	}
	if c.Text.Heads == 0 {
		c.Text.Heads = 1
	}
	if err := c.check(); err != nil {
		return bad(fmt.Errorf("weights: %s: %w", s.Source, err))
	}
	if err := c.Validate(s); err != nil {
		return nil, err
	}
	return c, nil
}

// countLayers returns 1 + the largest N of prefix N.* in s.
func countLayers(s *State, prefix string) int {
	n := 0
	for _, name := range s.order {
		if layer, _, ok := splitLayer(name, prefix); ok {
			i, _ := strconv.Atoi(layer)
			n = max(n, i+1)
		}
	}
	return n
}

// Validate checks that s (OpenAI layout) holds every tensor of a model of
// this configuration with the right shape, and no extra transformer layers.
// A logit_scale of shape [1] is accepted for []. The error names the source
// and the first offending tensor.
func (c *CLIPConfig) Validate(s *State) error {
	if err := c.check(); err != nil {
		return fmt.Errorf("weights: %s: config: %w", s.Source, err)
	}
	for _, t := range c.tensors() {
		name, want := t.name, t.shape
		got, err := s.Shape(name)
		if err != nil {
			return err
		}
		if name == logitScale && numElements(got) == 1 && len(got) <= 1 {
			continue
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("weights: %s: tensor %q: shape %v, the config wants %v: %w", s.Source, name, got, want, ErrShape)
		}
	}
	for _, name := range s.order {
		for _, prefix := range []string{visionBlocks, textBlocks} {
			if _, _, ok := splitLayer(name, prefix); ok {
				if _, ok := c.Shape(name); !ok {
					return fmt.Errorf("weights: %s: tensor %q is not part of a model of %d vision and %d text layers",
						s.Source, name, c.Vision.Layers, c.Text.Layers)
				}
			}
		}
	}
	return nil
}
