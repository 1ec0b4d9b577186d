package clip

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// Errors of Create and Spec, for errors.Is.
var (
	// ErrNoModel: Spec.Model is empty.
	ErrNoModel = errors.New("clip: no model given")
	// ErrUnknownModel: Spec.Model is neither a registered name
	// (RegisterModel) nor a checkpoint found on disk.
	ErrUnknownModel = errors.New("clip: unknown model")
	// ErrArchTwice: Spec.Arch and Spec.ModelConfig are both set.
	ErrArchTwice = errors.New("clip: Arch and ModelConfig both give the architecture: give one")
	// ErrNamedArch: an architecture is given for a registered model, which
	// has its own.
	ErrNamedArch = errors.New("clip: a registered model has its own architecture: Arch and ModelConfig need a checkpoint")
	// ErrNoVocab: the model's text tower needs the CLIP BPE vocabulary and
	// neither Spec.Vocab, the model's folder nor Spec.FindVocab gives one.
	ErrNoVocab = errors.New("clip: no CLIP vocabulary given")
	// ErrNameTaken: RegisterModel was called twice with one name.
	ErrNameTaken = errors.New("clip: model name registered twice")
)

// SpecError is an error of one field of a Spec (Field is its Go name,
// "Arch", "ModelConfig" or "Precision"): the value names nothing usable,
// or the model cannot take it.
type SpecError struct {
	Field string
	Err   error
}

func (e *SpecError) Error() string { return "clip: Spec." + e.Field + ": " + e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// Spec says which model Create builds, in the manner of open_clip's
// create_model_and_transforms and get_tokenizer: the checkpoint, its
// architecture when the checkpoint stores none, and where the tokenizer's
// vocabulary is.
type Spec struct {
	// Model is a checkpoint (.safetensors, .pt or a Hugging Face folder; see
	// Load) or the name of a registered model (RegisterModel), such as
	// package builtin's "default".
	Model string
	// Arch names the architecture among open_clip's (weights.Arch), and
	// ModelConfig is a file holding it (weights.ParseConfig): at most one,
	// for a checkpoint that stores none.
	Arch, ModelConfig string
	// Vocab is the CLIP BPE vocabulary (textenc.LoadBPETokenizer). When
	// empty, a text tower with the byte-level vocabulary gets
	// textenc.ByteTokenizer, and any other the vocabulary in the model's
	// folder or else the one FindVocab returns. Whichever is used must
	// fit the text tower (Spec.Tokenizer: ErrVocabDoesNotFit).
	Vocab string
	// FindVocab, if not nil, returns the path of a CLIP BPE vocabulary when
	// none of the above gives one (the command line reads $SUBTTA_VOCAB
	// there, then downloads one). It is called only then.
	FindVocab func() (string, error)
	// Float64 builds both towers in float64 (reference runs).
	Float64 bool
	// Precision is the arithmetic of both towers' linear layers in passes
	// without gradients (Model.SetPrecision); the zero value is
	// kernel.FP32. Create refuses a precision this CPU has no kernel for.
	Precision kernel.Precision
}

// Architecture returns the architecture s gives (Arch or ModelConfig), or
// nil when the checkpoint's own is to be used. It is the one place where
// both are read.
func (s Spec) Architecture() (*weights.CLIPConfig, error) {
	switch {
	case s.ModelConfig != "" && s.Arch != "":
		return nil, ErrArchTwice
	case s.Arch != "":
		a, err := weights.Arch(s.Arch)
		if err != nil {
			return nil, &SpecError{"Arch", err}
		}
		return a, nil
	case s.ModelConfig != "":
		b, err := os.ReadFile(s.ModelConfig)
		if err != nil {
			return nil, &SpecError{"ModelConfig", err}
		}
		a, err := weights.ParseConfig(b)
		if err != nil {
			return nil, fmt.Errorf("clip: model config %s: %w", s.ModelConfig, err)
		}
		return a, nil
	}
	return nil, nil
}

// Bundle is what Create returns: the model, the tokenizer of its text
// tower and the preprocessor of its vision tower.
type Bundle struct {
	Model *Model
	// Preprocessor is the model's (Model.Preprocessor).
	Preprocessor *data.Preprocessor
	// Inferred reports that the checkpoint stores no architecture and none
	// was given: the head counts were read off the tensor shapes (width/64,
	// as OpenAI's models), which the caller may want to say.
	Inferred bool

	spec    Spec
	tokOnce sync.Once
	tok     textenc.Tokenizer
	tokErr  error
}

// Tokenizer returns the tokenizer of the model's text tower, found as
// Spec.Vocab says on the first call (which may download a vocabulary
// through Spec.FindVocab), the same one afterwards.
func (b *Bundle) Tokenizer() (textenc.Tokenizer, error) {
	b.tokOnce.Do(func() { b.tok, b.tokErr = b.spec.Tokenizer(b.Model) })
	return b.tok, b.tokErr
}

// Create builds the model s names, with its preprocessor; its tokenizer
// comes from Bundle.Tokenizer.
func Create(s Spec) (*Bundle, error) {
	if s.Model == "" {
		return nil, ErrNoModel
	}
	arch, err := s.Architecture()
	if err != nil {
		return nil, err
	}
	opt := Options{Float64: s.Float64, Config: arch, StoredWins: true}
	var m *Model
	if load, ok := registered(s.Model); ok {
		if arch != nil {
			return nil, ErrNamedArch
		}
		if m, err = load(opt); err != nil {
			return nil, fmt.Errorf("clip: model %s: %w", s.Model, err)
		}
	} else if _, serr := os.Stat(s.Model); errors.Is(serr, fs.ErrNotExist) {
		// Neither: a name whose package is not imported (the built-in
		// model registers itself as "default" in package builtin) reads
		// as a missing file otherwise.
		return nil, fmt.Errorf("%w %q: no checkpoint at that path, and no model registered under that name (registered: %s; package builtin registers the built-in model as \"default\" when imported)",
			ErrUnknownModel, s.Model, registeredList())
	} else if m, err = Load(s.Model, opt); errors.Is(err, ErrArchDiffers) {
		field := "Arch"
		if s.ModelConfig != "" {
			field = "ModelConfig"
		}
		return nil, &SpecError{field, err}
	} else if err != nil {
		return nil, err
	}
	pre, err := m.Preprocessor()
	if err != nil {
		return nil, fmt.Errorf("clip: %s: %w", s.Model, err)
	}
	if s.Precision != kernel.FP32 {
		if err := m.SetPrecision(s.Precision); err != nil {
			return nil, &SpecError{"Precision", err}
		}
	}
	return &Bundle{
		Model:        m,
		Preprocessor: pre,
		Inferred:     m.Config.Inferred && arch == nil,
		spec:         s,
	}, nil
}

// Preprocessor returns the transform of m's vision tower: CLIP's resize,
// center crop and normalisation with CLIP's mean and std at the tower's
// image size (open_clip's preprocess_val).
func (m *Model) Preprocessor() (*data.Preprocessor, error) {
	return data.NewPreprocessor(data.PreprocessConfig{Size: m.Config.Vision.ImageSize})
}

// Tokenizer returns the tokenizer of m's text tower as s says (see
// Spec.Vocab): for a model loaded by other means than Create.
func (s Spec) Tokenizer(m *Model) (textenc.Tokenizer, error) {
	if s.Vocab != "" {
		return fitVocab(m, s.Vocab)
	}
	if m.Config.Text.VocabSize == textenc.ByteVocabSize {
		return textenc.ByteTokenizer{}, nil
	}
	if hasVocab(s.Model) {
		return fitVocab(m, s.Model)
	}
	if s.FindVocab == nil {
		return nil, ErrNoVocab
	}
	path, err := s.FindVocab()
	if err != nil {
		return nil, err
	}
	return fitVocab(m, path)
}

// ErrVocabDoesNotFit: the vocabulary has ids the model's text tower has no
// token embedding for (the OpenAI vocabulary with a byte-level model);
// the first text holding one would fail, perhaps after the images.
var ErrVocabDoesNotFit = errors.New("the vocabulary does not fit the model's text tower")

// fitVocab loads the BPE vocabulary at path and checks that m's text tower
// takes every id of it (ErrVocabDoesNotFit).
func fitVocab(m *Model, path string) (textenc.Tokenizer, error) {
	tok, err := textenc.LoadBPETokenizer(path)
	if err != nil {
		return nil, err
	}
	if n, have := tok.VocabSize(), m.Config.Text.VocabSize; n > have {
		tower := fmt.Sprintf("the model's text tower %d", have)
		if have == textenc.ByteVocabSize {
			tower = fmt.Sprintf("the model's text tower takes byte-level tokens (vocabulary %d) and no BPE vocabulary", have)
		}
		return nil, fmt.Errorf("%w: %s has %d entries, %s", ErrVocabDoesNotFit, path, n, tower)
	}
	return tok, nil
}

// hasVocab reports whether dir is a folder holding a vocabulary file that
// textenc.LoadBPETokenizer reads.
func hasVocab(dir string) bool {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return false
	}
	for _, name := range []string{textenc.OpenAIVocabFile, textenc.HFVocabFile, textenc.HFTokenizerFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

var (
	registryMu sync.RWMutex
	registry   = map[string]func(Options) (*Model, error){}
)

// RegisterModel makes name stand for the model load builds wherever Create
// takes a model: how a model that is not a file (package builtin's embedded
// one, registered as "default") is named without this package importing
// it. A name registered twice is an error (ErrNameTaken).
func RegisterModel(name string, load func(Options) (*Model, error)) error {
	if name == "" || load == nil {
		return fmt.Errorf("clip: RegisterModel: empty name or nil loader")
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, ok := registry[name]; ok {
		return fmt.Errorf("%w: %q", ErrNameTaken, name)
	}
	registry[name] = load
	return nil
}

// RegisteredModels returns the names given to RegisterModel, sorted.
func RegisteredModels() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// registeredList is RegisteredModels for a message: "none" when empty.
func registeredList() string {
	if names := RegisteredModels(); len(names) > 0 {
		return strings.Join(names, ", ")
	}
	return "none"
}

func registered(name string) (func(Options) (*Model, error), bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	load, ok := registry[name]
	return load, ok
}
