package data

import (
	"bytes"
	"image"
	"image/jpeg"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// decodeBoth returns Decode's result with and without the fast JPEG
// decoder.
func decodeBoth(b []byte) (fast, slow any, fastErr, slowErr error) {
	fast, fastErr = Decode("x.jpg", b)
	fastJPEG = false
	defer func() { fastJPEG = true }()
	slow, slowErr = Decode("x.jpg", b)
	return fast, slow, fastErr, slowErr
}

// TestDecodeJPEGFastUnchanged checks that the fast JPEG path changes
// nothing Decode returns, image or error, on valid files and on files cut
// at many offsets or with bytes overwritten.
func TestDecodeJPEGFastUnchanged(t *testing.T) {
	var inputs [][]byte
	for _, p := range []string{"assets/images/rocket.jpg", "fixtures/corruptions/imagenet/contrast/s5/coffee.jpg"} {
		b, err := os.ReadFile(fixture.Path(t, p))
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	for i, q := range []int{30, 90} {
		var buf bytes.Buffer
		m := image.NewRGBA(image.Rect(0, 0, 37+i*40, 29+i*30))
		r := rand.New(rand.NewPCG(uint64(i), 1))
		for j := range m.Pix {
			m.Pix[j] = uint8(j*7 + r.IntN(40))
		}
		if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: q}); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, buf.Bytes())
	}
	cases := 0
	compare := func(what string, b []byte) {
		t.Helper()
		cases++
		fast, slow, ferr, serr := decodeBoth(b)
		if (ferr == nil) != (serr == nil) || ferr != nil && ferr.Error() != serr.Error() {
			t.Fatalf("%s: error %v, without the fast path %v", what, ferr, serr)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s: image differs from the one without the fast path", what)
		}
	}
	r := rand.New(rand.NewPCG(5, 5))
	for _, b := range inputs {
		compare("whole", b)
		step := max(1, len(b)/200)
		for cut := 0; cut < len(b); cut += step {
			compare("cut", b[:cut])
		}
		for range 150 {
			c := bytes.Clone(b)
			for range 1 + r.IntN(3) {
				c[r.IntN(len(c))] = uint8(r.IntN(256))
			}
			compare("flipped", c)
		}
	}
	t.Logf("%d inputs compared", cases)
}

// TestYCCRowToRGB checks the row conversion against yccToRGB for every
// (Y, Cb, Cr).
func TestYCCRowToRGB(t *testing.T) {
	yrow := make([]uint8, 256)
	for i := range yrow {
		yrow[i] = uint8(i)
	}
	cb, cr, out := make([]uint8, 256), make([]uint8, 256), make([]uint8, 3*256)
	for b := range 256 {
		for r := range 256 {
			for i := range cb {
				cb[i], cr[i] = uint8(b), uint8(r)
			}
			yccRowToRGB(out, yrow, cb, cr)
			for y := range 256 {
				R, G, B := yccToRGB(uint8(y), uint8(b), uint8(r))
				if out[3*y] != R || out[3*y+1] != G || out[3*y+2] != B {
					t.Fatalf("Y=%d Cb=%d Cr=%d: got %v, want %d %d %d", y, b, r, out[3*y:3*y+3], R, G, B)
				}
			}
		}
	}
}
