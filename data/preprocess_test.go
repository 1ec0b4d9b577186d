package data

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/weights"
)

// preprocessMeta is the part of fixtures/preprocess.json the tests use.
type preprocessMeta struct {
	Resolution int       `json:"resolution"`
	Mean       []float64 `json:"mean"`
	Std        []float64 `json:"std"`
	Images     []struct {
		Index         int     `json:"index"`
		Source        string  `json:"source"`
		Mode          string  `json:"mode"`
		SizeWH        [2]int  `json:"size_wh"`
		ResizedWH     [2]int  `json:"resized_wh"`
		CropLeftTop   [2]int  `json:"crop_left_top"`
		ResizedU8     string  `json:"resized_u8"`
		SourceU8      string  `json:"source_u8"`
		RGBADirectRow *int    `json:"rgba_direct_row"`
		RGBADirectMax float64 `json:"rgba_direct_max_abs_diff"`
	} `json:"images"`
}

func loadPreprocessFixture(t *testing.T) (*preprocessMeta, *weights.File) {
	t.Helper()
	b, err := os.ReadFile(fixture.Path(t, "fixtures/preprocess.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta preprocessMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatalf("preprocess.json: %v", err)
	}
	if len(meta.Images) == 0 || len(meta.Mean) != 3 || len(meta.Std) != 3 {
		t.Fatalf("preprocess.json: %d images, mean %v, std %v", len(meta.Images), meta.Mean, meta.Std)
	}
	f, err := weights.Open(fixture.Path(t, "fixtures/preprocess.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &meta, f
}

// fixturePreprocessor is the transform the fixture was made with, its
// parameters taken from preprocess.json.
func fixturePreprocessor(t *testing.T, meta *preprocessMeta, premult bool) *Preprocessor {
	t.Helper()
	cfg := PreprocessConfig{Size: meta.Resolution, PremultipliedAlpha: premult}
	for c := range 3 {
		cfg.Mean[c], cfg.Std[c] = float32(meta.Mean[c]), float32(meta.Std[c])
	}
	p, err := NewPreprocessor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var archiveMembers struct {
	sync.Mutex
	m      map[string][]byte // "<archive>\x00<member>" → contents
	loaded map[string]bool   // archives read
}

// sourceBytes returns the encoded file a preprocess.json "source" names,
// "<folder>/<path>". The folder is the generator's (openai_CLIP,
// skimage_images, cifar10_jpg on the public set), not necessarily one of
// the shared folder's, so the file is looked for where the JSON puts it
// (<shared>/<source>, <shared>/assets/<source>), else under the shared
// assets by the rest of its path: the one file whose path ends in <path>,
// else a member <path> of a .tar.gz there (archives whose name starts
// with <path>'s first folder first: cifar10/test-jpg.tar.gz holds
// test/airplane/0000.jpg).
func sourceBytes(t *testing.T, source string) (name string, b []byte) {
	t.Helper()
	shared := fixture.SharedDir()
	assets := filepath.Join(shared, "assets")
	for _, p := range []string{filepath.Join(shared, source), filepath.Join(assets, source)} {
		if b, err := os.ReadFile(p); err == nil {
			return p, b
		}
	}
	if _, err := os.Stat(assets); err != nil {
		fixture.Missing(t, assets)
	}
	_, rest, ok := strings.Cut(source, "/")
	if !ok || rest == "" {
		t.Fatalf("preprocess.json: source %q names no folder and is not in %s", source, assets)
	}
	var files, archives []string
	err := filepath.WalkDir(assets, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		switch {
		case strings.HasSuffix(filepath.ToSlash(p), "/"+rest):
			files = append(files, p)
		case strings.HasSuffix(p, ".tar.gz"):
			archives = append(archives, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	switch len(files) {
	case 1:
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		return files[0], b
	case 0:
	default:
		t.Fatalf("preprocess.json: source %q: several files under %s end in %q: %v", source, assets, rest, files)
	}
	first, _, _ := strings.Cut(rest, "/")
	slices.SortStableFunc(archives, func(x, y string) int {
		px, py := strings.HasPrefix(filepath.Base(x), first+"-"), strings.HasPrefix(filepath.Base(y), first+"-")
		switch {
		case px && !py:
			return -1
		case py && !px:
			return 1
		}
		return 0
	})
	for _, archive := range archives {
		if b, ok := tarMember(t, archive, rest); ok {
			return archive + ":" + rest, b
		}
	}
	t.Fatalf("preprocess.json: source %q: no file under %s ends in %q, and no .tar.gz there holds it", source, assets, rest)
	return "", nil
}

// tarMember returns one member of a .tar.gz and whether it is there,
// reading the archive once per test binary and keeping all its .jpg
// members (under 10 MB for the CIFAR-10 test set): any of its images may
// be a fixture row.
func tarMember(t *testing.T, archive, member string) ([]byte, bool) {
	t.Helper()
	archiveMembers.Lock()
	defer archiveMembers.Unlock()
	if archiveMembers.m == nil {
		archiveMembers.m = make(map[string][]byte)
		archiveMembers.loaded = make(map[string]bool)
	}
	key := archive + "\x00" + member
	if !archiveMembers.loaded[archive] {
		readArchive(t, archive)
		archiveMembers.loaded[archive] = true
	}
	b, ok := archiveMembers.m[key]
	return b, ok
}

// readArchive keeps the .jpg members of archive in archiveMembers (whose
// lock the caller holds).
func readArchive(t *testing.T, archive string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if !strings.HasSuffix(h.Name, ".jpg") {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", archive, h.Name, err)
		}
		archiveMembers.m[archive+"\x00"+h.Name] = b
	}
}

// fixtureRGB reads a uint8 HWC tensor from the fixture.
func fixtureRGB(t *testing.T, f *weights.File, name string) *RGB {
	t.Helper()
	pix, shape, err := f.Uint8(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 3 || shape[2] != 3 {
		t.Fatalf("%s: shape %v, want [H W 3]", name, shape)
	}
	return &RGB{W: shape[1], H: shape[0], Pix: pix}
}

// fixtureRows reads an NCHW float32 tensor and returns its rows.
func fixtureRows(t *testing.T, f *weights.File, name string, p *Preprocessor) [][]float32 {
	t.Helper()
	v, shape, err := f.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 4 || shape[1] != 3 || shape[2] != p.Size() || shape[3] != p.Size() {
		t.Fatalf("%s: shape %v, want [N 3 %d %d]", name, shape, p.Size(), p.Size())
	}
	n := p.OutputLen()
	rows := make([][]float32, shape[0])
	for i := range rows {
		rows[i] = v[i*n : (i+1)*n]
	}
	return rows
}

func maxAbsDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// u8Diff returns the largest and the mean absolute difference of two
// equally long byte slices.
func u8Diff(a, b []uint8) (maxDiff int, mean float64) {
	sum := 0
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < 0 {
			d = -d
		}
		sum += d
		maxDiff = max(maxDiff, d)
	}
	return maxDiff, float64(sum) / float64(len(a))
}

func TestResizedSizeAndCropOffset(t *testing.T) {
	meta, _ := loadPreprocessFixture(t)
	p := fixturePreprocessor(t, meta, false)
	for _, im := range meta.Images {
		rw, rh := p.ResizedSize(im.SizeWH[0], im.SizeWH[1])
		if [2]int{rw, rh} != im.ResizedWH {
			t.Errorf("image %d (%s): resized %dx%d, want %v", im.Index, im.Source, rw, rh, im.ResizedWH)
		}
		left, top := CenterCropOffset(rw, rh, p.Size(), p.Size())
		if [2]int{left, top} != im.CropLeftTop {
			t.Errorf("image %d (%s): crop at (%d, %d), want %v", im.Index, im.Source, left, top, im.CropLeftTop)
		}
	}
}

// fixtureInput returns the RGB image row i of the fixture was computed
// from: the fixture's own libjpeg decoding for JPEGs (source_u8), which Go's
// decoder does not reproduce bit for bit, and the decoded file otherwise.
func fixtureInput(t *testing.T, f *weights.File, source, sourceU8 string) *RGB {
	t.Helper()
	if sourceU8 != "" {
		return fixtureRGB(t, f, sourceU8)
	}
	name, b := sourceBytes(t, source)
	img, err := DecodeRGB(name, b)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestResizeMatchesPillow(t *testing.T) {
	meta, f := loadPreprocessFixture(t)
	n := 0
	for _, im := range meta.Images {
		if im.ResizedU8 == "" {
			continue
		}
		n++
		want := fixtureRGB(t, f, im.ResizedU8)
		src := fixtureInput(t, f, im.Source, im.SourceU8)
		if src.W != im.SizeWH[0] || src.H != im.SizeWH[1] {
			t.Fatalf("image %d (%s): decoded %dx%d, want %v", im.Index, im.Source, src.W, src.H, im.SizeWH)
		}
		got, err := Resize(src, want.W, want.H)
		if err != nil {
			t.Fatal(err)
		}
		maxDiff, _ := u8Diff(got.Pix, want.Pix)
		bad := 0
		for i := range got.Pix {
			if got.Pix[i] != want.Pix[i] {
				bad++
			}
		}
		t.Logf("%s: %s %dx%d → %dx%d: %d of %d bytes differ, max |diff| %d",
			im.ResizedU8, im.Source, src.W, src.H, want.W, want.H, bad, len(got.Pix), maxDiff)
		// Pillow's resize is integer arithmetic: it must match exactly.
		if bad != 0 {
			t.Errorf("%s: resize differs from Pillow", im.ResizedU8)
		}
	}
	if n == 0 {
		t.Skip("fixture has no resized_u8 tensors")
	}
}

func TestTransformMatchesPillow(t *testing.T) {
	meta, f := loadPreprocessFixture(t)
	p := fixturePreprocessor(t, meta, false)
	want := fixtureRows(t, f, "pixel_values", p)
	if len(want) != len(meta.Images) {
		t.Fatalf("pixel_values has %d rows, preprocess.json %d images", len(want), len(meta.Images))
	}
	var dst []float32
	for _, im := range meta.Images {
		src := fixtureInput(t, f, im.Source, im.SourceU8)
		var err error
		dst, err = p.Transform(dst, src)
		if err != nil {
			t.Fatal(err)
		}
		d := maxAbsDiff(dst, want[im.Index])
		t.Logf("pixel_values[%d] %s (%s): max |diff| %.3g", im.Index, im.Source, im.Mode, d)
		// The transform is exact in float32 (integer resize, one IEEE
		// division and subtraction per value); 1e-6 leaves room for a
		// one-ulp difference in the normalisation only.
		if d > 1e-6 {
			t.Errorf("pixel_values[%d] (%s): max |diff| %g > 1e-6", im.Index, im.Source, d)
		}
	}
}

func TestTransformBatchMatchesPillow(t *testing.T) {
	meta, f := loadPreprocessFixture(t)
	p := fixturePreprocessor(t, meta, false)
	want, shape, err := f.Float32("pixel_values")
	if err != nil {
		t.Fatal(err)
	}
	imgs := make([]*RGB, len(meta.Images))
	for i, im := range meta.Images {
		imgs[i] = fixtureInput(t, f, im.Source, im.SourceU8)
	}
	got, err := p.Batch(nil, imgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("batch has %d values, pixel_values %v", len(got), shape)
	}
	d := maxAbsDiff(got, want)
	t.Logf("batch %v: max |diff| %.3g", shape, d)
	if d > 1e-6 { // as in TestTransformMatchesPillow
		t.Errorf("batch: max |diff| %g > 1e-6", d)
	}
}

// TestJPEGDecodeDifference measures how far Go's JPEG decoder is from the
// libjpeg decoding Pillow used (source_u8), in pixels and in the final
// model input. The two decoders are not expected to agree exactly.
//
// It runs on the shared set and on a variant of it whose asset folders and
// source folders have other names (and whose models state other head
// counts), where the images are found by the rest of their paths
// (sourceBytes).
func TestJPEGDecodeDifference(t *testing.T) {
	t.Run("public", jpegDecodeRun)
	t.Run("variant", func(t *testing.T) {
		setRenamedVariant(t)
		meta, _ := loadPreprocessFixture(t)
		for _, im := range meta.Images {
			if dir, _, _ := strings.Cut(im.Source, "/"); !strings.HasPrefix(dir, fixture.RenamedSource("")) {
				t.Fatalf("variant: source %q keeps its folder's name", im.Source)
			}
		}
		jpegDecodeRun(t)
	})
}

// setRenamedVariant points the tests at a variant of the fixture set
// (fixture.SetVariant) with renamed asset and source folders and head
// counts other than the shared models'.
func setRenamedVariant(t *testing.T) {
	t.Helper()
	c, err := weights.ReadConfig(fixture.ModelConfig(t, "fixtures/clip-tiny.openai-fp16.pt"))
	if err != nil {
		t.Fatal(err)
	}
	fixture.SetVariant(t, fixture.Variant{
		VisionHeads:   fixture.OtherHeads(c.Vision.Width),
		TextHeads:     fixture.OtherHeads(c.Text.Width),
		RenameFolders: true,
	})
}

func jpegDecodeRun(t *testing.T) {
	meta, f := loadPreprocessFixture(t)
	p := fixturePreprocessor(t, meta, false)
	want := fixtureRows(t, f, "pixel_values", p)
	n := 0
	for _, im := range meta.Images {
		if im.SourceU8 == "" {
			continue
		}
		n++
		ref := fixtureRGB(t, f, im.SourceU8)
		name, b := sourceBytes(t, im.Source)
		got, err := DecodeRGB(name, b)
		if err != nil {
			t.Fatal(err)
		}
		if got.W != ref.W || got.H != ref.H {
			t.Fatalf("%s: Go decodes %dx%d, libjpeg %dx%d", im.Source, got.W, got.H, ref.W, ref.H)
		}
		maxDiff, mean := u8Diff(got.Pix, ref.Pix)
		x, err := p.Transform(nil, got)
		if err != nil {
			t.Fatal(err)
		}
		d := maxAbsDiff(x, want[im.Index])
		t.Logf("%s: Go vs libjpeg pixels: max |diff| %d, mean %.3f; pixel_values[%d] max |diff| %.4f",
			im.Source, maxDiff, mean, im.Index, d)
		// Only the inverse DCTs differ (Go's vs libjpeg's islow), by a
		// level or two per sample before colour conversion; on the
		// reference images the worst is 3 levels, mean 0.05. The bounds
		// leave room for other images but catch an upsampling or colour
		// conversion that departs from libjpeg (nearest-neighbour chroma
		// gives a mean of 1–3 and a max of 25 on CIFAR-10).
		if maxDiff > 6 || mean > 0.3 {
			t.Errorf("%s: max |diff| %d, mean %.3f levels from libjpeg's decoding, want <= 6 and <= 0.3", im.Source, maxDiff, mean)
		}
	}
	if n == 0 {
		t.Skip("fixture has no JPEG images")
	}
}

func TestTransformRGBADirectMatchesPillow(t *testing.T) {
	meta, f := loadPreprocessFixture(t)
	n := 0
	for _, im := range meta.Images {
		if im.RGBADirectRow != nil {
			n++
		}
	}
	if n == 0 {
		t.Skip("fixture has no RGBA-direct rows (no RGBA image)")
	}
	direct := fixturePreprocessor(t, meta, true)
	converted := fixturePreprocessor(t, meta, false)
	want := fixtureRows(t, f, "pixel_values_rgba_direct", direct)
	for _, im := range meta.Images {
		if im.RGBADirectRow == nil {
			continue
		}
		name, b := sourceBytes(t, im.Source)
		img, err := Decode(name, b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := direct.TransformImage(nil, img)
		if err != nil {
			t.Fatal(err)
		}
		d := maxAbsDiff(got, want[*im.RGBADirectRow])
		plain, err := converted.TransformImage(nil, img)
		if err != nil {
			t.Fatal(err)
		}
		effect := maxAbsDiff(plain, want[*im.RGBADirectRow])
		t.Logf("pixel_values_rgba_direct[%d] %s (%T): max |diff| %.3g; converting first changes it by %.4f (fixture: %.4f)",
			*im.RGBADirectRow, im.Source, img, d, effect, im.RGBADirectMax)
		if d > 1e-6 { // as in TestTransformMatchesPillow
			t.Errorf("pixel_values_rgba_direct[%d] (%s): max |diff| %g > 1e-6", *im.RGBADirectRow, im.Source, d)
		}
		if math.Abs(effect-im.RGBADirectMax) > 1e-5 {
			t.Errorf("%s: convert-first vs direct differ by %g, fixture says %g", im.Source, effect, im.RGBADirectMax)
		}
	}
}

// TestTransformWindow checks the fused resize-and-crop of Transform against
// the full Resize followed by CenterCrop, over sizes that exercise
// downscaling, upscaling, unchanged axes and extreme aspect ratios.
func TestTransformWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := [][2]int{{1, 1}, {1, 300}, {300, 1}, {32, 32}, {64, 64}, {64, 100}, {100, 64}, {224, 500}, {333, 224}, {517, 383}, {7, 1000}}
	for _, size := range []int{7, 64, 224} {
		p := NewCLIPPreprocessor(size)
		for _, wh := range sizes {
			t.Run(fmt.Sprintf("%d/%dx%d", size, wh[0], wh[1]), func(t *testing.T) {
				img := NewRGB(wh[0], wh[1])
				for i := range img.Pix {
					img.Pix[i] = uint8(rng.IntN(256))
				}
				got, err := p.Transform(nil, img)
				if err != nil {
					t.Fatal(err)
				}
				rw, rh := p.ResizedSize(img.W, img.H)
				resized, err := Resize(img, rw, rh)
				if err != nil {
					t.Fatal(err)
				}
				crop, err := CenterCrop(resized, size, size)
				if err != nil {
					t.Fatal(err)
				}
				n := size * size
				for i := range n {
					for c := range 3 {
						x := float32(crop.Pix[3*i+c]) / 255
						want := (x - CLIPMean[c]) / CLIPStd[c]
						if got[c*n+i] != want {
							t.Fatalf("pixel %d channel %d: %v, want %v", i, c, got[c*n+i], want)
						}
					}
				}
			})
		}
	}
}

// TestResizeProperties checks properties any correct resize has: a
// constant image stays constant, and an unchanged size is a copy.
func TestResizeProperties(t *testing.T) {
	for _, tc := range []struct{ w, h, ow, oh int }{
		{10, 10, 10, 10}, {10, 10, 3, 17}, {640, 427, 335, 224}, {32, 32, 224, 224}, {5, 9, 5, 2},
	} {
		img := NewRGB(tc.w, tc.h)
		for i := range img.Pix {
			img.Pix[i] = []uint8{0, 17, 255}[i%3]
		}
		got, err := Resize(img, tc.ow, tc.oh)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got.Pix {
			if want := []uint8{0, 17, 255}[i%3]; v != want {
				t.Fatalf("%dx%d→%dx%d: constant image changed at %d: %d, want %d", tc.w, tc.h, tc.ow, tc.oh, i, v, want)
			}
		}
	}
}

func TestPreprocessorErrors(t *testing.T) {
	for _, cfg := range []PreprocessConfig{
		{Size: -1},
		{Std: [3]float32{1, 0, 1}},
		{Mean: [3]float32{1, 1, 1}},
		{Std: [3]float32{1, float32(math.NaN()), 1}},
	} {
		if _, err := NewPreprocessor(cfg); err == nil {
			t.Errorf("NewPreprocessor(%+v) succeeded", cfg)
		}
	}
	p := NewCLIPPreprocessor(8)
	for _, img := range []*RGB{nil, {}, {W: 2, H: 2, Pix: make([]uint8, 11)}} {
		if _, err := p.Transform(nil, img); err == nil {
			t.Errorf("Transform(%v) succeeded", img)
		}
	}
	if _, err := p.Batch(nil, []*RGB{NewRGB(3, 3), {W: 1}}); err == nil || !strings.Contains(err.Error(), "batch image 1") {
		t.Errorf("Batch with a bad image: %v", err)
	}
	if _, err := p.TransformImage(nil, image.NewNRGBA(image.Rect(0, 0, 0, 5))); err == nil {
		t.Error("TransformImage of an empty image succeeded")
	}
	if _, err := Resize(NewRGB(2, 2), 0, 3); err == nil {
		t.Error("Resize to 0x3 succeeded")
	}
	if _, err := CenterCrop(NewRGB(2, 2), 3, 1); err == nil {
		t.Error("CenterCrop larger than the image succeeded")
	}
	if _, err := Resize(nil, 1, 1); err == nil {
		t.Error("Resize(nil) succeeded")
	}
}

func TestTransformReusesBuffer(t *testing.T) {
	p := NewCLIPPreprocessor(16)
	buf := make([]float32, p.OutputLen()+5)
	out, err := p.Transform(buf, NewRGB(20, 30))
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &buf[0] || len(out) != p.OutputLen() {
		t.Errorf("Transform did not write into the caller's buffer")
	}
}

// TestTransformConcurrent runs Transform from several goroutines (shared
// coefficient cache and scratch pools); run it with -race.
func TestTransformConcurrent(t *testing.T) {
	p := NewCLIPPreprocessor(32)
	imgs := []*RGB{NewRGB(40, 50), NewRGB(50, 40), NewRGB(33, 33), NewRGB(100, 7)}
	for i, m := range imgs {
		for j := range m.Pix {
			m.Pix[j] = uint8(i*31 + j)
		}
	}
	want := make([][]float32, len(imgs))
	for i, m := range imgs {
		want[i], _ = p.Transform(nil, m)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []float32
			for k := range 20 {
				i := (g + k) % len(imgs)
				var err error
				if buf, err = p.Transform(buf, imgs[i]); err != nil {
					errs <- err
					return
				}
				if d := maxAbsDiff(buf, want[i]); d != 0 {
					errs <- fmt.Errorf("image %d: concurrent result differs by %g", i, d)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
