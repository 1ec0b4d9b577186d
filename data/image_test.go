package data

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestToRGB(t *testing.T) {
	r := image.Rect(0, 0, 2, 1)
	nrgba := image.NewNRGBA(r)
	nrgba.Pix = []uint8{200, 100, 50, 0, 10, 20, 30, 128}
	rgba := image.NewRGBA(r)
	rgba.Pix = []uint8{100, 50, 25, 128, 7, 8, 9, 255}
	gray := image.NewGray(r)
	gray.Pix = []uint8{0, 77}
	gray16 := image.NewGray16(r)
	gray16.Pix = []uint8{0x12, 0x34, 0xff, 0xff}
	nrgba64 := image.NewNRGBA64(r)
	nrgba64.Pix = []uint8{0xab, 0xcd, 0x01, 0x02, 0x80, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0x7f, 0xff, 0x12, 0x34}
	rgba64 := image.NewRGBA64(r)
	rgba64.Pix = []uint8{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}
	pal := image.NewPaletted(r, color.Palette{color.NRGBA{1, 2, 3, 0}, color.RGBA{4, 5, 6, 255}})
	pal.Pix = []uint8{0, 1}
	palShort := image.NewPaletted(r, color.Palette{color.Gray{9}})
	palShort.Pix = []uint8{0, 200}
	cmyk := image.NewCMYK(r)
	cmyk.Pix = []uint8{0, 0, 0, 0, 255, 128, 0, 64}
	ycc := image.NewYCbCr(r, image.YCbCrSubsampleRatio444)
	ycc.Y, ycc.Cb, ycc.Cr = []uint8{128, 255}, []uint8{128, 128}, []uint8{128, 128}
	sub := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	for i := range sub.Pix {
		sub.Pix[i] = uint8(i)
	}

	tests := []struct {
		name string
		img  image.Image
		want []uint8
	}{
		// Alpha 0 keeps its colour: convert("RGB") drops alpha only.
		{"NRGBA", nrgba, []uint8{200, 100, 50, 10, 20, 30}},
		// Premultiplied: 255·c/a truncated, as Pillow's RGBa→RGBA.
		{"RGBA", rgba, []uint8{199, 99, 49, 7, 8, 9}},
		{"Gray", gray, []uint8{0, 0, 0, 77, 77, 77}},
		{"Gray16 high byte", gray16, []uint8{0x12, 0x12, 0x12, 0xff, 0xff, 0xff}},
		{"NRGBA64 high byte", nrgba64, []uint8{0xab, 0x01, 0x80, 0, 0xff, 0x7f}},
		{"RGBA64 opaque", rgba64, []uint8{0x12, 0x56, 0x9a, 0, 0, 0}},
		{"Paletted straight colour", pal, []uint8{1, 2, 3, 4, 5, 6}},
		{"Paletted index past palette", palShort, []uint8{9, 9, 9, 0, 0, 0}},
		// Pillow cmyk2rgb: 255-k - c(255-k)/255, rounded.
		{"CMYK", cmyk, []uint8{255, 255, 255, 0, 95, 191}},
		{"YCbCr grey", ycc, []uint8{128, 128, 128, 255, 255, 255}},
		{"sub-image", sub.SubImage(image.Rect(1, 1, 3, 2)), []uint8{16, 17, 18, 20, 21, 22}},
	}
	for _, tc := range tests {
		got := ToRGB(tc.img)
		if got.W != 2 || got.H != 1 || !bytes.Equal(got.Pix, tc.want) {
			t.Errorf("%s: got %dx%d %v, want 2x1 %v", tc.name, got.W, got.H, got.Pix, tc.want)
		}
	}
}

// TestPremultiply checks Pillow's premultiply (MULDIV255, exact rounding
// of a·c/255) and that un-premultiplying is the identity at alpha 255.
func TestPremultiply(t *testing.T) {
	for c := range 256 {
		if got := unpremultiply(muldiv255(uint8(c), 255), 255); got != uint8(c) {
			t.Fatalf("alpha 255: %d → %d", c, got)
		}
		if got := muldiv255(uint8(c), 0); got != 0 {
			t.Fatalf("muldiv255(%d, 0) = %d", c, got)
		}
		for a := 1; a < 256; a++ {
			want := (c*a + 127) / 255 // a·c/255 rounded to nearest
			if got := muldiv255(uint8(c), uint8(a)); int(got) != want {
				t.Fatalf("muldiv255(%d, %d) = %d, want %d", c, a, got, want)
			}
		}
	}
}

func encode(t testing.TB, enc func(*bytes.Buffer, image.Image) error, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := enc(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func encodePNG(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) }
func encodeJPEG(b *bytes.Buffer, m image.Image) error {
	return jpeg.Encode(b, m, &jpeg.Options{Quality: 90})
}
func encodeGIF(b *bytes.Buffer, m image.Image) error { return gif.Encode(b, m, nil) }

// testImage is a smooth, opaque 17×9 image (odd sizes exercise the
// chroma edges of 4:2:0 JPEGs).
func testImage() *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, 17, 9))
	for y := range 9 {
		for x := range 17 {
			m.SetNRGBA(x, y, color.NRGBA{uint8(10 * x), uint8(20 * y), uint8(200 - 5*x - 5*y), 255})
		}
	}
	return m
}

func TestDecodeFormats(t *testing.T) {
	src := testImage()
	for _, tc := range []struct {
		name string
		enc  func(*bytes.Buffer, image.Image) error
		// PNG is lossless; JPEG and GIF (quantised to a palette) are not.
		maxDiff int
	}{
		{"png", encodePNG, 0},
		{"jpeg", encodeJPEG, 24},
		{"gif", encodeGIF, 64}, // Plan 9 palette: coarse steps
	} {
		got, err := DecodeRGB("x."+tc.name, encode(t, tc.enc, src))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := ToRGB(src)
		if got.W != want.W || got.H != want.H {
			t.Fatalf("%s: %dx%d, want %dx%d", tc.name, got.W, got.H, want.W, want.H)
		}
		d, _ := u8Diff(got.Pix, want.Pix)
		t.Logf("%s: max |diff| %d", tc.name, d)
		if d > tc.maxDiff {
			t.Errorf("%s: max |diff| %d > %d", tc.name, d, tc.maxDiff)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	good := encode(t, encodePNG, testImage())
	goodJPEG := encode(t, encodeJPEG, testImage())
	huge := append([]byte(nil), good...)
	// Rewrite the IHDR width to 2^30 (the CRC is checked only when decoding
	// the chunk, after DecodeConfig has seen the size).
	copy(huge[16:20], []byte{0x40, 0, 0, 0})
	bmp := append([]byte("BM"), make([]byte, 60)...)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty.png", nil, "unsupported image format"},
		{"random.jpg", []byte("this is not an image at all"), "unsupported image format"},
		{"x.bmp", bmp, "unsupported image format"},
		{"truncated.png", good[:len(good)/2], "corrupt image"},
		{"header-only.png", good[:40], "corrupt image"},
		{"truncated.jpg", goodJPEG[:len(goodJPEG)/2], "corrupt image"},
		{"huge.png", huge, ""},
	} {
		img, err := Decode(tc.name, tc.data)
		if err == nil {
			t.Errorf("%s: decoded a %v image", tc.name, img.Bounds())
			continue
		}
		if !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q should name the file and say %q", tc.name, err, tc.want)
		}
	}

	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.png")
	if _, err := ReadRGB(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("ReadRGB of a missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.png")
	if err := os.WriteFile(bad, good[:30], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRGB(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("ReadRGB of a corrupt file: %v", err)
	}
	ok := filepath.Join(dir, "ok.png")
	if err := os.WriteFile(ok, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadRGB(ok); err != nil || m.W != 17 || m.H != 9 {
		t.Errorf("ReadRGB of a good file: %v", err)
	}
}

// FuzzDecode feeds arbitrary bytes through decoding, conversion and the
// transform: errors are fine, panics are not.
func FuzzDecode(f *testing.F) {
	src := testImage()
	for _, enc := range []func(*bytes.Buffer, image.Image) error{encodePNG, encodeJPEG, encodeGIF} {
		b := encode(f, enc, src)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	gray := image.NewGray16(image.Rect(0, 0, 5, 3))
	f.Add(encode(f, encodePNG, gray))
	pal := image.NewPaletted(image.Rect(0, 0, 4, 4), color.Palette{color.NRGBA{1, 2, 3, 4}, color.Black})
	f.Add(encode(f, encodePNG, pal))
	p := NewCLIPPreprocessor(8)
	pm, err := NewPreprocessor(PreprocessConfig{Size: 8, PremultipliedAlpha: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// A small pixel limit keeps the fuzzer from allocating gigabytes.
		img, err := decode("fuzz", b, 1<<16)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		m := ToRGB(img)
		if err := m.check(); err != nil {
			t.Fatalf("ToRGB(%T): %v", img, err)
		}
		if _, err := p.Transform(nil, m); err != nil {
			t.Fatal(err)
		}
		if _, err := pm.TransformImage(nil, img); err != nil {
			t.Fatal(err)
		}
	})
}

// TestChromaUpsampling checks libjpeg's fancy upsampling on ramps: output
// samples lie at ±¼ of an input step from their nearest input, the edges
// are replicated, and libjpeg's biases round alternately down and up.
func TestChromaUpsampling(t *testing.T) {
	h2v1 := make([]uint8, 6)
	upsampleH2V1(h2v1, []uint8{0, 4, 8})
	// Exact values -1, 1, 3, 5, 7, 9; edges replicate the end samples.
	if want := []uint8{0, 1, 3, 5, 7, 8}; !bytes.Equal(h2v1, want) {
		t.Errorf("h2v1: %v, want %v", h2v1, want)
	}
	h2v2 := make([]uint8, 4)
	// Column sums 3·near + far of rows 16 and 32 (×4 scale): 3·16+32.
	upsampleH2V2(h2v2, []int32{80, 80})
	if want := []uint8{20, 20, 20, 20}; !bytes.Equal(h2v2, want) {
		t.Errorf("h2v2: %v, want %v", h2v2, want)
	}
	// A constant image converts to the same colour whatever the ratio.
	for _, ratio := range []image.YCbCrSubsampleRatio{
		image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio440,
	} {
		m := image.NewYCbCr(image.Rect(0, 0, 5, 3), ratio)
		for i := range m.Y {
			m.Y[i] = 100
		}
		for i := range m.Cb {
			m.Cb[i], m.Cr[i] = 90, 170
		}
		got := ToRGB(m)
		r, g, b := yccToRGB(100, 90, 170)
		for i := 0; i < len(got.Pix); i += 3 {
			if got.Pix[i] != r || got.Pix[i+1] != g || got.Pix[i+2] != b {
				t.Fatalf("%v: pixel %d = %v, want %v", ratio, i/3, got.Pix[i:i+3], []uint8{r, g, b})
			}
		}
	}
}
