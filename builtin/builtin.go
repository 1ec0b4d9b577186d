package builtin

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// ModelName is the name that stands for the built-in model wherever a
// model path is taken (--model default).
const ModelName = "default"

// ModelFile is the file name of the embedded model.
const ModelFile = "clip-cifar10-small.safetensors.zst"

//go:embed clip-cifar10-small.safetensors.zst
var modelBytes []byte

//go:embed cifar10-test-2000.tar.gz
var cifarSubset []byte

// CIFARSubsetFile is the file name of the embedded evaluation subset.
const CIFARSubsetFile = "cifar10-test-2000.tar.gz"

//go:embed frost/frost1.png
var frost1 []byte

//go:embed frost/frost2.png
var frost2 []byte

//go:embed frost/frost3.png
var frost3 []byte

//go:embed frost/frost4.jpg
var frost4 []byte

//go:embed frost/frost5.jpg
var frost5 []byte

// FrostFiles are the overlays of the frost corruption, by file name.
func FrostFiles() map[string][]byte {
	return map[string][]byte{"frost1.png": frost1, "frost2.png": frost2, "frost3.png": frost3, "frost4.jpg": frost4, "frost5.jpg": frost5}
}

// ModelBytes returns the embedded model file (zstd-compressed safetensors
// with OpenAI tensor names and the configuration in its metadata).
func ModelBytes() []byte { return modelBytes }

// init makes ModelName stand for Model wherever clip.Create takes a model.
func init() {
	if err := clip.RegisterModel(ModelName, Model); err != nil {
		panic(err) // another package took the name: a programming error
	}
}

// Model builds the built-in CLIP: a small ViT and text transformer trained
// from scratch on CIFAR-10 by package pretrain (see MODEL.md). Its text
// tower reads byte-level tokens (Tokenizer).
func Model(opt clip.Options) (*clip.Model, error) {
	s, cfg, err := weights.LoadCLIPBytes(ModelName+" model ("+ModelFile+")", modelBytes)
	if err != nil {
		return nil, err
	}
	return clip.New(s, cfg, opt)
}

// Tokenizer returns the tokenizer of the built-in model.
func Tokenizer() textenc.Tokenizer { return textenc.ByteTokenizer{} }

// CIFARSubset returns the embedded evaluation set: 2,000 CIFAR-10 test
// images, 200 per class, chosen with a seeded shuffle
// (internal/mksubset), as the original JPEG bytes of the test set's
// image-folder copy, in a .tar.gz of test/<class>/<file>.jpg.
func CIFARSubset() []byte { return cifarSubset }

// JPEGs returns the first n images of CIFARSubset (all of them when n
// exceeds 2,000) as JPEG bytes, in archive order: test inputs for a server
// or a benchmark that need real images and no file.
func JPEGs(n int) ([][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(cifarSubset))
	if err != nil {
		return nil, fmt.Errorf("builtin: %w", err)
	}
	tr := tar.NewReader(zr)
	var out [][]byte
	for len(out) < n {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("builtin: %w", err)
		}
		if !strings.HasSuffix(h.Name, ".jpg") {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("builtin: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

var extractMu sync.Mutex

// Extract writes the embedded evaluation data under dir, unless it is there
// already with the same contents, and returns the paths of the CIFAR-10
// subset and of the folder of frost overlays: what `subtta eval` takes as
// --data and --frost.
func Extract(dir string) (subset, frostDir string, err error) {
	extractMu.Lock()
	defer extractMu.Unlock()
	subset = filepath.Join(dir, CIFARSubsetFile)
	if frostDir, err = extractFrost(dir); err != nil {
		return "", "", err
	}
	if err := writeIfChanged(subset, cifarSubset); err != nil {
		return "", "", err
	}
	return subset, frostDir, nil
}

// ExtractFrost writes the embedded frost overlays into dir/frost, unless
// they are there already with the same contents, and returns that folder:
// what `subtta corrupt` and `eval` take as --frost for any clean set (the
// overlays are the upstream files, unchanged).
func ExtractFrost(dir string) (string, error) {
	extractMu.Lock()
	defer extractMu.Unlock()
	return extractFrost(dir)
}

// extractFrost is ExtractFrost, with extractMu held.
func extractFrost(dir string) (string, error) {
	frostDir := filepath.Join(dir, "frost")
	if err := os.MkdirAll(frostDir, 0o755); err != nil {
		return "", fmt.Errorf("builtin: %w", err)
	}
	for name, b := range FrostFiles() {
		if err := writeIfChanged(filepath.Join(frostDir, name), b); err != nil {
			return "", err
		}
	}
	return frostDir, nil
}

// writeIfChanged writes b to path through a temporary file and a rename,
// unless path already holds exactly b.
func writeIfChanged(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := atomicfile.Write(path, b); err != nil {
		return fmt.Errorf("builtin: %w", err)
	}
	return nil
}

// ModelSHA256 returns the hex SHA-256 of the embedded model file, which
// identifies the built-in model in results.
func ModelSHA256() string {
	h := sha256.Sum256(modelBytes)
	return hex.EncodeToString(h[:])
}
