package clip

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// Forward tolerance: 1e-5 relative to the tensor's max (fixtures' bound).
const tol = 1e-5

func tiny(t *testing.T) *Model {
	t.Helper()
	const rel = "fixtures/clip-tiny.openai.safetensors"
	m, err := Load(fixture.Path(t, rel), Options{Config: fixturefile.Config(t, rel)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLogitsMatchPyTorch: model(pixel_values, CIFAR-10 prompts) gives
// logits_per_image; the prompt rows are listed in forward.json.
func TestLogitsMatchPyTorch(t *testing.T) {
	m := tiny(t)
	ref, err := weights.Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	var meta struct {
		Rows []int `json:"cifar10_prompt_rows"`
	}
	raw, err := os.ReadFile(fixture.Path(t, "fixtures/forward.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	pre, err := weights.Open(fixture.Path(t, "fixtures/preprocess.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	px, shape, err := pre.Float32("pixel_values")
	if err != nil {
		t.Fatal(err)
	}
	ids, tshape, err := ref.Int64("text_tokens")
	if err != nil {
		t.Fatal(err)
	}
	var tokens [][]int
	for _, r := range meta.Rows {
		seq := make([]int, tshape[1])
		for j := range seq {
			seq[j] = int(ids[r*tshape[1]+j])
		}
		tokens = append(tokens, seq)
	}
	img, err := m.EncodeImage(px, shape[0])
	if err != nil {
		t.Fatal(err)
	}
	txt, err := m.EncodeText(tokens)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := ref.Float32("logits_per_image")
	if err != nil {
		t.Fatal(err)
	}
	fixture.CheckRelErr(t, "logits_per_image", m.Logits(img, txt).Value().Data().F32(), want, tol)
}

// TestZeroShotHeadMatchesReference builds the CIFAR-100 head of the SubTTA
// fixture (its class names and template from subtta.json) and compares it
// with text.T.
func TestZeroShotHeadMatchesReference(t *testing.T) {
	m := tiny(t)
	var meta struct {
		Template string   `json:"prompt_template"`
		Classes  []string `json:"classnames"`
	}
	raw, err := os.ReadFile(fixture.Path(t, "fixtures/subtta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	tok, err := textenc.LoadBPETokenizer(fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz"))
	if err != nil {
		t.Fatal(err)
	}
	head, err := m.ZeroShotHead(tok, meta.Classes, []string{meta.Template})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := weights.Open(fixture.Path(t, "fixtures/subtta.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want, _, err := ref.Float32("text.T")
	if err != nil {
		t.Fatal(err)
	}
	fixture.CheckRelErr(t, "text.T", head.Weights.Data().F32(), want, tol)
	w, err := m.ZeroShotWeights(tok, meta.Classes, []string{meta.Template})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.Data().F32(), head.Weights.Data().F32()) {
		t.Error("ZeroShotWeights differs from ZeroShotHead's weights")
	}
	if _, err := m.ZeroShotHead(tok, meta.Classes, []string{"no placeholder"}); err == nil {
		t.Error("a template without {} was accepted")
	}
}

// TestZeroShotHeadRefusesNoTokenizer: a nil tokenizer is an error, not a
// panic at the first prompt.
func TestZeroShotHeadRefusesNoTokenizer(t *testing.T) {
	var m *Model // the check comes before the model is used
	if _, err := m.ZeroShotHead(nil, []string{"cat", "dog"}, []string{"a {}"}); err == nil || !strings.Contains(err.Error(), "no tokenizer") {
		t.Errorf("err = %v", err)
	}
}
