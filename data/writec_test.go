package data

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/internal/fixture"
)

// progressLog records the calls of a WriteOptions.Progress.
type progressLog struct{ calls [][2]int }

func (p *progressLog) fn(done, total int) { p.calls = append(p.calls, [2]int{done, total}) }

// check verifies a complete run: the first call announces total with
// done = 0, done rises to total.
func (p *progressLog) check(t *testing.T, total int) {
	t.Helper()
	if len(p.calls) == 0 || p.calls[0] != [2]int{0, total} {
		t.Fatalf("progress calls %v: want a first call (0, %d)", p.calls, total)
	}
	last := p.calls[len(p.calls)-1]
	if last[0] != total {
		t.Errorf("progress ended at %v, want done = %d", last, total)
	}
	for k := 1; k < len(p.calls); k++ {
		if p.calls[k][0] < p.calls[k-1][0] || p.calls[k][1] != total {
			t.Fatalf("progress calls %v are not monotone with a fixed total", p.calls)
		}
	}
}

func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".tmp") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func TestWriteCIFARCRoundTrip(t *testing.T) {
	clean := cifarLike(4)
	dir := filepath.Join(t.TempDir(), "cifar10-c")
	corruptions := []string{"gaussian_noise", "contrast"}
	const seed = 5
	var log progressLog
	if err := WriteCIFARC(dir, clean, corruptions, WriteOptions{Seed: seed, Workers: 3, Progress: log.fn}); err != nil {
		t.Fatal(err)
	}
	log.check(t, 2*5*4)
	noTempFiles(t, dir)

	la, err := OpenNPY(filepath.Join(dir, "labels.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if la.Dtype != "<i8" || !slices.Equal(la.Shape, []int{20}) {
		t.Errorf("labels.npy is %s %v, want <i8 [20]", la.Dtype, la.Shape)
	}
	la.Close()

	cfg := corrupt.Config{Preset: corrupt.CIFAR}
	for _, c := range corruptions {
		for sev := 1; sev <= 5; sev++ {
			ds, err := OpenCIFARC(dir, c, sev, clean.classes)
			if err != nil {
				t.Fatal(err)
			}
			onTheFly, err := NewCorrupted(clean, c, sev, cfg, seed)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Len() != 4 || ds.Name() != onTheFly.Name() {
				t.Errorf("%s: Len %d, name %q; want 4, %q", c, ds.Len(), ds.Name(), onTheFly.Name())
			}
			for i := range 4 {
				got, label, err := ds.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				want := applyDirect(t, clean.imgs[i], i, c, sev, cfg, seed)
				fly, _, err := onTheFly.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				if worst, _ := pixelDiff(got, want); worst != 0 {
					t.Errorf("%s/%d image %d: file differs from corrupt.Apply by %d", c, sev, i, worst)
				}
				if worst, _ := pixelDiff(fly, want); worst != 0 {
					t.Errorf("%s/%d image %d: Corrupted differs from corrupt.Apply by %d", c, sev, i, worst)
				}
				if label != clean.labels[i] {
					t.Errorf("%s/%d image %d: label %d, want %d", c, sev, i, label, clean.labels[i])
				}
			}
			ds.Close()
		}
	}

	// Running again writes nothing; removing one file rewrites just that
	// one, identically.
	before, err := os.ReadFile(filepath.Join(dir, "contrast.npy"))
	if err != nil {
		t.Fatal(err)
	}
	log = progressLog{}
	if err := WriteCIFARC(dir, clean, corruptions, WriteOptions{Seed: seed, Progress: log.fn}); err != nil {
		t.Fatal(err)
	}
	log.check(t, 0)
	os.Remove(filepath.Join(dir, "contrast.npy"))
	log = progressLog{}
	if err := WriteCIFARC(dir, clean, corruptions, WriteOptions{Seed: seed, Progress: log.fn}); err != nil {
		t.Fatal(err)
	}
	log.check(t, 5*4)
	after, err := os.ReadFile(filepath.Join(dir, "contrast.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("contrast.npy written again differs")
	}

	// The folder holds 4 images per severity: writing 2 into it is
	// refused, not mixed; so is another seed (its manifest says).
	err = WriteCIFARC(dir, clean, corruptions, WriteOptions{Seed: seed, Limit: 2})
	mustErr(t, err, ManifestFile, "4 images, not 2")
	err = WriteCIFARC(dir, clean, corruptions, WriteOptions{Seed: seed + 1})
	mustErr(t, err, ManifestFile, "seed 5, not 6")
	// Without the manifest, nothing shows what made the files.
	manifest, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
	os.Remove(filepath.Join(dir, ManifestFile))
	mustErr(t, WriteCIFARC(dir, clean, corruptions, WriteOptions{Seed: seed}), "holds files but no "+ManifestFile)
	os.WriteFile(filepath.Join(dir, ManifestFile), manifest, 0o644)

	// A truncated file under the final name (not one this code leaves)
	// is reported.
	p := filepath.Join(dir, "gaussian_noise.npy")
	if err := os.WriteFile(p, before[:len(before)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	err = WriteCIFARC(dir, clean, corruptions, WriteOptions{Seed: seed})
	mustErr(t, err, "gaussian_noise.npy", "remove it")
}

func TestWriteCIFARCLimitAndErrors(t *testing.T) {
	clean := cifarLike(5)
	dir := t.TempDir()
	if err := WriteCIFARC(dir, clean, []string{"pixelate"}, WriteOptions{Limit: 2}); err != nil {
		t.Fatal(err)
	}
	ds, err := OpenCIFARC(dir, "pixelate", 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 2 {
		t.Errorf("Limit 2: Len %d", ds.Len())
	}
	ds.Close()

	mustErr(t, WriteCIFARC(t.TempDir(), clean, nil, WriteOptions{}), "no corruptions")
	mustErr(t, WriteCIFARC(t.TempDir(), clean, []string{"fog", "rain"}, WriteOptions{}), `unknown corruption "rain"`)
	mustErr(t, WriteCIFARC(t.TempDir(), clean, []string{"frost"}, WriteOptions{}), "FrostDir")
	mustErr(t, WriteCIFARC(t.TempDir(), &memDataset{name: "empty"}, []string{"fog"}, WriteOptions{}), "empty has no images")

	big := &memDataset{name: "big", imgs: []*RGB{randomRGB(32, 32, 1), randomRGB(64, 64, 2)}, labels: []int{0, 1}, classes: []string{"a", "b"}}
	bdir := t.TempDir()
	mustErr(t, WriteCIFARC(bdir, big, []string{"contrast"}, WriteOptions{}), "big: image 1", "64x64")
	if m, _ := filepath.Glob(filepath.Join(bdir, "*")); len(m) != 0 {
		t.Errorf("a failed write left %v", m)
	}
}

// imageNetTree writes a small ImageNet-style tree of PNGs of various sizes
// and opens it.
func imageNetTree(t *testing.T) *Folder {
	t.Helper()
	root := filepath.Join(t.TempDir(), "val")
	files := []struct {
		name string
		w, h int
	}{
		{"n01440764/ILSVRC2012_val_00000293.png", 40, 30},
		{"n01440764/ILSVRC2012_val_00002138.png", 256, 300},
		{"n01443537/ILSVRC2012_val_00000236.png", 30, 50},
	}
	var members []member
	for k, f := range files {
		m := randomRGB(f.w, f.h, uint64(100+k))
		img := image.NewNRGBA(image.Rect(0, 0, f.w, f.h))
		for i := 0; i < f.w*f.h; i++ {
			copy(img.Pix[4*i:], m.Pix[3*i:3*i+3])
			img.Pix[4*i+3] = 255
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		members = append(members, member{f.name, buf.Bytes()})
	}
	writeTree(t, root, members)
	ds, err := OpenImageNetFolder(root, ImageNetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	return ds
}

func TestWriteImageNetCRoundTrip(t *testing.T) {
	clean := imageNetTree(t)
	dir := t.TempDir()
	corruptions := []string{"gaussian_noise", "contrast"}
	severities := []int{5, 1}
	const seed = 11
	var log progressLog
	if err := WriteImageNetC(dir, clean, corruptions, severities, WriteOptions{Seed: seed, Progress: log.fn}); err != nil {
		t.Fatal(err)
	}
	log.check(t, 2*2*3)
	noTempFiles(t, dir)

	cfg := corrupt.Config{Preset: corrupt.ImageNet}
	for _, c := range corruptions {
		for _, sev := range severities {
			ds, err := OpenImageNetC(dir, c, sev, ImageNetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			onTheFly, err := NewCorrupted(clean, c, sev, cfg, seed)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Len() != clean.Len() || !slices.Equal(ds.Classes(), clean.Classes()) {
				t.Fatalf("%s/%d: %d images of classes %v, want %d of %v", c, sev, ds.Len(), ds.Classes(), clean.Len(), clean.Classes())
			}
			for i := range ds.Len() {
				if want := strings.TrimSuffix(clean.File(i), ".png") + ".JPEG"; ds.File(i) != want {
					t.Errorf("%s/%d image %d is %s, want %s", c, sev, i, ds.File(i), want)
				}
				got, label, err := ds.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				// The reference pipeline, step by step.
				src, _, err := clean.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				rw, rh := resizedSize(256, src.W, src.H)
				resized, err := ResizeBilinear(src, rw, rh)
				if err != nil {
					t.Fatal(err)
				}
				cropped, err := CenterCrop(resized, 224, 224)
				if err != nil {
					t.Fatal(err)
				}
				want := jpegRoundTrip(t, applyDirect(t, cropped, i, c, sev, cfg, seed))
				if worst, _ := pixelDiff(got, want); worst != 0 {
					t.Errorf("%s/%d image %d: file differs from the reference pipeline by %d", c, sev, i, worst)
				}
				fly, _, err := onTheFly.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				if worst, _ := pixelDiff(fly, got); worst != 0 {
					t.Errorf("%s/%d image %d: Corrupted differs from the file by %d", c, sev, i, worst)
				}
				if label != clean.Label(i) {
					t.Errorf("%s/%d image %d: label %d, want %d", c, sev, i, label, clean.Label(i))
				}
			}
			ds.Close()
		}
	}

	// Resuming writes only what is missing.
	log = progressLog{}
	if err := WriteImageNetC(dir, clean, corruptions, severities, WriteOptions{Seed: seed, Progress: log.fn}); err != nil {
		t.Fatal(err)
	}
	log.check(t, 0)
	os.Remove(filepath.Join(dir, "contrast", "1", "n01443537", "ILSVRC2012_val_00000236.JPEG"))
	log = progressLog{}
	if err := WriteImageNetC(dir, clean, corruptions, severities, WriteOptions{Seed: seed, Progress: log.fn, Limit: 3}); err != nil {
		t.Fatal(err)
	}
	log.check(t, 1)
	if _, err := os.Stat(filepath.Join(dir, "contrast", "1", "n01443537", "ILSVRC2012_val_00000236.JPEG")); err != nil {
		t.Error(err)
	}
}

func TestWriteImageNetCErrors(t *testing.T) {
	clean := imageNetTree(t)
	for _, tc := range []struct {
		sev  []int
		want string
	}{
		{nil, "no severities"},
		{[]int{0}, "severity 0"},
		{[]int{2, 6}, "severity 6"},
		{[]int{3, 3}, "severity 3 is listed twice"},
	} {
		mustErr(t, WriteImageNetC(t.TempDir(), clean, []string{"contrast"}, tc.sev, WriteOptions{}), tc.want)
	}
	mustErr(t, WriteImageNetC(t.TempDir(), clean, []string{"Fog"}, []int{1}, WriteOptions{}), `unknown corruption "Fog"`)

	// Two files that map to the same output name.
	root := t.TempDir()
	writeTree(t, root, []member{{"n1/a.png", pngOf(t, 8, 8, 1, 2, 3)}, {"n1/a.jpg", jpegOf(t, 8, 8)}})
	ds, err := OpenImageNetFolder(root, ImageNetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	mustErr(t, WriteImageNetC(t.TempDir(), ds, []string{"contrast"}, []int{1}, WriteOptions{}), "n1/a.JPEG")

	// Without File(i), images are named by class and index.
	mem := &memDataset{name: "mem", imgs: []*RGB{randomRGB(10, 10, 1)}, labels: []int{1}, classes: []string{"a", "b/c"}}
	dir := t.TempDir()
	if err := WriteImageNetC(dir, mem, []string{"contrast"}, []int{2}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "contrast", "2", "b_c", "00000000.JPEG")); err != nil {
		t.Error(err)
	}
}

// TestWriteCIFARCFrostInManifest: the frost overlays are part of what made
// a folder once frost is written into it; frost from other overlays is
// refused, and writing other corruptions does not need them.
func TestWriteCIFARCFrostInManifest(t *testing.T) {
	overlays := filepath.Dir(fixture.Path(t, "assets/corruptions/frost1.png"))
	other := t.TempDir()
	for _, name := range []string{"frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"} {
		b, err := os.ReadFile(filepath.Join(overlays, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "frost1.png" {
			b = append(b, 0) // another file, the same image
		}
		os.WriteFile(filepath.Join(other, name), b, 0o644)
	}
	clean := cifarLike(2)
	dir := t.TempDir()
	if err := WriteCIFARC(dir, clean, []string{"contrast"}, WriteOptions{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := WriteCIFARC(dir, clean, []string{"frost"}, WriteOptions{Seed: 1, FrostDir: overlays}); err != nil {
		t.Fatal(err)
	}
	if err := WriteCIFARC(dir, clean, []string{"contrast", "fog"}, WriteOptions{Seed: 1}); err != nil {
		t.Fatalf("other corruptions into a folder with frost: %v", err)
	}
	mustErr(t, WriteCIFARC(dir, clean, []string{"frost", "contrast"}, WriteOptions{Seed: 1, FrostDir: other}), ManifestFile, "frost overlays")
}

// TestWriteInterrupted cancels WriteOptions.Context midway: the writers
// stop with an *Interrupted that counts the images in finished files,
// keep those files and leave no temporary one; running again writes only
// the rest.
func TestWriteInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name        string
		write       func(dir string, opts WriteOptions) error
		total, stop int // images to write; cancel once stop are done
		written     int // images in finished files when stopped
	}{
		{"cifar-c", func(dir string, opts WriteOptions) error {
			return WriteCIFARC(dir, cifarLike(4), []string{"gaussian_noise", "contrast"}, opts)
		}, 2 * 5 * 4, 5*4 + 5, 5 * 4}, // the second file, cut short, is not kept
		{"imagenet-c", func(dir string, opts WriteOptions) error {
			return WriteImageNetC(dir, imageNetTree(t), []string{"gaussian_noise", "contrast"}, []int{1, 5}, opts)
		}, 2 * 2 * 3, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			opts := WriteOptions{Seed: 3, Workers: 1, Context: ctx}
			opts.Progress = func(done, total int) {
				if done >= tc.stop {
					cancel()
				}
			}
			err := tc.write(dir, opts)
			var ie *Interrupted
			if !errors.As(err, &ie) || !errors.Is(err, context.Canceled) || ie.Written != tc.written || ie.Total != tc.total {
				t.Fatalf("got %v (%+v), want *Interrupted: %d of %d written", err, ie, tc.written, tc.total)
			}
			noTempFiles(t, dir)
			var log progressLog
			if err := tc.write(dir, WriteOptions{Seed: 3, Progress: log.fn}); err != nil {
				t.Fatal(err)
			}
			log.check(t, tc.total-tc.written)
		})
	}
}
