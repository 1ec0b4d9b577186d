package data

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/subtta/subtta/data/corrupt"
)

// memDataset is an in-memory Dataset of given images.
type memDataset struct {
	name    string
	imgs    []*RGB
	labels  []int
	classes []string
}

func (d *memDataset) Name() string      { return d.name }
func (d *memDataset) Len() int          { return len(d.imgs) }
func (d *memDataset) Classes() []string { return d.classes }
func (d *memDataset) Label(i int) int   { return d.labels[i] }
func (d *memDataset) Close() error      { return nil }
func (d *memDataset) Item(i int) (*RGB, int, error) {
	if err := checkIndex(d.name, i, len(d.imgs)); err != nil {
		return nil, 0, err
	}
	m := d.imgs[i]
	return &RGB{W: m.W, H: m.H, Pix: slices.Clone(m.Pix)}, d.labels[i], nil
}

// randomRGB returns a w×h image of smooth gradients plus noise, so that
// blurs and noises both change it.
func randomRGB(w, h int, seed uint64) *RGB {
	r := rand.New(rand.NewPCG(seed, 1))
	m := NewRGB(w, h)
	for y := range h {
		for x := range w {
			for c := range 3 {
				v := (x*(c+1)*255/w+y*(3-c)*255/h)/2 + r.IntN(40) - 20
				m.Pix[3*(y*w+x)+c] = uint8(max(0, min(255, v)))
			}
		}
	}
	return m
}

// cifarLike is a dataset of n random 32×32 images with labels 0, 3, 6, ….
func cifarLike(n int) *memDataset {
	d := &memDataset{name: "synthetic-cifar", classes: numericClasses(10)}
	for i := range n {
		d.imgs = append(d.imgs, randomRGB(32, 32, uint64(i)))
		d.labels = append(d.labels, 3*i%10)
	}
	return d
}

// applyDirect corrupts img as image i of a data set made with seed, with
// corrupt's own API: the reference the datasets and writers must match.
func applyDirect(t *testing.T, img *RGB, i int, name string, sev int, cfg corrupt.Config, seed uint64) *RGB {
	t.Helper()
	src, err := corrupt.NewSource(seed, i, name, sev)
	if err != nil {
		t.Fatal(err)
	}
	out, err := corrupt.Apply(&corrupt.Image{H: img.H, W: img.W, Pix: slices.Clone(img.Pix)}, name, sev, cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	return &RGB{W: out.W, H: out.H, Pix: out.Pix}
}

// jpegRoundTrip is ImageNet-C's saving and reading of an image.
func jpegRoundTrip(t *testing.T, m *RGB) *RGB {
	t.Helper()
	var buf bytes.Buffer
	if err := corrupt.EncodeImageNetC(&buf, &corrupt.Image{H: m.H, W: m.W, Pix: m.Pix}); err != nil {
		t.Fatal(err)
	}
	out, err := DecodeRGB("round trip", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCorruptedCIFAR(t *testing.T) {
	clean := cifarLike(3)
	cfg := corrupt.Config{Preset: corrupt.CIFAR}
	const seed = 42
	for _, name := range []string{"gaussian_noise", "contrast", "glass_blur"} {
		for _, sev := range []int{1, 5} {
			ds, err := NewCorrupted(clean, name, sev, cfg, seed)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ds.Name(), fmt.Sprintf("%s/%d", name, sev); got != want {
				t.Errorf("Name() = %q, want %q", got, want)
			}
			if ds.Len() != 3 || len(ds.Classes()) != 10 {
				t.Errorf("%s: Len %d, %d classes; want 3, 10", ds.Name(), ds.Len(), len(ds.Classes()))
			}
			for i := range ds.Len() {
				got, label, err := ds.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				want := applyDirect(t, clean.imgs[i], i, name, sev, cfg, seed)
				if worst, _ := pixelDiff(got, want); worst != 0 {
					t.Errorf("%s image %d differs from corrupt.Apply by %d", ds.Name(), i, worst)
				}
				if label != clean.labels[i] || ds.Label(i) != clean.labels[i] {
					t.Errorf("%s image %d: label %d/%d, want %d", ds.Name(), i, label, ds.Label(i), clean.labels[i])
				}
			}
		}
	}

	// Another seed gives other noise; the same seed the same, also when
	// images are read concurrently and out of order.
	a, _ := NewCorrupted(clean, "gaussian_noise", 5, cfg, 1)
	b, _ := NewCorrupted(clean, "gaussian_noise", 5, cfg, 2)
	ma, _, _ := a.Item(1)
	mb, _, _ := b.Item(1)
	if slices.Equal(ma.Pix, mb.Pix) {
		t.Error("seeds 1 and 2 gave the same gaussian noise")
	}
	var wg sync.WaitGroup
	got := make([]*RGB, 12)
	for k := range got {
		wg.Go(func() {
			m, _, err := a.Item(2 - k%3)
			if err != nil {
				t.Error(err)
				return
			}
			got[k] = m
		})
	}
	wg.Wait()
	for k, m := range got {
		want, _, _ := a.Item(2 - k%3)
		if m == nil || !slices.Equal(m.Pix, want.Pix) {
			t.Fatalf("concurrent read %d of image %d differs", k, 2-k%3)
		}
	}
}

func TestCorruptedErrors(t *testing.T) {
	clean := cifarLike(2)
	cifar := corrupt.Config{Preset: corrupt.CIFAR}
	_, err := NewCorrupted(clean, "gaussian_blur", 3, cifar, 0)
	mustErr(t, err, `unknown corruption "gaussian_blur"`)
	for _, sev := range []int{0, 6} {
		_, err = NewCorrupted(clean, "contrast", sev, cifar, 0)
		mustErr(t, err, fmt.Sprintf("severity %d", sev))
	}
	_, err = NewCorrupted(clean, "frost", 1, cifar, 0)
	mustErr(t, err, "FrostDir")
	_, err = NewCorrupted(clean, "frost", 1, corrupt.Config{Preset: corrupt.CIFAR, FrostDir: t.TempDir()}, 0)
	mustErr(t, err, "frost")
	_, err = NewCorrupted(clean, "contrast", 1, corrupt.Config{Preset: 7}, 0)
	mustErr(t, err, "preset")
	mustErr(t, checkCorruptions([]string{"fog", "snow", "fog"}, cifar), "fog is listed twice")

	wrong := &memDataset{name: "big", imgs: []*RGB{randomRGB(33, 32, 1)}, labels: []int{0}, classes: []string{"a"}}
	ds, err := NewCorrupted(wrong, "contrast", 1, cifar, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ds.Item(0)
	mustErr(t, err, "big: image 0", "33x32", "32x32")
	_, _, err = ds.Item(1)
	mustErr(t, err, "out of range")
}

// TestCorruptedFrost checks frost with the shared overlays: the dataset
// loads them from Config.FrostDir and matches corrupt.Apply.
func TestCorruptedFrost(t *testing.T) {
	dir := fixtureAsset(t, "assets/corruptions")
	clean := cifarLike(2)
	cfg := corrupt.Config{Preset: corrupt.CIFAR, FrostDir: dir}
	ds, err := NewCorrupted(clean, "frost", 4, cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		got, _, err := ds.Item(i)
		if err != nil {
			t.Fatal(err)
		}
		if worst, _ := pixelDiff(got, applyDirect(t, clean.imgs[i], i, "frost", 4, cfg, 9)); worst != 0 {
			t.Errorf("frost image %d differs from corrupt.Apply by %d", i, worst)
		}
	}
}

// TestCorruptedImageNetFixture runs make_imagenet_c.py's pipeline on the
// fixture photos for the corruptions corrupt reproduces exactly: the array
// before saving must equal the original code's, pixel for pixel, and Item
// (after Go's JPEG round trip) must stay close to the original's file,
// which libjpeg encoded.
func TestCorruptedImageNetFixture(t *testing.T) {
	photos, severities := imageNetCFixture(t)
	var names []string
	clean := &memDataset{name: "photos"}
	for i, ph := range photos {
		m, err := ReadRGB(fixtureAsset(t, "assets/images/"+ph.Source))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, ph.Name)
		clean.imgs = append(clean.imgs, m)
		clean.labels = append(clean.labels, i)
	}
	clean.classes = names
	cfg := corrupt.Config{Preset: corrupt.ImageNet}
	for _, c := range []string{"contrast", "brightness", "pixelate"} {
		for _, sev := range severities {
			ds, err := NewCorrupted(clean, c, sev, cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range names {
				dir := fmt.Sprintf("fixtures/corruptions/imagenet/%s/s%d/%s", c, sev, n)
				wantArr, err := ReadRGB(fixtureAsset(t, dir+".png"))
				if err != nil {
					t.Fatal(err)
				}
				in, err := corruptionInput(clean.imgs[i], cfg.Preset)
				if err != nil {
					t.Fatal(err)
				}
				arr, err := corruptImage(in, i, c, sev, cfg, 0)
				if err != nil {
					t.Fatal(err)
				}
				if worst, at := pixelDiff(arr, wantArr); worst != 0 {
					t.Errorf("%s/%d %s: array before saving differs from the original by %d at byte %d", c, sev, n, worst, at)
				}
				got, _, err := ds.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				if worst, _ := pixelDiff(got, jpegRoundTrip(t, arr)); worst != 0 {
					t.Errorf("%s/%d %s: Item is not the JPEG round trip of the array (by %d)", c, sev, n, worst)
				}
				wantFile, err := ReadRGB(fixtureAsset(t, dir+".jpg"))
				if err != nil {
					t.Fatal(err)
				}
				worst, _ := pixelDiff(got, wantFile)
				mean := meanAbsDiff(got, wantFile)
				t.Logf("%s/%d %s: Item vs the original's JPEG: worst %d, mean %.3f levels", c, sev, n, worst, mean)
				// Go's and libjpeg's encoders quantise the same DCT
				// coefficients with the same tables but round
				// differently; the mean difference stays a fraction of a
				// level. 1.0 leaves room without hiding a real error
				// (a wrong crop or resize gives tens of levels).
				if mean > 1.0 {
					t.Errorf("%s/%d %s: Item differs from the original JPEG by %.3f levels on average", c, sev, n, mean)
				}
			}
		}
	}
}

func meanAbsDiff(a, b *RGB) float64 {
	s := 0
	for i := range a.Pix {
		d := int(a.Pix[i]) - int(b.Pix[i])
		s += max(d, -d)
	}
	return float64(s) / float64(len(a.Pix))
}
