package data

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// member is one file of a test archive or tree.
type member struct {
	name string
	data []byte
}

// writeTar writes members to a .tar (gzipped if gz) at p, adding the
// parent folders' entries as tar does.
func writeTar(t *testing.T, p string, gz bool, members []member) {
	t.Helper()
	var entries []tarEntry
	dirs := map[string]bool{}
	for _, m := range members {
		for d := filepath.Dir(m.name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			entries = append(entries, tarEntry{tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}, nil})
		}
		entries = append(entries, tarEntry{tar.Header{Name: m.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(m.data))}, m.data})
	}
	writeTarEntries(t, p, gz, entries)
}

// tarEntry is one member of a test archive as written: its header and,
// for a regular file, its bytes.
type tarEntry struct {
	h    tar.Header
	data []byte
}

// writeTarEntries writes entries to a .tar (gzipped if gz) at p.
func writeTarEntries(t *testing.T, p string, gz bool, entries []tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := tw.WriteHeader(&e.h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if gz {
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		zw.Write(b)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		b = zb.Bytes()
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeTree writes members as files under dir.
func writeTree(t *testing.T, dir string, members []member) {
	t.Helper()
	for _, m := range members {
		p := filepath.Join(dir, filepath.FromSlash(m.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, m.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// pngOf encodes a w×h image whose every pixel is (r, g, b), except pixel
// (0, 0), which is (x, y, 7) with x, y = w, h: enough to tell images and
// orientations apart.
func pngOf(t testing.TB, w, h int, r, g, b uint8) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.NRGBA{r, g, b, 255})
		}
	}
	img.Set(0, 0, color.NRGBA{uint8(w), uint8(h), 7, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// mustErr fails unless err is non-nil and its message holds every want.
func mustErr(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not contain %q", err, w)
		}
	}
}

// failingDataset fails to read image 3.
type failingDataset struct{ n int }

func (d failingDataset) Name() string      { return "failing" }
func (d failingDataset) Len() int          { return d.n }
func (d failingDataset) Classes() []string { return []string{"a", "b"} }
func (d failingDataset) Label(i int) int   { return i % 2 }
func (d failingDataset) Close() error      { return nil }
func (d failingDataset) Item(i int) (*RGB, int, error) {
	if i == 3 {
		return nil, 0, errors.New("image 3 is unreadable")
	}
	m := NewRGB(1, 1)
	m.Pix[0] = uint8(i)
	return m, i % 2, nil
}

func TestReadBatch(t *testing.T) {
	ds := failingDataset{n: 40}
	idx := []int{9, 0, 31, 4, 17, 8, 2}
	for _, workers := range []int{1, 3, 0} {
		imgs, labels, err := ReadBatch(ds, idx, workers)
		if err != nil {
			t.Fatalf("workers=%d: %v", workers, err)
		}
		for k, i := range idx {
			if int(imgs[k].Pix[0]) != i || labels[k] != i%2 {
				t.Errorf("workers=%d: batch item %d is image %d label %d, want image %d label %d", workers, k, imgs[k].Pix[0], labels[k], i, i%2)
			}
		}
		if _, _, err := ReadBatch(ds, []int{5, 3, 7}, workers); err == nil || !strings.Contains(err.Error(), "image 3") {
			t.Errorf("workers=%d: error %v, want the failure of image 3", workers, err)
		}
	}
	if got := ClassCounts(ds); !slices.Equal(got, []int{20, 20}) {
		t.Errorf("ClassCounts = %v, want [20 20]", got)
	}
}

// fixtureAsset returns the path of a shared asset (see fixture.Path).
func fixtureAsset(t *testing.T, rel string) string {
	t.Helper()
	return fixture.Path(t, rel)
}
