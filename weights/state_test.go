package weights

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// loadFixture loads a shared fixture and maps it to OpenAI names.
func loadFixture(t *testing.T, rel string) *State {
	t.Helper()
	raw, err := Load(fixture.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ToOpenAI(raw)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fixtureConfig reads clip-tiny.config.json, the reference for the model
// configuration and for the dtypes of the fp16 checkpoint.
func fixtureConfig(t *testing.T) (*CLIPConfig, map[string]any) {
	t.Helper()
	b, err := os.ReadFile(fixture.Path(t, "fixtures/clip-tiny.config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	return c, raw
}

// fixtureCLIP loads the fixture model rel as every test loads a fixture
// model: with its configuration file (fixture.ModelConfig), never with head
// counts inferred from the shapes, which another fixture set need not
// follow.
func fixtureCLIP(t *testing.T, rel string) (*State, *CLIPConfig) {
	t.Helper()
	c, err := ReadConfig(fixture.ModelConfig(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	s, c, err := LoadCLIPWith(fixture.Path(t, rel), c)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// headRule returns c with the head counts InferConfig assumes: width/64,
// at least 1.
func headRule(c *CLIPConfig) *CLIPConfig {
	r := *c
	r.Vision.Heads = max(1, r.Vision.Width/DefaultHeadWidth)
	r.Text.Heads = max(1, r.Text.Width/DefaultHeadWidth)
	r.Inferred = true
	return &r
}

// compareStates checks that got has exactly want's names and shapes, and
// that every value equals want's passed through round (bit for bit; round
// nil means unchanged). It logs the worst absolute difference per tensor.
func compareStates(t *testing.T, got, want *State, round func(name string, v float32) float32) {
	t.Helper()
	gn, wn := got.Names(), want.Names()
	sort.Strings(gn)
	sort.Strings(wn)
	if !slices.Equal(gn, wn) {
		t.Fatalf("%s: names differ from %s:\n got %v\nwant %v", got.Source, want.Source, gn, wn)
	}
	for _, name := range wn {
		w, _ := want.Param(name)
		g, err := got.Get(name, w.Shape...)
		if err != nil {
			t.Error(err)
			continue
		}
		worst, bad := 0.0, 0
		for i, v := range w.Data {
			if round != nil {
				v = round(name, v)
			}
			if math.Float32bits(g[i]) != math.Float32bits(v) {
				bad++
			}
			worst = max(worst, math.Abs(float64(g[i])-float64(v)))
		}
		if bad > 0 {
			t.Errorf("%s: tensor %q: %d of %d values differ, worst by %g", got.Source, name, bad, len(g), worst)
		}
		t.Logf("%s %q: worst |diff| %g", filepath.Base(got.Source), name, worst)
	}
}

// TestFixturesAgree: the fp32 OpenAI file, the Hugging Face file and the
// fp16 PyTorch checkpoint give the same OpenAI-named tensors: bit-exactly,
// and for the tensors the dtype list of clip-tiny.config.json marks float16,
// equal to the fp32 value rounded through float16.
func TestFixturesAgree(t *testing.T) {
	ref := loadFixture(t, "fixtures/clip-tiny.openai.safetensors")
	hf := loadFixture(t, "fixtures/clip-tiny.hf.safetensors")
	compareStates(t, hf, ref, nil)

	pt := loadFixture(t, "fixtures/clip-tiny.openai-fp16.pt")
	if pt.Format != FormatPyTorch {
		t.Errorf("format %q, want %q", pt.Format, FormatPyTorch)
	}
	_, raw := fixtureConfig(t)
	dtypes, _ := raw["fp16_pt_dtypes"].(map[string]any)
	if len(dtypes) != ref.Len() {
		t.Fatalf("fp16_pt_dtypes lists %d tensors, the model has %d", len(dtypes), ref.Len())
	}
	for name, dt := range dtypes {
		want := map[any]DType{"float16": F16, "float32": F32}[dt]
		if p, err := pt.Param(name); err != nil || p.DType != want {
			t.Errorf("%s: dtype %v (%v), want %s", name, p, err, want)
		}
	}
	compareStates(t, pt, ref, func(name string, v float32) float32 {
		if dtypes[name] == "float16" {
			return HalfToFloat32(Float32ToHalf(v))
		}
		return v
	})
}

// TestToHF: the inverse map reproduces the Hugging Face fixture exactly.
func TestToHF(t *testing.T) {
	ref := loadFixture(t, "fixtures/clip-tiny.openai.safetensors")
	hf, err := Load(fixture.Path(t, "fixtures/clip-tiny.hf.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ToHF(ref)
	if err != nil {
		t.Fatal(err)
	}
	compareStates(t, got, hf, nil)
	if l, _ := DetectLayout(hf); l != LayoutHF {
		t.Errorf("layout %q", l)
	}
	if _, err := ToHF(hf); err == nil {
		t.Error("ToHF of an HF state gave no error")
	}
}

func TestToOpenAIErrors(t *testing.T) {
	hf, err := Load(fixture.Path(t, "fixtures/clip-tiny.hf.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(s *State)
		want string
	}{
		// Layer 0: every model has it.
		{"missing k", func(s *State) { s.Delete("vision_model.encoder.layers.0.self_attn.k_proj.weight") }, `"visual.transformer.resblocks.0.attn.in_proj_weight": the k projection is missing`},
		{"unknown", func(s *State) {
			s.Set(&Param{Name: "vision_model.extra.weight", Shape: []int{1}, Data: []float32{0}})
		}, `"vision_model.extra.weight"`},
		{"bad v", func(s *State) {
			s.Set(&Param{Name: "text_model.encoder.layers.0.self_attn.v_proj.bias", Shape: []int{3}, Data: []float32{0, 0, 0}})
		}, "shapes"},
		{"mixed", func(s *State) { s.Set(&Param{Name: "visual.proj", Shape: []int{1}, Data: []float32{0}}) }, "mix"},
		{"resnet", func(s *State) {
			*s = State{Source: s.Source}
			s.Set(&Param{Name: "visual.layer1.0.conv1.weight", Shape: []int{1}, Data: []float32{0}})
		}, "ResNet"},
	} {
		s := &State{Source: hf.Source}
		for _, n := range hf.Names() {
			p, _ := hf.Param(n)
			s.Set(p)
		}
		c.edit(s)
		_, err := ToOpenAI(s)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), hf.Source) {
			t.Errorf("%s: error %v, want one naming %s and containing %s", c.name, err, hf.Source, c.want)
		}
	}
}

func TestStateAccessors(t *testing.T) {
	s := loadFixture(t, "fixtures/clip-tiny.openai.safetensors")
	cfg, raw := fixtureConfig(t)
	w := cfg.Vision.Width
	if _, err := s.Get("visual.transformer.resblocks.0.attn.in_proj_weight", 3*w, w); err != nil {
		t.Error(err)
	}
	if _, err := s.Get("visual.transformer.resblocks.0.attn.in_proj_weight", -1, w); err != nil {
		t.Error(err)
	}
	_, err := s.Get("visual.transformer.resblocks.0.attn.in_proj_weight", w, w)
	if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "in_proj_weight") || !strings.Contains(err.Error(), s.Source) {
		t.Errorf("wrong shape: %v", err)
	}
	_, err = s.Get("visual.nothing")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "visual.nothing") || !strings.Contains(err.Error(), s.Source) {
		t.Errorf("missing tensor: %v", err)
	}
	ls, err := s.Scalar("logit_scale")
	if err != nil || float64(ls) != raw["logit_scale"].(float64) {
		t.Errorf("logit_scale %v (%v), config says %v", ls, err, raw["logit_scale"])
	}
	if _, err := s.Scalar("ln_final.weight"); !errors.Is(err, ErrShape) {
		t.Errorf("Scalar of a vector: %v", err)
	}
}

// TestLoadDirectory: a Hugging Face style directory (model.safetensors and
// config.json), and the same weights sharded with an index.
func TestLoadDirectory(t *testing.T) {
	want, _ := fixtureConfig(t)
	ref := loadFixture(t, "fixtures/clip-tiny.openai.safetensors")
	dir := t.TempDir()
	if err := os.Symlink(fixture.Path(t, "fixtures/clip-tiny.hf.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	cj, _ := os.ReadFile(fixture.Path(t, "fixtures/clip-tiny.hf.config.json"))
	os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644)
	s, cfg, err := LoadCLIP(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config from config.json %+v, want %+v", cfg, want)
	}
	compareStates(t, s, ref, nil)

	// Two shards and an index.
	sharded := t.TempDir()
	names := ref.Names()
	index := map[string]map[string]string{"weight_map": {}}
	for i, part := range [][]string{names[:len(names)/2], names[len(names)/2:]} {
		shard := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
		var ts []Tensor
		for _, n := range part {
			p, _ := ref.Param(n)
			ts = append(ts, Tensor{Name: n, Shape: p.Shape, Data: p.Data})
			index["weight_map"][n] = shard
		}
		if err := WriteFile(filepath.Join(sharded, shard), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	ib, _ := json.Marshal(index)
	os.WriteFile(filepath.Join(sharded, "model.safetensors.index.json"), ib, 0o644)
	got, err := Load(sharded)
	if err != nil {
		t.Fatal(err)
	}
	compareStates(t, got, ref, nil)

	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "model.safetensors") {
		t.Errorf("empty directory: %v", err)
	}
}

func TestLoadUnknownFormat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.bin")
	os.WriteFile(p, []byte("hello, world, not weights"), 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("unknown format: %v", err)
	}
	for _, legacy := range [][]byte{
		{0x80, 2, 0x8a, 0x0a},
		// The start of a real one: protocol 2, then the pickled magic
		// number 0x1950a86a20f9469cfc6c.
		{0x80, 2, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e},
	} {
		os.WriteFile(p, legacy, 0o644)
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "legacy") {
			t.Errorf("legacy torch file % x: %v", legacy, err)
		}
	}
}

// TestLoadHeaderLikePickle: a safetensors file whose header length starts
// with the bytes of a pickle's protocol (0x180 = 80 01 00 ...) is read as
// safetensors, not refused as a legacy PyTorch file.
func TestLoadHeaderLikePickle(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	tensors := []Tensor{{Name: "x", Shape: []int{2}, Data: []float32{1, 2}}}
	for pad := 0; pad < 512; pad++ {
		meta := map[string]string{"pad": strings.Repeat("x", pad)}
		if err := WriteFile(p, tensors, meta); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		if b[0] != 0x80 || b[1] > 5 {
			continue
		}
		s, err := Load(p)
		if err != nil {
			t.Fatalf("header of %#x bytes: %v", int(b[0])|int(b[1])<<8, err)
		}
		if x, err := s.Get("x", 2); err != nil || x[1] != 2 {
			t.Fatalf("x = %v (%v)", x, err)
		}
		return
	}
	t.Fatal("no padding gave a header length starting 80 0x")
}

// TestOpenAIExtras: the settings OpenAI's TorchScript state dict carries
// beside the weights are dropped by ToOpenAI, so LoadCLIP validates.
func TestOpenAIExtras(t *testing.T) {
	ref := loadFixture(t, "fixtures/clip-tiny.openai.safetensors")
	s := &State{Source: "jit"}
	for _, n := range ref.Names() {
		p, _ := ref.Param(n)
		s.Set(p)
	}
	for _, n := range []string{"input_resolution", "context_length", "vocab_size", "transformer.resblocks.0.attn_mask"} {
		s.Set(&Param{Name: n, Shape: []int{}, DType: I64, Data: []float32{1}})
	}
	got, err := ToOpenAI(s)
	if err != nil {
		t.Fatal(err)
	}
	compareStates(t, got, ref, nil)
	if _, err := InferConfig(got); err != nil {
		t.Error(err)
	}
}

// TestCheckFinite: a NaN or an infinity in a named tensor is an error
// naming it; other tensors and absent names do not matter.
func TestCheckFinite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value float32
		want  string // "" for no error
	}{
		{"finite", 1.5, ""},
		{"nan", float32(math.NaN()), `tensor "w": element 1 of 3 is NaN`},
		{"inf", float32(math.Inf(-1)), `tensor "w": element 1 of 3 is -Inf`},
	} {
		s := NewState("m.safetensors")
		s.Set(&Param{Name: "w", Shape: []int{3}, Data: []float32{0, tc.value, 2}})
		s.Set(&Param{Name: "unused", Shape: []int{1}, Data: []float32{float32(math.NaN())}})
		err := s.CheckFinite([]string{"w", "absent"})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrNotFinite)):
			t.Errorf("%s: error %v, want one with %q wrapping ErrNotFinite", tc.name, err, tc.want)
		}
	}
}
