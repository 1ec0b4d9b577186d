package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// TestConfigFixture: the configuration read from each config file, stored
// with each fixture, or given by its config file equals the fixture's
// clip-tiny.config.json; the one inferred from the tensors equals it but
// for the head counts, which are width/64 and marked Inferred.
func TestConfigFixture(t *testing.T) {
	want, raw := fixtureConfig(t)
	// The parse itself, against the raw fields of the file.
	kw := raw["clip_model_CLIP_kwargs"].(map[string]any)
	for _, c := range []struct {
		got  int
		key  string
		from map[string]any
	}{
		{want.EmbedDim, "embed_dim", kw}, {want.Vision.Width, "vision_width", kw}, {want.Vision.Layers, "vision_layers", kw},
		{want.Vision.PatchSize, "vision_patch_size", kw}, {want.Vision.ImageSize, "image_resolution", kw},
		{want.Text.Width, "transformer_width", kw}, {want.Text.Layers, "transformer_layers", kw},
		{want.Text.ContextLength, "context_length", kw}, {want.Text.VocabSize, "vocab_size", kw},
		{want.Vision.Heads, "vision_heads", raw}, {want.Text.Heads, "text_heads", raw},
	} {
		if float64(c.got) != c.from[c.key].(float64) {
			t.Errorf("%s: parsed %d, file says %v", c.key, c.got, c.from[c.key])
		}
	}
	if want.LayerNormEps != raw["layer_norm_eps"].(float64) || want.Activation != QuickGELU || !want.HasLogitScale {
		t.Errorf("eps/activation/logit scale: %+v", want)
	}

	for _, rel := range []string{"fixtures/clip-tiny.openai.safetensors", "fixtures/clip-tiny.hf.safetensors", "fixtures/clip-tiny.openai-fp16.pt"} {
		s := loadFixture(t, rel)
		got, err := InferConfig(s)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, headRule(want)) {
			t.Errorf("%s: inferred %+v, want %+v", rel, got, headRule(want))
		}
		// LoadCLIP uses the stored config (safetensors metadata) or infers.
		s, got, err = LoadCLIP(fixture.Path(t, rel))
		if err != nil {
			t.Fatal(err)
		}
		if s.ConfigJSON == nil {
			if !reflect.DeepEqual(got, headRule(want)) {
				t.Errorf("%s stores no config: LoadCLIP config %+v, want the inferred %+v", rel, got, headRule(want))
			}
		} else if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: LoadCLIP config %+v, want %+v", rel, got, want)
		}
		// With its config file, every fixture has the fixture's config.
		if _, got := fixtureCLIP(t, rel); !reflect.DeepEqual(got, want) {
			t.Errorf("%s with %s: config %+v, want %+v", rel, fixture.ModelConfig(t, rel), got, want)
		}
	}
	hfc, _ := os.ReadFile(fixture.Path(t, "fixtures/clip-tiny.hf.config.json"))
	got, err := ParseConfig(hfc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("HF config %+v, want %+v", got, want)
	}
	// The package's own JSON form round-trips.
	own, _ := json.Marshal(want)
	if got, err := ParseConfig(own); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("own form: %+v, %v", got, err)
	}
}

// TestConfigViTB32: the Hugging Face and open_clip configurations of
// ViT-B/32 describe the same towers; open_clip's plain ViT-B-32 uses GELU
// where OpenAI's weights (and HF's config) use QuickGELU.
func TestConfigViTB32(t *testing.T) {
	hb, _ := os.ReadFile(fixture.Path(t, "assets/clip/hf-config.clip-vit-base-patch32.json"))
	ob, _ := os.ReadFile(fixture.Path(t, "assets/clip/openclip-config.ViT-B-32.json"))
	hf, err := ParseConfig(hb)
	if err != nil {
		t.Fatal(err)
	}
	oc, err := ParseConfig(ob)
	if err != nil {
		t.Fatal(err)
	}
	if hf.Activation != QuickGELU || oc.Activation != GELU {
		t.Errorf("activations %q, %q", hf.Activation, oc.Activation)
	}
	oc.Activation = hf.Activation
	if !reflect.DeepEqual(hf, oc) {
		t.Errorf("HF %+v\nopen_clip %+v", hf, oc)
	}
	var raw map[string]any
	json.Unmarshal(hb, &raw)
	vc := raw["vision_config"].(map[string]any)
	if float64(hf.Vision.Heads) != vc["num_attention_heads"].(float64) || float64(hf.Vision.MLPWidth) != vc["intermediate_size"].(float64) {
		t.Errorf("vision heads/MLP %d/%d, file %v/%v", hf.Vision.Heads, hf.Vision.MLPWidth, vc["num_attention_heads"], vc["intermediate_size"])
	}
	// Wrapped as open_clip_config.json is on the Hub.
	wrapped := []byte(`{"model_cfg":` + string(ob) + `,"preprocess_cfg":{}}`)
	if w, err := ParseConfig(wrapped); err != nil || w.Vision != oc.Vision {
		t.Errorf("model_cfg wrapper: %+v, %v", w, err)
	}
}

func TestConfigValidate(t *testing.T) {
	want, _ := fixtureConfig(t)
	s := loadFixture(t, "fixtures/clip-tiny.openai.safetensors")
	if err := want.Validate(s); err != nil {
		t.Fatal(err)
	}
	// The edits are relative to the fixture's own configuration: its last
	// text layer, a width one too large, a layer fewer in a tower that has
	// two, heads that cannot divide the width, and another patch size that
	// divides the image.
	lastFC := fmt.Sprintf("transformer.resblocks.%d.mlp.c_fc.bias", want.Text.Layers-1)
	patch := 1
	if want.Vision.PatchSize == patch {
		patch = want.Vision.ImageSize
	}
	for _, c := range []struct {
		name string
		edit func(c *CLIPConfig, s *State)
		is   error
		want string
	}{
		{"missing", func(c *CLIPConfig, s *State) { s.Delete(lastFC) }, ErrNotFound, `"` + lastFC + `"`},
		{"shape", func(c *CLIPConfig, s *State) {
			n := c.Vision.Width + 1
			s.Set(&Param{Name: "visual.ln_post.bias", Shape: []int{n}, Data: make([]float32, n)})
		}, ErrShape, `"visual.ln_post.bias"`},
		{"fewer layers", func(c *CLIPConfig, s *State) {
			if c.Vision.Layers > 1 {
				c.Vision.Layers--
			} else {
				c.Text.Layers--
			}
		}, nil, "not part of a model"},
		{"more layers", func(c *CLIPConfig, s *State) { c.Text.Layers++ }, ErrNotFound, "transformer.resblocks."},
		{"heads", func(c *CLIPConfig, s *State) { c.Text.Heads = c.Text.Width + 1 }, nil, "divisible"},
		{"patch", func(c *CLIPConfig, s *State) { c.Vision.PatchSize = patch }, ErrShape, `"visual.positional_embedding"`},
	} {
		if c.name == "fewer layers" && want.Vision.Layers < 2 && want.Text.Layers < 2 {
			t.Logf("%s: skipped, both towers of the fixture model have a single layer", c.name)
			continue
		}
		cc := *want
		ss := &State{Source: s.Source}
		for _, n := range s.Names() {
			p, _ := s.Param(n)
			ss.Set(p)
		}
		c.edit(&cc, ss)
		err := cc.Validate(ss)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), s.Source) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestParseConfigRejects(t *testing.T) {
	for _, c := range []string{
		`[]`,
		`{"foo": 1}`,
		`{"vision_cfg": {"layers": [3, 4, 6, 3], "width": 64, "image_size": 224}, "text_cfg": {}}`,
		`{"vision_config": {"hidden_size": 10, "hidden_act": "quick_gelu"}, "text_config": {"hidden_act": "gelu"}}`,
		`{"embed_dim": 64, "vision_width": 128}`,
	} {
		if _, err := ParseConfig([]byte(c)); err == nil {
			t.Errorf("accepted %s", c)
		}
	}
}

// TestFixtureHeadsFromConfig: on a fixture set whose configuration files
// and stored configurations state head counts other than width/64
// (fixture.SetWithHeads), the tests' fixture loader (fixtureCLIP) and
// reference configuration (fixtureConfig) have the stated counts for every
// fixture model, where LoadCLIP of the .pt alone, which stores no
// configuration, guesses width/64.
func TestFixtureHeadsFromConfig(t *testing.T) {
	base, _ := fixtureConfig(t)
	vision, text := fixture.OtherHeads(base.Vision.Width), fixture.OtherHeads(base.Text.Width)
	fixture.SetWithHeads(t, vision, text)
	if want, _ := fixtureConfig(t); want.Vision.Heads != vision || want.Text.Heads != text {
		t.Fatalf("fixtureConfig: %d vision and %d text heads, the set states %d and %d", want.Vision.Heads, want.Text.Heads, vision, text)
	}
	for _, rel := range []string{"fixtures/clip-tiny.openai.safetensors", "fixtures/clip-tiny.hf.safetensors", "fixtures/clip-tiny.openai-fp16.pt"} {
		if _, c := fixtureCLIP(t, rel); c.Vision.Heads != vision || c.Text.Heads != text {
			t.Errorf("%s: loaded with %d vision and %d text heads, its config file states %d and %d", rel, c.Vision.Heads, c.Text.Heads, vision, text)
		}
	}
	_, guessed, err := LoadCLIP(fixture.Path(t, "fixtures/clip-tiny.openai-fp16.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if !guessed.Inferred || guessed.Vision.Heads == vision || guessed.Text.Heads == text {
		t.Errorf("the .pt alone: %+v; want width/64 heads, marked Inferred, unlike the set's", guessed)
	}
}

// TestOpenCLIPHeadKeys: open_clip takes the vision heads from
// width/head_width and the text heads from heads; a vision_cfg.heads or a
// text_cfg.head_width (keys open_clip has not) that disagrees with the
// model built is refused naming the key, not ignored, and one that agrees
// is accepted.
func TestOpenCLIPHeadKeys(t *testing.T) {
	config := func(vision, text string) []byte {
		return []byte(`{"embed_dim": 32, "vision_cfg": {"image_size": 64, "layers": 1, "width": 96, "patch_size": 16` + vision +
			`}, "text_cfg": {"context_length": 16, "vocab_size": 259, "width": 64, "heads": 2, "layers": 1` + text + `}}`)
	}
	for _, c := range []struct {
		vision, text string
		heads        [2]int // vision, text; zero: refused
		want         string
	}{
		{``, ``, [2]int{1, 2}, ""},
		{`, "heads": 1`, `, "head_width": 32`, [2]int{1, 2}, ""},
		{`, "head_width": 32, "heads": 3`, ``, [2]int{3, 2}, ""},
		{`, "heads": 3`, ``, [2]int{}, "vision_cfg.heads 3: open_clip takes the vision heads from width/head_width, 96/64 = 1"},
		{`, "heads": 5`, ``, [2]int{}, "vision_cfg.heads 5"},
		{``, `, "head_width": 16`, [2]int{}, "text_cfg.head_width 16: open_clip takes the text heads from text_cfg.heads (2"},
	} {
		got, err := ParseConfig(config(c.vision, c.text))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v", c.vision, c.text, err)
		case c.want == "" && (got.Vision.Heads != c.heads[0] || got.Text.Heads != c.heads[1]):
			t.Errorf("%s %s: %d vision and %d text heads, want %v", c.vision, c.text, got.Vision.Heads, got.Text.Heads, c.heads)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s: %v (%+v); want an error with %q", c.vision, c.text, err, got, c.want)
		}
	}
	if _, err := ParseConfig(config(`, "heads": 3`, ``)); err == nil || !strings.Contains(err.Error(), "head_width 32 gives 3 heads") {
		t.Errorf("vision_cfg.heads 3 of width 96: %v; want the head_width that gives 3", err)
	}
}

// TestUnreadConfigKeys: the keys of an open_clip model config that
// ParseConfig does not read are listed (at the top, in vision_cfg and
// text_cfg, under model_cfg too), but not those set to null; other forms
// list none.
func TestUnreadConfigKeys(t *testing.T) {
	ob, err := os.ReadFile(fixture.Path(t, "assets/clip/openclip-config.ViT-B-32.json"))
	if err != nil {
		t.Fatal(err)
	}
	hb, err := os.ReadFile(fixture.Path(t, "assets/clip/hf-config.clip-vit-base-patch32.json"))
	if err != nil {
		t.Fatal(err)
	}
	kw, err := os.ReadFile(fixture.ModelConfig(t, "fixtures/clip-tiny.openai.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	extra := []byte(`{"embed_dim": 512, "init_logit_bias": -10, "custom_text": true,
		"vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 32, "ls_init_value": null, "no_ln_pre": true, "mlp_width": 3072},
		"text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12, "pool_type": "last"}}`)
	want := []string{"custom_text", "init_logit_bias", "text_cfg.pool_type", "vision_cfg.mlp_width", "vision_cfg.no_ln_pre"}
	for _, c := range []struct {
		name string
		data []byte
		want []string
	}{
		{"open_clip ViT-B-32", ob, nil},
		{"Hugging Face", hb, nil},
		{"OpenAI keyword arguments", kw, nil},
		{"open_clip with more keys", extra, want},
		{"under model_cfg", []byte(`{"model_cfg": ` + string(extra) + `, "preprocess_cfg": {"mean": [0.5]}}`), want},
		{"not JSON", []byte(`{`), nil},
	} {
		if got := UnreadConfigKeys(c.data); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if _, err := ParseConfig(extra); err != nil {
		t.Errorf("the config with unread keys: %v", err)
	}
}
