package builtin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/pretrain"
)

// minAccuracy is the least zero-shot accuracy the built-in model must reach
// on 500 of the embedded images (spread over the classes). MODEL.md gives
// its accuracy on the full test set; a broken embedding, tokenizer or
// preprocessing falls to chance (10%).
const minAccuracy = 0.5

func TestModelClassifiesSubset(t *testing.T) {
	m, err := Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	subset, _, err := Extract(dir)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := data.OpenFolder(subset, data.FolderOptions{Classes: data.CIFAR10Classes})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if ds.Len() != 2000 {
		t.Fatalf("%d embedded images, want 2000", ds.Len())
	}
	for c, n := range data.ClassCounts(ds) {
		if n != 200 {
			t.Errorf("class %s: %d images, want 200", data.CIFAR10Classes[c], n)
		}
	}
	set, err := pretrain.LoadImages(ds, m.Config.Vision.ImageSize, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := pretrain.ZeroShotAccuracy(context.Background(), m, Tokenizer(), data.CIFAR10Classes, data.CIFAR10Templates, set, 500)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("zero-shot accuracy on 500 embedded images: %.1f%%", 100*acc)
	if acc < minAccuracy {
		t.Errorf("accuracy %.1f%%, want at least %.0f%%", 100*acc, 100*minAccuracy)
	}
}

func TestExtract(t *testing.T) {
	dir := t.TempDir()
	subset, frost, err := Extract(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(subset)
	if err != nil || !bytes.Equal(b, CIFARSubset()) {
		t.Fatalf("extracted subset differs (%v)", err)
	}
	for name, want := range FrostFiles() {
		got, err := os.ReadFile(filepath.Join(frost, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: extracted file differs (%v)", name, err)
		}
	}
	// A damaged file is rewritten; an intact one is left alone.
	if err := os.WriteFile(subset, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(frost, "frost1.png"))
	if _, _, err := Extract(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(subset); !bytes.Equal(b, CIFARSubset()) {
		t.Error("a damaged subset was not rewritten")
	}
	if st2, _ := os.Stat(filepath.Join(frost, "frost1.png")); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("an intact overlay was rewritten")
	}
}

// TestJPEGs: n images of the embedded subset as JPEG bytes, all 2,000 when
// more are asked for.
func TestJPEGs(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{0, 0}, {3, 3}, {5000, 2000}} {
		imgs, err := JPEGs(tc.n)
		if err != nil || len(imgs) != tc.want {
			t.Fatalf("JPEGs(%d): %d images, %v; want %d", tc.n, len(imgs), err, tc.want)
		}
		for i, b := range imgs {
			if len(b) < 3 || b[0] != 0xff || b[1] != 0xd8 || b[2] != 0xff {
				t.Fatalf("JPEGs(%d)[%d] does not start with a JPEG marker", tc.n, i)
			}
		}
	}
}
