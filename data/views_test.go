package data

import (
	"math"
	"slices"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/weights"
)

// TestResizedCropFixture rebuilds every random view of tta2's pool from
// the raw image and the crop torchvision drew (views.rrc_params: top,
// left, height, width, flipped) and requires the stored uint8 pixels
// exactly: Pillow's bilinear resize is integer arithmetic.
func TestResizedCropFixture(t *testing.T) {
	f, err := weights.Open(fixture.Path(t, "fixtures/tta2.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, ss, err := f.Uint8("views.source_u8")
	if err != nil {
		t.Fatal(err)
	}
	views, vs, err := f.Uint8("views.u8")
	if err != nil {
		t.Fatal(err)
	}
	params, ps, err := f.Int64("views.rrc_params")
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 4 || len(vs) != 5 || len(ps) != 3 || ps[2] != 5 || vs[0] != ss[0] || ps[0] != ss[0] || ps[1] != vs[1] || vs[2] != vs[3] {
		t.Fatalf("shapes source %v, views %v, params %v", ss, vs, ps)
	}
	n, v, h, w, size := ss[0], vs[1], ss[1], ss[2], vs[2]
	checked := 0
	for i := range n {
		img := &RGB{W: w, H: h, Pix: src[i*h*w*3 : (i+1)*h*w*3]}
		for k := range v {
			p := params[(i*v+k)*5 : (i*v+k+1)*5]
			if p[0] < 0 { // the base view
				continue
			}
			c := Crop{Top: int(p[0]), Left: int(p[1]), Height: int(p[2]), Width: int(p[3]), Flip: p[4] != 0}
			got, err := ResizedCrop(img, c, size)
			if err != nil {
				t.Fatal(err)
			}
			off := (i*v + k) * size * size * 3
			want := views[off : off+size*size*3]
			if !slices.Equal(got.Pix, want) {
				diff := 0
				for j := range want {
					diff = max(diff, int(math.Abs(float64(got.Pix[j])-float64(want[j]))))
				}
				t.Errorf("image %d view %d (%+v): pixels differ by up to %d", i, k, c, diff)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("the fixture has no random view")
	}
	t.Logf("%d views equal Pillow's bit for bit", checked)
}

// TestRandomResizedCropParams checks the drawn crops against
// torchvision's rules: inside the image, an area fraction in [0.08, 1] and
// a ratio in [3/4, 4/3] up to rounding, both flips; the same seed gives
// the same crops.
func TestRandomResizedCropParams(t *testing.T) {
	for _, sz := range [][2]int{{32, 32}, {500, 375}, {40, 300}} {
		w, h := sz[0], sz[1]
		rng := ViewRNG(1, "fog/5", 7)
		flips := 0
		for range 2000 {
			c := RandomResizedCropParams(w, h, rng)
			if c.Left < 0 || c.Top < 0 || c.Width < 1 || c.Height < 1 || c.Left+c.Width > w || c.Top+c.Height > h {
				t.Fatalf("%dx%d: crop %+v outside the image", w, h, c)
			}
			if c.Flip {
				flips++
			}
			if w == h { // never the fallback on a square image
				frac := float64(c.Width*c.Height) / float64(w*h)
				ratio := float64(c.Width) / float64(c.Height)
				side := 1 / float64(min(c.Width, c.Height)) // rounding of one side
				if frac < 0.08*(1-3*side) || frac > 1 || ratio < 0.75*(1-2*side) || ratio > 4.0/3*(1+2*side) {
					t.Fatalf("%dx%d: crop %+v: area %.3f, ratio %.3f", w, h, c, frac, ratio)
				}
			}
		}
		if flips < 800 || flips > 1200 {
			t.Errorf("%dx%d: %d flips in 2000", w, h, flips)
		}
	}
	a, b := RandomResizedCropParams(32, 32, ViewRNG(3, "d", 1)), RandomResizedCropParams(32, 32, ViewRNG(3, "d", 1))
	c := RandomResizedCropParams(32, 32, ViewRNG(3, "d", 2))
	if a != b || a == c {
		t.Errorf("seeded crops %+v, %+v (same), %+v (another image)", a, b, c)
	}
}

// TestViews: view 0 is the base view, the others differ from it and from
// each other, and the same random source gives the same bits.
func TestViews(t *testing.T) {
	p := NewCLIPPreprocessor(64)
	img := NewRGB(32, 32)
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	a, err := p.Views(nil, img, 4, ViewRNG(1, "d", 0))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Views(nil, img, 4, ViewRNG(1, "d", 0))
	base, _ := p.Transform(nil, img)
	n := p.OutputLen()
	if !slices.Equal(a, b) || !slices.Equal(a[:n], base) || slices.Equal(a[n:2*n], a[2*n:3*n]) {
		t.Error("views are not seeded, or view 0 is not the base view, or two random views are equal")
	}
	if _, err := p.Views(nil, img, 0, ViewRNG(1, "d", 0)); err == nil {
		t.Error("0 views accepted")
	}
}
