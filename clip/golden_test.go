package clip

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/textenc"
)

// readmeGolden is the README example of assets/clip/GOLDEN_VALUES.md: the
// sha256 of the image, the texts and the published probabilities.
type readmeGolden struct {
	sha256 string
	texts  []string
	probs  []float64
}

// loadReadmeGolden parses the "## README.md (CLIP.png, sha256 …)" section:
// a "texts [...]" line (JSON) and a "[[p p p]]" line.
func loadReadmeGolden(t *testing.T) readmeGolden {
	t.Helper()
	p := fixture.Path(t, "assets/clip/GOLDEN_VALUES.md")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := regexp.MustCompile(`^## README\.md \(CLIP\.png, sha256 ([0-9a-f]{64})\)`)
	var g readmeGolden
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		switch {
		case head.MatchString(line):
			g.sha256, in = head.FindStringSubmatch(line)[1], true
		case strings.HasPrefix(line, "## "):
			in = false
		case in && strings.HasPrefix(line, "texts "):
			list := strings.TrimPrefix(line, "texts ")
			if err := json.Unmarshal([]byte(list[:strings.IndexByte(list, ']')+1]), &g.texts); err != nil {
				t.Fatalf("%s: texts: %v", p, err)
			}
		case in && strings.HasPrefix(line, "[["):
			for _, v := range strings.Fields(strings.Trim(line, "[]")) {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: probabilities: %v", p, err)
				}
				g.probs = append(g.probs, x)
			}
		}
	}
	if g.sha256 == "" || len(g.texts) == 0 || len(g.probs) != len(g.texts) {
		t.Fatalf("%s: no README example (sha256 %q, %d texts, %d probabilities)", p, g.sha256, len(g.texts), len(g.probs))
	}
	return g
}

// TestReadmeExampleViTB32 reproduces OpenAI's README example with the real
// ViT-B/32 weights when $SUBTTA_CLIP_VITB32 names them (a checkpoint file or
// a Hugging Face folder): CLIP.png against the texts of GOLDEN_VALUES.md
// ("a diagram", "a dog", "a cat") gives its probabilities ([0.9928, 0.0042,
// 0.0030]). The README preprocesses the RGBA image without converting it to
// RGB first, hence PremultipliedAlpha.
func TestReadmeExampleViTB32(t *testing.T) {
	golden := loadReadmeGolden(t)
	imgPath := fixture.Path(t, "assets/clip/CLIP.png")
	b, err := os.ReadFile(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != golden.sha256 {
		t.Skipf("%s is not the README's image (sha256 %x, GOLDEN_VALUES.md names %s): its probabilities do not apply", imgPath, sum, golden.sha256)
	}
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
	labels := golden.texts
	head, err := m.ZeroShotHead(tok, labels, []string{"{}"})
	if err != nil {
		t.Fatal(err)
	}
	pre, err := data.NewPreprocessor(data.PreprocessConfig{Size: m.Config.Vision.ImageSize, PremultipliedAlpha: true})
	if err != nil {
		t.Fatal(err)
	}
	img, err := data.ReadImage(imgPath)
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
	want := golden.probs // published in openai/CLIP's README
	for i := range want {
		if math.Abs(got[i]-want[i]) > 0.001 {
			t.Errorf("%s: probability %.4f, README %.4f", labels[i], got[i], want[i])
		}
	}
	t.Logf("probabilities %v (README %v)", got, want)
}
