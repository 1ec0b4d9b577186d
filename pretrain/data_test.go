package pretrain

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/data"
)

// pngBytes is a w×w PNG.
func pngBytes(t *testing.T, w int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, w, w))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sliceDataset is a data.Dataset of images in memory, which names none.
type sliceDataset []*data.RGB

func (s sliceDataset) Name() string                       { return "mem" }
func (s sliceDataset) Len() int                           { return len(s) }
func (s sliceDataset) Classes() []string                  { return []string{"a", "b"} }
func (s sliceDataset) Label(i int) int                    { return i % 2 }
func (s sliceDataset) Item(i int) (*data.RGB, int, error) { return s[i], i % 2, nil }
func (s sliceDataset) Close() error                       { return nil }

// TestLoadImagesNamesTheFile: an image of the wrong size is named by
// where it is read from (the file in a folder, the member of an archive),
// not by its index; a set that names no files by its place in the set.
func TestLoadImagesNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{"test/cat/a.png": pngBytes(t, 8), "test/cat/big.png": pngBytes(t, 16), "test/dog/b.png": pngBytes(t, 8)}
	var tb bytes.Buffer
	gz := gzip.NewWriter(&tb)
	tw := tar.NewWriter(gz)
	for _, name := range []string{"test/cat/a.png", "test/cat/big.png", "test/dog/b.png"} {
		p := filepath.Join(dir, "tree", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[name]))})
		tw.Write(files[name])
	}
	tw.Close()
	gz.Close()
	archive := filepath.Join(dir, "tree.tar.gz")
	if err := os.WriteFile(archive, tb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(p string) data.Dataset {
		ds, err := data.OpenFolder(p, data.FolderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	small := &data.RGB{W: 8, H: 8, Pix: make([]uint8, 3*64)}
	for _, tc := range []struct {
		name string
		ds   data.Dataset
		want string
	}{
		{"folder", open(filepath.Join(dir, "tree")), filepath.Join(dir, "tree", "test", "cat", "big.png") + " is 16×16, want 8×8"},
		{"archive", open(archive), archive + ":test/cat/big.png is 16×16, want 8×8"},
		{"no names", sliceDataset{small, small, {W: 4, H: 8, Pix: make([]uint8, 3*32)}}, "mem: image 3 of 3 is 4×8, want 8×8"},
	} {
		_, err := LoadImages(tc.ds, 8, 1, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
		tc.ds.Close()
	}

	// Decoding stops when the context ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := LoadImagesContext(ctx, sliceDataset{small, small}, 8, 1, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("decoding with the context ended: %v, want %v", err, context.Canceled)
	}
}
