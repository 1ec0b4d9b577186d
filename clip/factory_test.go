package clip

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// TestSpecArchitecture: the architecture comes from Arch or ModelConfig,
// at most one, and each kind of mistake has its own error.
func TestSpecArchitecture(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	b, err := json.Marshal(vitB32Config(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, b, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"nothing": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		spec      Spec
		heads     int    // vision heads of the architecture; 0: none
		is        error  // errors.Is, when not nil
		field     string // SpecError.Field, when not empty
		otherwise bool   // another error
	}{
		{name: "none", spec: Spec{}},
		{name: "arch", spec: Spec{Arch: "ViT-H-14"}, heads: 16},
		{name: "config file", spec: Spec{ModelConfig: good}, heads: 12},
		{name: "both", spec: Spec{Arch: "ViT-B-32", ModelConfig: good}, is: ErrArchTwice},
		{name: "unknown arch", spec: Spec{Arch: "RN50"}, field: "Arch"},
		{name: "missing file", spec: Spec{ModelConfig: filepath.Join(dir, "none.json")}, field: "ModelConfig", is: os.ErrNotExist},
		{name: "unreadable config", spec: Spec{ModelConfig: bad}, otherwise: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tc.spec.Architecture()
			wantErr := tc.is != nil || tc.field != "" || tc.otherwise
			if wantErr != (err != nil) {
				t.Fatalf("Architecture() = %+v, %v", a, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v, want %v", err, tc.is)
			}
			var se *SpecError
			if tc.field != "" && (!errors.As(err, &se) || se.Field != tc.field) {
				t.Errorf("error %v, want a SpecError of %s", err, tc.field)
			}
			if tc.otherwise && errors.As(err, &se) {
				t.Errorf("error %v is a SpecError", err)
			}
			switch {
			case tc.heads == 0 && a != nil:
				t.Errorf("architecture %+v, want none", a)
			case tc.heads != 0 && (a == nil || a.Vision.Heads != tc.heads):
				t.Errorf("architecture %+v, want %d vision heads", a, tc.heads)
			}
		})
	}
}

// vitB32Config is open_clip's ViT-B-32, as a test's config file holds it.
func vitB32Config(t *testing.T) *weights.CLIPConfig {
	c, err := weights.Arch("ViT-B-32")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCreate builds the tiny fixture model from a checkpoint that stores no
// architecture: inferred without one, given by ModelConfig, and with the
// preprocessor of its image size.
func TestCreate(t *testing.T) {
	s, _, err := weights.LoadCLIP(fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ref := tiny(t)
	dir := t.TempDir()
	bare := filepath.Join(dir, "bare.safetensors")
	if err := weights.WriteFile(bare, s.Tensors(weights.F32), nil); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.json")
	cj, err := json.Marshal(ref.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, cj, 0o644); err != nil {
		t.Fatal(err)
	}

	b, err := Create(Spec{Model: bare})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Inferred {
		t.Error("no stored architecture, none given: Inferred is false")
	}
	b, err = Create(Spec{Model: bare, ModelConfig: cfgPath})
	if err != nil {
		t.Fatal(err)
	}
	if b.Inferred {
		t.Error("architecture given: Inferred is true")
	}
	size := ref.Config.Vision.ImageSize
	if got := b.Preprocessor.OutputLen(); got != 3*size*size {
		t.Errorf("preprocessor output %d values, want 3·%d·%d", got, size, size)
	}
	if _, err := Create(Spec{}); !errors.Is(err, ErrNoModel) {
		t.Errorf("no model: %v, want ErrNoModel", err)
	}
	if _, err := Create(Spec{Model: filepath.Join(dir, "absent.safetensors")}); err == nil {
		t.Error("a missing checkpoint was accepted")
	}
	if _, err := Create(Spec{Model: bare, Arch: "ViT-B-32"}); err == nil {
		t.Error("an architecture that does not fit the tensors was accepted")
	}
}

// TestRegisterModel: a registered name stands for its model in Create, has
// no architecture of the caller's, and cannot be taken twice.
func TestRegisterModel(t *testing.T) {
	const name = "clip-test-tiny"
	path := fixture.Path(t, "fixtures/clip-tiny.openai.safetensors")
	calls := 0
	load := func(opt Options) (*Model, error) {
		calls++
		return Load(path, opt)
	}
	if err := RegisterModel(name, load); err != nil {
		t.Fatal(err)
	}
	if err := RegisterModel(name, load); !errors.Is(err, ErrNameTaken) {
		t.Errorf("second registration: %v, want ErrNameTaken", err)
	}
	if err := RegisterModel("", load); err == nil {
		t.Error("an empty name was registered")
	}
	if !slices.Contains(RegisteredModels(), name) {
		t.Errorf("RegisteredModels() = %q lacks %q", RegisteredModels(), name)
	}
	b, err := Create(Spec{Model: name})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || b.Model.EmbedDim() != tiny(t).EmbedDim() {
		t.Errorf("%d loads, embedding width %d", calls, b.Model.EmbedDim())
	}
	if _, err := Create(Spec{Model: name, Arch: "ViT-B-32"}); !errors.Is(err, ErrNamedArch) {
		t.Errorf("architecture for a registered model: %v, want ErrNamedArch", err)
	}
}

// TestSpecTokenizer walks the vocabulary's search order: Vocab, the
// byte-level tokenizer of byte-level models, the model's folder, FindVocab
// (called once per Bundle, and only when needed).
func TestSpecTokenizer(t *testing.T) {
	bpe := fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")
	m := tiny(t)
	byteModel := &Model{Config: &weights.CLIPConfig{Text: weights.TextConfig{VocabSize: textenc.ByteVocabSize}}}
	hfDir := t.TempDir()
	for _, f := range []string{textenc.HFVocabFile, textenc.HFMergesFile} {
		raw, err := os.ReadFile(fixture.Path(t, "assets/clip/"+f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hfDir, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	find := func() (string, error) { calls++; return bpe, nil }
	failing := errors.New("no network")
	for _, tc := range []struct {
		name  string
		spec  Spec
		m     *Model
		bpe   bool  // a BPE tokenizer (else the byte-level one)
		calls int   // FindVocab calls
		err   error // errors.Is
	}{
		{"vocab given", Spec{Vocab: bpe, FindVocab: find}, m, true, 0, nil},
		{"vocab given to a byte-level model", Spec{Vocab: bpe}, byteModel, false, 0, ErrVocabDoesNotFit},
		{"byte-level model", Spec{FindVocab: find}, byteModel, false, 0, nil},
		{"model folder", Spec{Model: hfDir, FindVocab: find}, m, true, 0, nil},
		{"found", Spec{Model: bpe, FindVocab: find}, m, true, 1, nil},
		{"not found", Spec{FindVocab: func() (string, error) { return "", failing }}, m, false, 0, failing},
		{"nowhere", Spec{}, m, false, 0, ErrNoVocab},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls = 0
			tok, err := tc.spec.Tokenizer(tc.m)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Errorf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, isBPE := tok.(*textenc.BPETokenizer)
			_, isByte := tok.(textenc.ByteTokenizer)
			if isBPE != tc.bpe || isByte == tc.bpe || calls != tc.calls {
				t.Errorf("tokenizer %T after %d FindVocab calls; want BPE %v, %d calls", tok, calls, tc.bpe, tc.calls)
			}
		})
	}

	// A Bundle resolves its tokenizer once.
	calls = 0
	b := &Bundle{Model: m, spec: Spec{FindVocab: find}}
	t1, err1 := b.Tokenizer()
	t2, err2 := b.Tokenizer()
	if err1 != nil || err2 != nil || t1 != t2 || calls != 1 {
		t.Errorf("Bundle.Tokenizer twice: %v, %v, same %v, %d FindVocab calls", err1, err2, t1 == t2, calls)
	}
}

// TestCreateStoredArch: an architecture given for a checkpoint that stores
// one must be that one (ErrArchDiffers, a SpecError of the field that gave
// it); for a checkpoint that stores none it is the architecture.
func TestCreateStoredArch(t *testing.T) {
	const rel = "fixtures/clip-tiny.openai.safetensors"
	stored := fixture.Path(t, rel)
	s, cfg, err := weights.LoadCLIP(stored)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Inferred {
		t.Skipf("%s stores no architecture", rel)
	}
	dir := t.TempDir()
	bare := filepath.Join(dir, "bare.safetensors")
	if err := weights.WriteFile(bare, s.Tensors(weights.F32), nil); err != nil {
		t.Fatal(err)
	}
	write := func(name string, c weights.CLIPConfig) string {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	same := write("same.json", *cfg)
	// Another head count the tensors allow: the tensors cannot tell it
	// from the stored one, only the stored configuration can.
	other := *cfg
	other.Vision.Heads = 1
	if cfg.Vision.Heads == 1 {
		other.Vision.Heads = cfg.Vision.Width
	}
	otherPath := write("other.json", other)
	for _, tc := range []struct {
		name  string
		spec  Spec
		heads int   // vision heads built
		is    error // the error, when not nil
	}{
		{"stored, none given", Spec{Model: stored}, cfg.Vision.Heads, nil},
		{"stored, the same given", Spec{Model: stored, ModelConfig: same}, cfg.Vision.Heads, nil},
		{"stored, another given", Spec{Model: stored, ModelConfig: otherPath}, 0, ErrArchDiffers},
		{"none stored, another given", Spec{Model: bare, ModelConfig: otherPath}, other.Vision.Heads, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Create(tc.spec)
			if tc.is != nil {
				var se *SpecError
				if !errors.Is(err, tc.is) || !errors.As(err, &se) || se.Field != "ModelConfig" {
					t.Fatalf("Create: %v, want %v in a SpecError of ModelConfig", err, tc.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Model.Config.Vision.Heads; got != tc.heads {
				t.Errorf("%d vision heads, want %d", got, tc.heads)
			}
		})
	}
}

// TestLogitScaleOverflow: a logit_scale whose exponential overflows (every
// probability would be NaN) is refused at load; a large finite one is not.
func TestLogitScaleOverflow(t *testing.T) {
	const rel = "fixtures/clip-tiny.openai.safetensors"
	s, cfg, err := weights.LoadCLIP(fixture.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.HasLogitScale {
		t.Skipf("%s has no logit_scale", rel)
	}
	for _, tc := range []struct {
		value float32
		ok    bool
	}{{80, true}, {1000, false}} {
		p, err := s.Param("logit_scale")
		if err != nil {
			t.Fatal(err)
		}
		p.Data[0] = tc.value
		path := filepath.Join(t.TempDir(), "m.safetensors")
		if err := weights.WriteFile(path, s.Tensors(weights.F32), nil); err != nil {
			t.Fatal(err)
		}
		_, err = Load(path, Options{Config: cfg})
		if (err == nil) != tc.ok {
			t.Errorf("logit_scale %g: Load error %v, want error: %v", tc.value, err, !tc.ok)
		}
	}
}

// TestCreateUnknownModel: a name that is neither a file nor registered is
// ErrUnknownModel, saying what is registered and how the built-in model
// gets registered (a missing file's error said only "stat").
func TestCreateUnknownModel(t *testing.T) {
	_, err := Create(Spec{Model: "no-such-model"})
	if !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), `"no-such-model"`) || !strings.Contains(err.Error(), "package builtin") {
		t.Errorf("err = %v", err)
	}
}

// TestSpecTokenizerFits: a vocabulary with more ids than the text tower
// has token embeddings is ErrVocabDoesNotFit, naming it and both sizes,
// for every source (here Spec.Vocab and FindVocab); one that fits loads.
func TestSpecTokenizerFits(t *testing.T) {
	vocab := fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")
	for _, tc := range []struct {
		name      string
		towerSize int
		spec      Spec
		want      string
	}{
		{"byte-level model, --vocab", textenc.ByteVocabSize, Spec{Vocab: vocab}, "byte-level tokens (vocabulary 259)"},
		{"smaller tower, found", 1000, Spec{Model: t.TempDir(), FindVocab: func() (string, error) { return vocab, nil }}, "text tower 1000"},
		{"CLIP's tower", 49408, Spec{Vocab: vocab}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Model{Config: &weights.CLIPConfig{Text: weights.TextConfig{VocabSize: tc.towerSize}}}
			tok, err := tc.spec.Tokenizer(m)
			switch {
			case tc.want == "" && (err != nil || tok.VocabSize() != 49408):
				t.Errorf("err = %v", err)
			case tc.want != "" && (!errors.Is(err, ErrVocabDoesNotFit) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), vocab+" has 49408 entries")):
				t.Errorf("err = %v, want ErrVocabDoesNotFit with %q", err, tc.want)
			}
		})
	}
}
