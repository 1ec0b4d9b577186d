package jpegdec

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// same reports how img, from Decode, differs from want, from image/jpeg,
// or "" if it does not: type, bounds, subsampling, strides and every
// sample of the planes (padding included).
func same(img, want image.Image) string {
	switch w := want.(type) {
	case *image.Gray:
		g, ok := img.(*image.Gray)
		if !ok {
			return fmt.Sprintf("got %T, want %T", img, want)
		}
		if g.Rect != w.Rect || g.Stride != w.Stride {
			return fmt.Sprintf("got rect %v stride %d, want %v %d", g.Rect, g.Stride, w.Rect, w.Stride)
		}
		if !bytes.Equal(g.Pix, w.Pix) {
			return "grey samples differ" + firstDiff(g.Pix, w.Pix)
		}
	case *image.YCbCr:
		y, ok := img.(*image.YCbCr)
		if !ok {
			return fmt.Sprintf("got %T, want %T", img, want)
		}
		if y.Rect != w.Rect || y.SubsampleRatio != w.SubsampleRatio || y.YStride != w.YStride || y.CStride != w.CStride {
			return fmt.Sprintf("got rect %v ratio %v strides %d %d, want %v %v %d %d",
				y.Rect, y.SubsampleRatio, y.YStride, y.CStride, w.Rect, w.SubsampleRatio, w.YStride, w.CStride)
		}
		for _, p := range []struct {
			name string
			a, b []uint8
		}{{"Y", y.Y, w.Y}, {"Cb", y.Cb, w.Cb}, {"Cr", y.Cr, w.Cr}} {
			if !bytes.Equal(p.a, p.b) {
				return p.name + " samples differ" + firstDiff(p.a, p.b)
			}
		}
	default:
		return fmt.Sprintf("image/jpeg gave %T, which Decode never returns", want)
	}
	return ""
}

func firstDiff(a, b []uint8) string {
	if len(a) != len(b) {
		return fmt.Sprintf(" (lengths %d, %d)", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf(" (first at %d: %d, want %d)", i, a[i], b[i])
		}
	}
	return ""
}

// check decodes b with both decoders. It fails the test if Decode
// succeeds where image/jpeg fails or gives a different image, or if Decode
// panicked, and reports whether Decode succeeded.
func check(t testing.TB, name string, b []byte) bool {
	t.Helper()
	img, err := Decode(b)
	if errors.Is(err, errInternal) {
		t.Fatalf("%s: %v", name, err)
	}
	if err != nil {
		return false
	}
	want, werr := jpeg.Decode(bytes.NewReader(b))
	if werr != nil {
		t.Fatalf("%s: Decode succeeded where image/jpeg fails: %v", name, werr)
	}
	if d := same(img, want); d != "" {
		t.Fatalf("%s: %s", name, d)
	}
	return true
}

// sharedJPEGs returns the JPEG files under the shared directory and up to
// maxMembers JPEG members of each .tar.gz archive there, by name.
func sharedJPEGs(t *testing.T, maxMembers int) map[string][]byte {
	t.Helper()
	dir := fixture.SharedDir()
	if _, err := os.Stat(dir); err != nil {
		fixture.Missing(t, dir)
	}
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		name := strings.ToLower(e.Name())
		switch {
		case strings.HasSuffix(name, ".jpg") || strings.HasSuffix(name, ".jpeg"):
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[p] = b
		case strings.HasSuffix(name, ".tar.gz"):
			return readTarJPEGs(p, maxMembers, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readTarJPEGs(p string, max int, out map[string][]byte) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(z)
	for n := 0; n < max; {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := strings.ToLower(h.Name)
		if !strings.HasSuffix(name, ".jpg") && !strings.HasSuffix(name, ".jpeg") {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		out[p+":"+h.Name] = b
		n++
	}
	return nil
}

// TestSharedCorpus compares Decode with image/jpeg on every JPEG of the
// shared fixtures and assets and on the first 300 members of each JPEG
// archive there. The fast path must take every file but those of kinds it
// leaves to image/jpeg (ErrUnsupported: the shared files include a
// progressive one).
func TestSharedCorpus(t *testing.T) {
	files := sharedJPEGs(t, 300)
	if len(files) == 0 {
		fixture.Missing(t, filepath.Join(fixture.SharedDir(), "*.jpg"))
	}
	fast := 0
	for name, b := range files {
		if check(t, name, b) {
			fast++
		} else if _, err := Decode(b); errors.Is(err, ErrUnsupported) {
			t.Logf("%s: left to image/jpeg: %v", name, err)
		} else {
			t.Errorf("%s: a valid file refused: %v", name, err)
		}
	}
	t.Logf("%d JPEGs, %d decoded by the fast path", len(files), fast)
}

// testImage returns a w×h image of smooth gradients with noise, grey or
// RGB.
func testImage(w, h int, gray bool, seed uint64) image.Image {
	r := rand.New(rand.NewPCG(seed, 3))
	if gray {
		m := image.NewGray(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				m.Pix[y*m.Stride+x] = uint8(max(0, min(255, 128+60*((x*7+y*3)%50-25)/25+int(r.NormFloat64()*20))))
			}
		}
		return m
	}
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.Set(x, y, color.RGBA{
				uint8(x * 255 / max(1, w-1)),
				uint8(max(0, min(255, int(y*255/max(1, h-1))+int(r.NormFloat64()*30)))),
				uint8(r.IntN(256)),
				255,
			})
		}
	}
	return m
}

// goJPEGs returns JPEGs written by image/jpeg's encoder (4:2:0 colour and
// grey) at several sizes, including odd ones, and qualities.
func goJPEGs(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	sizes := [][2]int{{1, 1}, {7, 13}, {17, 9}, {8, 8}, {16, 16}, {33, 47}, {224, 224}, {500, 333}}
	for _, sz := range sizes {
		for _, gray := range []bool{false, true} {
			for _, q := range []int{1, 10, 50, 75, 90, 100} {
				var buf bytes.Buffer
				m := testImage(sz[0], sz[1], gray, uint64(sz[0]*1000+sz[1]))
				if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: q}); err != nil {
					t.Fatal(err)
				}
				out[fmt.Sprintf("%dx%d gray=%v q=%d", sz[0], sz[1], gray, q)] = buf.Bytes()
			}
		}
	}
	return out
}

// TestGoEncoded compares Decode with image/jpeg on image/jpeg's own
// output.
func TestGoEncoded(t *testing.T) {
	files := goJPEGs(t)
	for name, b := range files {
		if !check(t, name, b) {
			_, err := Decode(b)
			t.Errorf("%s: not decoded by the fast path: %v", name, err)
		}
	}
	t.Logf("%d JPEGs", len(files))
}

func jpegDecode(b []byte) (image.Image, error) { return jpeg.Decode(bytes.NewReader(b)) }
