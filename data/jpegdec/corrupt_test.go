package jpegdec

import (
	"bytes"
	"image/jpeg"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// corpus returns the test's own JPEGs, image/jpeg-encoded ones and, when
// the shared directory is there, some shared ones.
func corpus(t testing.TB) [][]byte {
	var out [][]byte
	for _, m := range []map[string][]byte{goJPEGs(t), ownJPEGs(t)} {
		for _, b := range m {
			out = append(out, b)
		}
	}
	return out
}

// TestCorrupt cuts and overwrites bytes of valid files: Decode must not
// panic, and where it succeeds image/jpeg must give the same image.
func TestCorrupt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	files := corpus(t)
	// A large 4:4:4 file when the shared directory is there (optional:
	// TestSharedCorpus covers the shared files).
	if b, err := os.ReadFile(filepath.Join(fixture.SharedDir(), "assets/images/rocket.jpg")); err == nil {
		files = append(files, b)
	}
	n, ok := 0, 0
	for i, b := range files {
		if i%3 != 0 && len(b) > 4000 {
			continue // enough of the big ones
		}
		step := max(1, len(b)/60)
		for cut := 0; cut < len(b); cut += step {
			n++
			if check(t, "cut", b[:cut]) {
				ok++
			}
		}
		for range 40 {
			c := bytes.Clone(b)
			for range 1 + r.IntN(4) {
				c[r.IntN(len(c))] = uint8(r.IntN(256))
			}
			n++
			if check(t, "flipped", c) {
				ok++
			}
		}
	}
	t.Logf("%d corrupt inputs, %d decoded by the fast path (identically)", n, ok)
}

// FuzzDecode checks that Decode never panics and, where it succeeds,
// returns image/jpeg's image.
//
//	go test -run '^$' -fuzz FuzzDecode -fuzztime 1m ./data/jpegdec
func FuzzDecode(f *testing.F) {
	for _, b := range corpus(f) {
		if len(b) < 3000 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := jpeg.DecodeConfig(bytes.NewReader(b))
		if err != nil || cfg.Width*cfg.Height > 1<<22 {
			return // data.Decode would not get here either
		}
		check(t, "fuzz", b)
	})
}

func BenchmarkDecode(b *testing.B) {
	files := goJPEGs(b)
	for _, name := range []string{"224x224 gray=false q=75", "500x333 gray=false q=90", "500x333 gray=true q=90"} {
		data := files[name]
		b.Run("jpegdec/"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("image-jpeg/"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
