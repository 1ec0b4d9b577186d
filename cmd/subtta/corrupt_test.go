package main

import (
	"bytes"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/internal/fixture"
)

// writeNoisePNGs writes w×h PNGs of random pixels at root/<name> for each
// name.
func writeNoisePNGs(t *testing.T, root string, w, h int, names ...string) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	for _, name := range names {
		img := image.NewNRGBA(image.Rect(0, 0, w, h))
		for i := range img.Pix {
			img.Pix[i] = uint8(r.IntN(256))
			if i%4 == 3 {
				img.Pix[i] = 255
			}
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runCLI runs the command line and returns its status, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	st := run(args, &out, &errb)
	return st, out.String(), errb.String()
}

// checkCIFARC compares every image of the CIFAR-C folder dir with clean
// corrupted on the fly, and its labels with clean's.
func checkCIFARC(t *testing.T, dir string, clean data.Dataset, corruptions []string, n int, seed uint64, frost string) {
	t.Helper()
	for _, c := range corruptions {
		for sev := 1; sev <= 5; sev++ {
			ds, err := data.OpenCIFARC(dir, c, sev, clean.Classes())
			if err != nil {
				t.Fatal(err)
			}
			want, err := data.NewCorrupted(clean, c, sev, corrupt.Config{Preset: corrupt.CIFAR, FrostDir: frost}, seed)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Len() != n {
				t.Fatalf("%s: %d images, want %d", ds.Name(), ds.Len(), n)
			}
			for i := range n {
				got, label, err := ds.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				w, wl, err := want.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Pix, w.Pix) || label != wl {
					t.Errorf("%s image %d (label %d) differs from the clean image corrupted on the fly (label %d)", ds.Name(), i, label, wl)
				}
			}
			ds.Close()
		}
	}
}

func TestCorruptCIFARFolder(t *testing.T) {
	tmp := t.TempDir()
	clean := filepath.Join(tmp, "clean")
	writeNoisePNGs(t, clean, 32, 32, "cat/0000.png", "cat/0001.png", "airplane/0000.png")
	// Two of the ten classes have folders: the labels folder places them.
	labels := filepath.Join(tmp, "labels")
	os.MkdirAll(labels, 0o755)
	classes := "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n"
	if err := os.WriteFile(filepath.Join(labels, "cifar10_classes.txt"), []byte(classes), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "CIFAR-10-C")
	args := []string{"corrupt", "--dataset", "cifar10", "--data", clean, "--labels", labels, "--out", out,
		"--corruptions", "gaussian_noise, contrast", "--seed", "3", "--workers", "2"}
	st, stdout, stderr := runCLI(args...)
	if st != 0 {
		t.Fatalf("status %d: %s", st, stderr)
	}
	t.Logf("stdout: %s", stdout)
	if !strings.Contains(stdout, "wrote 30 corrupted images") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("summary %q: want one line saying 30 images were written", stdout)
	}
	if !strings.Contains(stderr, "img/s") || !strings.Contains(stderr, "30/30") {
		t.Errorf("stderr %q: want a progress bar", stderr)
	}

	l, err := data.ReadLabels(labels, "cifar10")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := data.OpenFolder(clean, data.FolderOptions{Classes: l.Classes})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	checkCIFARC(t, out, ds, []string{"gaussian_noise", "contrast"}, 3, 3, "")
	lab, err := data.OpenCIFARC(out, "contrast", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int{lab.Label(0), lab.Label(1), lab.Label(2)}; !slices.Equal(got, []int{0, 3, 3}) {
		t.Errorf("labels %v, want [0 3 3] (airplane, cat, cat)", got)
	}
	lab.Close()

	// Again: nothing to do.
	st, stdout, stderr = runCLI(args...)
	if st != 0 || !strings.Contains(stdout, "nothing to write") {
		t.Errorf("second run: status %d, stdout %q, stderr %q", st, stdout, stderr)
	}

	// Without --labels two class folders cannot be placed among ten.
	st, _, stderr = runCLI("corrupt", "--dataset", "cifar10", "--data", clean, "--out", t.TempDir(), "--corruptions", "fog")
	if st != 1 || !strings.Contains(stderr, "2 class folders") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("without --labels: status %d, stderr %q", st, stderr)
	}
}

// TestCorruptCIFARBinary writes a CIFAR-10-C from a synthetic copy of the
// binary version (test_batch.bin), keeping the first 2 of 4 images.
func TestCorruptCIFARBinary(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "cifar-10-batches-bin")
	os.MkdirAll(bin, 0o755)
	r := rand.New(rand.NewPCG(1, 2))
	var recs []byte
	for k := range 4 {
		recs = append(recs, byte(9-k))
		for range 3072 {
			recs = append(recs, byte(r.IntN(256)))
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "test_batch.bin"), recs, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "c")
	st, stdout, stderr := runCLI("corrupt", "--dataset", "cifar10", "--data", tmp, "--out", out, "--corruptions", "shot_noise,pixelate", "--limit", "2")
	if st != 0 {
		t.Fatalf("status %d: %s", st, stderr)
	}
	if !strings.Contains(stdout, "wrote 20 corrupted images of cifar10-test (2 corruptions × 5 severities × 2 images)") {
		t.Errorf("summary %q", stdout)
	}
	clean, err := data.OpenCIFAR10(tmp, data.Test)
	if err != nil {
		t.Fatal(err)
	}
	// --limit 2 of 4 takes images 0 and 2 (spread over the set).
	checkCIFARC(t, out, data.Spread(clean, 2), []string{"shot_noise", "pixelate"}, 2, 1, "")
}

func TestCorruptImageNet(t *testing.T) {
	tmp := t.TempDir()
	clean := filepath.Join(tmp, "val")
	writeNoisePNGs(t, clean, 48, 36, "n01440764/ILSVRC2012_val_00000293.png", "n01443537/ILSVRC2012_val_00000236.png")
	out := filepath.Join(tmp, "ImageNet-C")
	st, stdout, stderr := runCLI("corrupt", "--dataset", "imagenet", "--data", clean, "--out", out,
		"--corruptions", "contrast,gaussian_noise", "--severities", "2,4", "--seed", "8")
	if st != 0 {
		t.Fatalf("status %d: %s", st, stderr)
	}
	if !strings.Contains(stdout, "wrote 8 corrupted images") {
		t.Errorf("summary %q", stdout)
	}
	ref, err := data.OpenImageNetFolder(clean, data.ImageNetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for _, c := range []string{"contrast", "gaussian_noise"} {
		for _, sev := range []int{2, 4} {
			ds, err := data.OpenImageNetC(out, c, sev, data.ImageNetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := data.NewCorrupted(ref, c, sev, corrupt.Config{Preset: corrupt.ImageNet}, 8)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Len() != 2 || ds.File(1) != "n01443537/ILSVRC2012_val_00000236.JPEG" {
				t.Fatalf("%s/%d: %d images, second %s", c, sev, ds.Len(), ds.File(1))
			}
			for i := range 2 {
				got, label, err := ds.Item(i)
				if err != nil {
					t.Fatal(err)
				}
				w, wl, _ := want.Item(i)
				if got.W != 224 || got.H != 224 || !bytes.Equal(got.Pix, w.Pix) || label != wl {
					t.Errorf("%s/%d image %d differs from the clean image corrupted on the fly", c, sev, i)
				}
			}
			ds.Close()
		}
	}
	if _, err := os.Stat(filepath.Join(out, "contrast", "1")); err == nil {
		t.Error("severity 1 was written though not asked for")
	}
}

func TestCorruptBadInput(t *testing.T) {
	tmp := t.TempDir()
	clean := filepath.Join(tmp, "clean")
	writeNoisePNGs(t, clean, 32, 32, "a/0.png")
	labels := filepath.Join(tmp, "labels")
	os.MkdirAll(labels, 0o755)
	os.WriteFile(filepath.Join(labels, "cifar10_classes.txt"), []byte("a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"), 0o644)
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"--data", clean, "--out", tmp}, 2, "--dataset must be"},
		{[]string{"--dataset", "svhn", "--data", clean, "--out", tmp}, 2, `not "svhn"`},
		{[]string{"--dataset", "cifar10", "--out", tmp}, 2, "--data is required"},
		{[]string{"--dataset", "cifar10", "--data", clean}, 2, "--out is required"},
		{[]string{"--dataset", "cifar10", "--data", clean, "--out", tmp, "--corruptions", "fog,mist"}, 2, `unknown corruption "mist"`},
		{[]string{"--dataset", "cifar10", "--data", clean, "--out", tmp, "--corruptions", "fog,fog"}, 2, "fog is listed twice"},
		{[]string{"--dataset", "cifar10", "--data", clean, "--out", tmp, "--corruptions", ","}, 2, "--corruptions is empty"},
		{[]string{"--dataset", "imagenet", "--data", clean, "--out", tmp, "--severities", "0"}, 2, `"0" is not a severity`},
		{[]string{"--dataset", "imagenet", "--data", clean, "--out", tmp, "--severities", "2,x"}, 2, `"x" is not a severity`},
		{[]string{"--dataset", "imagenet", "--data", clean, "--out", tmp, "--labels", tmp}, 2, "--labels applies"},
		{[]string{"--dataset", "cifar10", "--data", clean, "--out", tmp, "--severities", "5"}, 2, "all five severities"},
		{[]string{"--dataset", "cifar10", "--data", clean, "--out", tmp, "--limit", "-1"}, 2, "--limit -1"},
		{[]string{"--dataset", "cifar10", "--data", clean, "--out", tmp, "--bogus"}, 2, "bogus"},
		{[]string{"--dataset", "cifar10", "--data", filepath.Join(tmp, "missing"), "--out", tmp}, 1, "missing: no such file"},
		{[]string{"--dataset", "imagenet", "--data", clean, "--out", tmp, "--corruptions", "frost", "--frost", tmp}, 1, "lacks frost1.png"},
		{[]string{"--dataset", "imagenet", "--data", clean, "--out", tmp, "--subset", filepath.Join(tmp, "nolist.txt")}, 1, "nolist.txt"},
		{[]string{"--dataset", "cifar10", "--data", clean, "--out", filepath.Join(clean, "a", "0.png"), "--labels", labels, "--corruptions", "contrast"}, 1, "corrupt: --out: mkdir " + filepath.Join(clean, "a", "0.png") + ": not a directory"},
	} {
		st, _, stderr := runCLI(append([]string{"corrupt"}, tc.args...)...)
		if st != tc.status || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("corrupt %q: status %d, stderr %q; want %d and %q", tc.args, st, stderr, tc.status, tc.stderr)
		}
		if tc.status == 1 && strings.Count(stderr, "\n") != 1 {
			t.Errorf("corrupt %q: stderr %q is not one line", tc.args, stderr)
		}
	}
}

// TestCorruptSharedCIFAR10 corrupts 3 images spread over the shared CIFAR-10
// test JPEGs (a folder ordered by class: three different classes), with
// frost from the shared overlays.
func TestCorruptSharedCIFAR10(t *testing.T) {
	archive := fixture.Path(t, "assets/cifar10/test-jpg.tar.gz")
	frost := fixture.Path(t, "assets/corruptions")
	labels := fixture.Path(t, "assets/labels")
	out := t.TempDir()
	st, stdout, stderr := runCLI("corrupt", "--dataset", "cifar10", "--data", archive, "--labels", labels, "--out", out,
		"--corruptions", "gaussian_noise,frost", "--frost", frost, "--limit", "3")
	if st != 0 {
		t.Fatalf("status %d: %s", st, stderr)
	}
	t.Logf("stdout: %s", stdout)
	l, err := data.ReadLabels(labels, "cifar10")
	if err != nil {
		t.Fatal(err)
	}
	clean, err := data.OpenFolder(archive, data.FolderOptions{Classes: l.Classes})
	if err != nil {
		t.Fatal(err)
	}
	defer clean.Close()
	spread := data.Spread(clean, 3)
	if a, b, c := spread.Label(0), spread.Label(1), spread.Label(2); a == b || b == c || a == c {
		t.Errorf("--limit 3 took labels %d, %d, %d: want three classes", a, b, c)
	}
	checkCIFARC(t, out, spread, []string{"gaussian_noise", "frost"}, 3, 1, frost)
}

// TestCorruptFolderRecordsItsMaker: a folder records the seed, severities
// and clean images that made it; writing into it with another is refused,
// naming what differs, and leaves its files as they were.
func TestCorruptFolderRecordsItsMaker(t *testing.T) {
	tmp := t.TempDir()
	clean := filepath.Join(tmp, "clean")
	writeNoisePNGs(t, clean, 40, 30, "n01440764/a.png", "n01440764/b.png", "n01443537/c.png")
	out := filepath.Join(tmp, "ImageNet-C")
	base := []string{"corrupt", "--dataset", "imagenet", "--data", clean, "--out", out, "--corruptions", "contrast", "--workers", "1"}
	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	if st, _, stderr := runCLI(with("--seed", "1", "--severities", "1,2")...); st != 0 {
		t.Fatalf("status %d: %s", st, stderr)
	}
	written := filepath.Join(out, "contrast", "2", "n01440764", "a.JPEG")
	before, err := os.ReadFile(written)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "other")
	writeNoisePNGs(t, other, 40, 31, "n01440764/a.png", "n01440764/b.png", "n01443537/c.png")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{with("--seed", "2", "--severities", "1,2"), "seed 1, not 2"},
		{with("--seed", "1", "--severities", "1,2,3"), "severities [1 2], not [1 2 3]"},
		{with("--seed", "1", "--severities", "1,2", "--limit", "2"), "images"},
		{[]string{"corrupt", "--dataset", "imagenet", "--data", other, "--out", out, "--corruptions", "contrast", "--seed", "1", "--severities", "1,2"}, "source"},
	} {
		st, stdout, stderr := runCLI(tc.args...)
		if st != 1 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "corrupt.json") {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want 1 and an error naming %q", tc.args[8:], st, stdout, stderr, tc.want)
		}
	}
	if after, _ := os.ReadFile(written); !bytes.Equal(before, after) {
		t.Error("a refused run changed the folder's images")
	}
	if st, stdout, stderr := runCLI(with("--seed", "1", "--severities", "1,2")...); st != 0 || !strings.Contains(stdout, "nothing to write") {
		t.Errorf("the same command again: status %d, stdout %q, stderr %q", st, stdout, stderr)
	}
}

// writeCIFAR10Binary writes n random images as the CIFAR-10 binary
// version's test batch into dir.
func writeCIFAR10Binary(t *testing.T, dir string, n int) {
	t.Helper()
	bin := filepath.Join(dir, "cifar-10-batches-bin")
	os.MkdirAll(bin, 0o755)
	r := rand.New(rand.NewPCG(1, 2))
	recs := make([]byte, 0, n*3073)
	for k := range n {
		recs = append(recs, byte(k%10))
		for range 3072 {
			recs = append(recs, byte(r.IntN(256)))
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "test_batch.bin"), recs, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptLimitOverImages: a --limit above the dataset's images writes
// them all and says so on stderr.
func TestCorruptLimitOverImages(t *testing.T) {
	tmp := t.TempDir()
	writeCIFAR10Binary(t, tmp, 4)
	st, stdout, stderr := runCLI("corrupt", "--dataset", "cifar10", "--data", tmp, "--out", filepath.Join(tmp, "c"), "--corruptions", "contrast", "--limit", "9")
	if st != 0 || !strings.Contains(stderr, "note: --limit 9, but cifar10-test holds 4 images: writing all 4\n") ||
		!strings.Contains(stdout, "wrote 20 corrupted images") {
		t.Errorf("status %d, stdout %q, stderr %q", st, stdout, stderr)
	}
}

// interruptWhen sends the test process SIGINT once, when ready reports
// true (asked every poll), as Ctrl-C would while a command runs in the
// test (signalWhen).
func interruptWhen(t *testing.T, poll time.Duration, ready func() bool) (stop func()) {
	t.Helper()
	return signalWhen(t, syscall.SIGINT, poll, ready)
}

// TestCorruptInterrupted sends SIGINT once the first of three CIFAR-C files
// is written: corrupt stops with status 130, says how much it wrote and
// keeps the finished files; the same command then writes the rest.
func TestCorruptInterrupted(t *testing.T) {
	tmp := t.TempDir()
	clean := filepath.Join(tmp, "clean")
	writeCIFAR10Binary(t, clean, 600)
	out := filepath.Join(tmp, "c")
	args := []string{"corrupt", "--dataset", "cifar10", "--data", clean, "--out", out, "--corruptions", "contrast,glass_blur,zoom_blur", "--workers", "1"}
	stop := interruptWhen(t, 5*time.Millisecond, func() bool {
		_, err := os.Stat(filepath.Join(out, "contrast.npy"))
		return err == nil
	})
	st, stdout, stderr := runCLI(args...)
	stop()
	if st != 130 || !regexp.MustCompile(`interrupted: (3000|6000) of 9000 written.*; the same command resumes\n$`).MatchString(stderr) || stdout != "" {
		t.Fatalf("status %d, stdout %q, stderr %q: want 130 and the images written", st, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "contrast.npy")); err != nil {
		t.Error(err)
	}
	st, stdout, stderr = runCLI(args...)
	if st != 0 || !strings.Contains(stdout, "were already there") {
		t.Errorf("resumed: status %d, stdout %q, stderr %q", st, stdout, stderr)
	}
}

// TestCorruptFrostBuiltin: frost without --frost or SUBTTA_FROST uses the
// overlays the binary embeds (it used to download them), on the built-in
// images, and gives what those overlays give.
func TestCorruptFrostBuiltin(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("SUBTTA_CACHE", cache)
	t.Setenv("SUBTTA_FROST", "")
	subset, frost, err := builtin.Extract(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	st, _, stderr := runCLI("corrupt", "--dataset", "cifar10", "--data", subset, "--out", out, "--corruptions", "frost", "--limit", "2")
	if st != 0 {
		t.Fatalf("status %d: %s", st, stderr)
	}
	if strings.Contains(stderr, "download") {
		t.Errorf("stderr speaks of a download: %s", stderr)
	}
	clean, err := data.OpenFolder(subset, data.FolderOptions{Classes: data.CIFAR10Classes})
	if err != nil {
		t.Fatal(err)
	}
	defer clean.Close()
	checkCIFARC(t, out, data.Spread(clean, 2), []string{"frost"}, 2, 1, frost)
}

// TestCorruptUnusedFrost: --frost with no frost among the corruptions is
// said, not ignored in silence.
func TestCorruptUnusedFrost(t *testing.T) {
	t.Setenv("SUBTTA_CACHE", t.TempDir())
	subset, frost, err := builtin.Extract(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, _, stderr := runCLI("corrupt", "--dataset", "cifar10", "--data", subset, "--out", t.TempDir(),
		"--corruptions", "gaussian_noise", "--limit", "1", "--frost", frost)
	if st != 0 || !strings.Contains(stderr, "warning: --frost "+frost+" is not used") {
		t.Errorf("status %d, stderr %q: want 0 and a warning that --frost is not used", st, stderr)
	}
}
