package data

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// imageNetCPhoto is one ImageNet-style input of the corruption fixtures.
type imageNetCPhoto struct {
	Name   string `json:"name"`
	Source string `json:"source"` // a file of assets/images
}

// imageNetCFixture reads the ImageNet photos and severities of
// fixtures/corruptions/manifest.json.
func imageNetCFixture(t *testing.T) (photos []imageNetCPhoto, severities []int) {
	t.Helper()
	b, err := os.ReadFile(fixtureAsset(t, "fixtures/corruptions/manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Images     []imageNetCPhoto `json:"imagenet_images"`
		Severities []int            `json:"imagenet_severities"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("corruptions/manifest.json: %v", err)
	}
	if len(m.Images) == 0 {
		t.Skip("corruptions/manifest.json lists no ImageNet images")
	}
	return m.Images, m.Severities
}

// TestImageNetCInputFixture checks Resize(256) (Pillow bilinear) and
// CenterCrop(224) against torchvision 0.14 / Pillow 9.4 on the photos of
// the corruption fixtures: every pixel must match.
func TestImageNetCInputFixture(t *testing.T) {
	photos, _ := imageNetCFixture(t)
	for _, ph := range photos {
		name := ph.Name
		src, err := ReadRGB(fixtureAsset(t, "assets/images/"+ph.Source))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ReadRGB(fixtureAsset(t, "fixtures/corruptions/clean/imagenet/"+name+".png"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := imageNetCInput(src)
		if err != nil {
			t.Fatal(err)
		}
		// The same through the whole resize and a separate crop.
		rw, rh := resizedSize(256, src.W, src.H)
		full, err := ResizeBilinear(src, rw, rh)
		if err != nil {
			t.Fatal(err)
		}
		cropped, err := CenterCrop(full, 224, 224)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			how string
			m   *RGB
		}{{"window", got}, {"resize+crop", cropped}} {
			worst, at := pixelDiff(c.m, want)
			t.Logf("%s %dx%d → %dx%d, %s: worst |diff| %d at byte %d", name, src.W, src.H, rw, rh, c.how, worst, at)
			if worst != 0 {
				t.Errorf("%s (%s): differs from torchvision by up to %d levels", name, c.how, worst)
			}
		}
	}
}

// pixelDiff returns the largest absolute difference of two images' bytes
// and where it is (-1 and 0 for images of different sizes: 256).
func pixelDiff(a, b *RGB) (worst, at int) {
	if a.W != b.W || a.H != b.H {
		return 256, -1
	}
	for i := range a.Pix {
		d := int(a.Pix[i]) - int(b.Pix[i])
		if d < 0 {
			d = -d
		}
		if d > worst {
			worst, at = d, i
		}
	}
	return worst, at
}

// TestResizeBilinearSmall checks hand-computed Pillow results: the triangle
// filter's support is doubled when halving (weights ¾, ¾, ¼ normalised), and
// upscaling by two interpolates at ±¼ pixel.
func TestResizeBilinearSmall(t *testing.T) {
	row := func(vals ...uint8) *RGB {
		m := NewRGB(len(vals), 1)
		for i, v := range vals {
			m.Pix[3*i], m.Pix[3*i+1], m.Pix[3*i+2] = v, v, 255-v
		}
		return m
	}
	col := func(m *RGB) *RGB { return &RGB{W: 1, H: m.W, Pix: m.Pix} }
	for _, tc := range []struct {
		name    string
		in, out []uint8
	}{
		// Output 0: (0·¾ + 70·¾ + 140·¼)/1.75 = 50; output 1: (70·¼ + 140·¾ + 210·¾)/1.75 = 160.
		{"halve", []uint8{0, 70, 140, 210}, []uint8{50, 160}},
		// Centres at 0.25, 0.75, 1.25, 1.75: clamped at the ends, ¾/¼ inside.
		{"double", []uint8{0, 200}, []uint8{0, 50, 150, 200}},
		{"same", []uint8{9, 8, 7}, []uint8{9, 8, 7}},
	} {
		want := row(tc.out...)
		got, err := ResizeBilinear(row(tc.in...), len(tc.out), 1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Pix, want.Pix) {
			t.Errorf("%s horizontally: got %v, want %v", tc.name, got.Pix, want.Pix)
		}
		got, err = ResizeBilinear(col(row(tc.in...)), 1, len(tc.out))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Pix, want.Pix) {
			t.Errorf("%s vertically: got %v, want %v", tc.name, got.Pix, want.Pix)
		}
	}

	// A constant image stays constant at any size.
	flat := NewRGB(37, 23)
	for i := range flat.Pix {
		flat.Pix[i] = uint8(100 + i%3)
	}
	for _, sz := range [][2]int{{5, 3}, {37, 23}, {80, 11}, {256, 341}} {
		got, err := ResizeBilinear(flat, sz[0], sz[1])
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got.Pix {
			if v != uint8(100+i%3) {
				t.Fatalf("constant image resized to %v: byte %d is %d", sz, i, v)
			}
		}
	}

	if _, err := ResizeBilinear(flat, 0, 4); err == nil {
		t.Error("ResizeBilinear to width 0 succeeded")
	}
	if _, err := ResizeBilinear(&RGB{W: 2, H: 2}, 4, 4); err == nil {
		t.Error("ResizeBilinear of a malformed image succeeded")
	}
}
