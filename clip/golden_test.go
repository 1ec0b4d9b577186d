package clip

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/textenc"
)

// TestReadmeExampleViTB32 reproduces OpenAI's README example with the real
// ViT-B/32 weights when $SUBTTA_CLIP_VITB32 names them (a checkpoint file or
// a Hugging Face folder): CLIP.png against "a diagram", "a dog", "a cat"
// gives [0.9928, 0.0042, 0.0030]. The README preprocesses the RGBA image
// without converting it to RGB first, hence PremultipliedAlpha.
func TestReadmeExampleViTB32(t *testing.T) {
	path := os.Getenv("SUBTTA_CLIP_VITB32")
	if path == "" {
		t.Skip("SUBTTA_CLIP_VITB32 is not set: no pretrained ViT-B/32 weights to check the README probabilities")
	}
	m, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	vocab := fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "vocab.json")); err == nil {
			vocab = path
		}
	}
	tok, err := textenc.LoadBPETokenizer(vocab)
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{"a diagram", "a dog", "a cat"}
	head, err := m.ZeroShotHead(tok, labels, []string{"{}"})
	if err != nil {
		t.Fatal(err)
	}
	pre, err := data.NewPreprocessor(data.PreprocessConfig{Size: m.Config.Vision.ImageSize, PremultipliedAlpha: true})
	if err != nil {
		t.Fatal(err)
	}
	img, err := data.ReadImage(fixture.Path(t, "assets/clip/CLIP.png"))
	if err != nil {
		t.Fatal(err)
	}
	px, err := pre.TransformImage(nil, img)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.EncodeImage(px, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := Softmax(m.Classify(head, f))[0]
	want := []float64{0.9928, 0.0042, 0.0030} // published in openai/CLIP's README (4 digits)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 0.001 {
			t.Errorf("%s: probability %.4f, README %.4f", labels[i], got[i], want[i])
		}
	}
	t.Logf("probabilities %v (README %v)", got, want)
}
