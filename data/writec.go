package data

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/subtta/subtta/data/corrupt"
)

// WriteOptions configures WriteCIFARC and WriteImageNetC.
type WriteOptions struct {
	// Seed selects the random draws (see corrupt.NewSource); image i of
	// the clean dataset draws from the stream of (Seed, i, corruption,
	// severity), whatever else is written.
	Seed uint64
	// FrostDir is the folder with the frost overlays (corrupt.Config);
	// only frost needs it.
	FrostDir string
	// Limit, if positive, writes only the first Limit clean images. On a
	// set ordered by class these may all be of one class: pass
	// Spread(clean, n) instead to take n images over the whole set.
	Limit int
	// Workers is the number of images corrupted at once; 0 means
	// GOMAXPROCS.
	Workers int
	// Source identifies the clean images (a content hash of the files they
	// come from, say); it is recorded in the folder's manifest
	// (ManifestFile) with the seed, severities and image count, and a
	// folder whose manifest records another is refused.
	Source string
	// Progress, if set, is called with the number of corrupted images
	// written so far and the number to write: once with done = 0 before
	// any work, then as images are done. Images of files that already
	// exist are not counted. Calls are serialised.
	Progress func(done, total int)
	// Context, if set, stops the writer when it is done (an interrupt):
	// no new image is started, every file finished is kept, and the
	// writer returns an *Interrupted. Running again resumes.
	Context context.Context
}

// Interrupted is the error of a writer stopped by its
// WriteOptions.Context: Written of the Total corrupted images it had to
// write are in finished files (a CIFAR-C file holds a corruption's images
// of all severities, so one cut short is not kept). It wraps the
// context's error.
type Interrupted struct {
	Written, Total int
	Err            error
}

func (e *Interrupted) Error() string {
	return fmt.Sprintf("data: interrupted (%v): %d of %d corrupted images written", e.Err, e.Written, e.Total)
}

func (e *Interrupted) Unwrap() error { return e.Err }

// stopped returns the error of opts.Context once it is done, nil before
// or without one.
func (opts WriteOptions) stopped() error {
	if opts.Context == nil {
		return nil
	}
	return opts.Context.Err()
}

// ManifestFile, in a folder that WriteCIFARC or WriteImageNetC writes,
// records what made it (manifest): writing into the folder again with
// another seed, severity set, image count or source is refused, since
// the files already there would be kept and mixed with or taken for the
// new ones.
const ManifestFile = "corrupt.json"

// manifest is the content of ManifestFile.
type manifest struct {
	Layout     string `json:"layout"` // "cifar-c" or "imagenet-c"
	Source     string `json:"source"` // WriteOptions.Source
	Images     int    `json:"images"` // clean images written per corruption and severity
	Seed       uint64 `json:"seed"`
	Severities []int  `json:"severities"`
	// Frost identifies the frost overlays (frostFingerprint) once frost
	// is written; writing other corruptions does not need them.
	Frost string `json:"frost,omitempty"`
}

// frostFingerprint identifies the frost overlays in dir by their contents.
func frostFingerprint(dir string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("data: frost overlays: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return "sha256 " + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// checkManifest refuses to write m's images into dir when dir's manifest
// records another maker, naming what differs, or when dir holds files but
// no manifest (nothing shows what made them). It reports whether the
// manifest is still to be written (writeManifest), once the first images
// are ready, so that a write that fails at once leaves nothing.
//
// The manifest to record is m with the frost overlays of dir's manifest
// when m writes no frost; write is false when dir's manifest already says
// as much.
func checkManifest(dir string, m manifest) (record manifest, write bool, err error) {
	p := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		var old manifest
		if err := json.Unmarshal(b, &old); err != nil {
			return m, false, fmt.Errorf("data: %s: %w (remove the folder to write it again)", p, err)
		}
		if m.Frost == "" {
			m.Frost = old.Frost
		}
		var diffs []string
		if old.Layout != m.Layout {
			diffs = append(diffs, fmt.Sprintf("layout %s, not %s", old.Layout, m.Layout))
		}
		if old.Seed != m.Seed {
			diffs = append(diffs, fmt.Sprintf("seed %d, not %d", old.Seed, m.Seed))
		}
		if !slices.Equal(old.Severities, m.Severities) {
			diffs = append(diffs, fmt.Sprintf("severities %v, not %v", old.Severities, m.Severities))
		}
		if old.Images != m.Images {
			diffs = append(diffs, fmt.Sprintf("%d images, not %d", old.Images, m.Images))
		}
		if old.Source != m.Source {
			diffs = append(diffs, fmt.Sprintf("source %q, not %q", old.Source, m.Source))
		}
		if old.Frost != "" && old.Frost != m.Frost {
			diffs = append(diffs, fmt.Sprintf("frost overlays %s, not %s", old.Frost, m.Frost))
		}
		if len(diffs) > 0 {
			return m, false, fmt.Errorf("data: %s was written with %s (%s): write elsewhere, or remove the folder to write it again",
				dir, strings.Join(diffs, "; "), ManifestFile)
		}
		return m, old.Frost != m.Frost, nil
	case !errors.Is(err, fs.ErrNotExist):
		return m, false, fmt.Errorf("data: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return m, false, fmt.Errorf("data: %w", err)
	}
	if len(entries) > 0 {
		return m, false, fmt.Errorf("data: %s holds files but no %s, so nothing shows which seed, severities and images made them: write elsewhere, or remove the folder to write it again",
			dir, ManifestFile)
	}
	return m, true, nil
}

// writeManifest records m in dir's ManifestFile.
func writeManifest(dir string, m manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, ManifestFile), true, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// WriteCIFARC writes a CIFAR-10-C or CIFAR-100-C folder made from clean,
// whose images must be 32×32, in the official layout that OpenCIFARC reads:
// for each corruption, <corruption>.npy, a uint8 array [5n, 32, 32, 3] of
// the n clean images at severity 1, then 2, …, 5, and labels.npy, the
// int64 labels [5n].
//
// Files are written to a temporary name and renamed when complete, so an
// interrupted run never leaves a truncated file under a final name. A
// corruption whose file already exists (with the expected shape) is
// skipped, so that running again resumes; an existing labels.npy must hold
// clean's labels, or the folder was made from other images and WriteCIFARC
// fails rather than mix them.
func WriteCIFARC(dir string, clean Dataset, corruptions []string, opts WriteOptions) error {
	cfg := corrupt.Config{Preset: corrupt.CIFAR, FrostDir: opts.FrostDir}
	if len(corruptions) == 0 {
		return errors.New("data: WriteCIFARC: no corruptions given")
	}
	if err := checkCorruptions(corruptions, cfg); err != nil {
		return err
	}
	n, err := imagesToWrite(clean, opts.Limit)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	made := manifest{Layout: "cifar-c", Source: opts.Source, Images: n, Seed: opts.Seed, Severities: []int{1, 2, 3, 4, 5}}
	if slices.Contains(corruptions, "frost") {
		if made.Frost, err = frostFingerprint(opts.FrostDir); err != nil {
			return err
		}
	}
	made, newManifest, err := checkManifest(dir, made)
	if err != nil {
		return err
	}
	labelsPath := filepath.Join(dir, "labels.npy")
	labels, haveLabels, err := cifarCLabels(labelsPath, clean, n)
	if err != nil {
		return err
	}

	s := cfg.Preset.Size()
	rowBytes := s * s * 3
	shape := []int{Severities * n, s, s, 3}
	var todo []string
	for _, c := range corruptions {
		done, err := existingNPY(filepath.Join(dir, c+".npy"), shape)
		if err != nil {
			return err
		}
		if !done {
			todo = append(todo, c)
		}
	}
	prog := newProgressCounter(opts.Progress, len(todo)*Severities*n)
	if len(todo) == 0 {
		if newManifest {
			if err := writeManifest(dir, made); err != nil {
				return err
			}
		}
		if !haveLabels {
			return writeCIFARCLabels(labelsPath, labels)
		}
		return nil
	}

	// The clean images, read once for all corruptions (3 KB each).
	imgs := make([]*RGB, n)
	total := len(todo) * Severities * n
	err = parallelFor(n, opts.Workers, func(i int) error {
		if err := opts.stopped(); err != nil {
			return err
		}
		img, _, err := clean.Item(i)
		if err != nil {
			return err
		}
		if imgs[i], err = corruptionInput(img, cfg.Preset); err != nil {
			return fmt.Errorf("data: %s: image %d: %w", clean.Name(), i, err)
		}
		return nil
	})
	if err != nil {
		if serr := opts.stopped(); serr != nil {
			return &Interrupted{Written: 0, Total: total, Err: serr}
		}
		return err
	}
	if newManifest {
		if err := writeManifest(dir, made); err != nil {
			return err
		}
	}
	if !haveLabels {
		if err := writeCIFARCLabels(labelsPath, labels); err != nil {
			return err
		}
	}

	buf := make([]byte, Severities*n*rowBytes)
	for k, c := range todo {
		err := parallelFor(n, opts.Workers, func(i int) error {
			if err := opts.stopped(); err != nil {
				return err
			}
			for sev := 1; sev <= Severities; sev++ {
				out, err := corruptImage(imgs[i], i, c, sev, cfg, opts.Seed)
				if err != nil {
					return fmt.Errorf("data: %s: image %d: %w", clean.Name(), i, err)
				}
				copy(buf[((sev-1)*n+i)*rowBytes:], out.Pix)
			}
			prog.add(Severities)
			return nil
		})
		if err != nil {
			if serr := opts.stopped(); serr != nil {
				return &Interrupted{Written: k * Severities * n, Total: total, Err: serr}
			}
			return err
		}
		err = writeFileAtomic(filepath.Join(dir, c+".npy"), true, func(w io.Writer) error {
			return WriteNPY(w, "|u1", shape, buf)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// cifarCLabels returns the labels of labels.npy at p: those of the first n
// images of clean repeated for the 5 severities. It reports whether p
// already holds them, and fails if p holds others.
func cifarCLabels(p string, clean Dataset, n int) (labels []int, exists bool, err error) {
	want := make([]int, Severities*n)
	for i := range n {
		want[i] = clean.Label(i)
	}
	for k := 1; k < Severities; k++ {
		copy(want[k*n:(k+1)*n], want[:n])
	}
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return want, false, nil
	}
	a, err := OpenNPY(p)
	if err != nil {
		return nil, false, fmt.Errorf("%w (remove it to write it again)", err)
	}
	have, err := a.Ints()
	a.Close()
	if err != nil {
		return nil, false, err
	}
	if !slices.Equal(have, want) {
		return nil, false, fmt.Errorf("data: %s exists and holds other labels (%d rows, want %d): the folder was written from other images; remove it or write elsewhere", p, len(have), len(want))
	}
	return want, true, nil
}

// writeCIFARCLabels writes labels as an int64 .npy at p.
func writeCIFARCLabels(p string, labels []int) error {
	raw := make([]byte, 8*len(labels))
	for i, l := range labels {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(int64(l)))
	}
	return writeFileAtomic(p, true, func(w io.Writer) error {
		return WriteNPY(w, "<i8", []int{len(labels)}, raw)
	})
}

// existingNPY reports whether a complete uint8 .npy of the given shape is
// at p. A file of another shape or dtype is an error: it belongs to another
// dataset.
func existingNPY(p string, shape []int) (bool, error) {
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	a, err := OpenNPY(p) // checks the file's size against its header
	if err != nil {
		return false, fmt.Errorf("%w (remove it to write it again)", err)
	}
	defer a.Close()
	if a.Dtype != "|u1" && a.Dtype != "<u1" || !slices.Equal(a.Shape, shape) {
		return false, fmt.Errorf("data: %s exists as %s %v, want |u1 %v: it was written from other images; remove it or write elsewhere", p, a.Dtype, a.Shape, shape)
	}
	return true, nil
}

// WriteImageNetC writes an ImageNet-C-style folder made from clean, laid
// out as OpenImageNetC reads it: dir/<corruption>/<severity>/<class
// folder>/<file stem>.JPEG for each corruption and severity. Each image goes
// through make_imagenet_c.py's pipeline (Resize(256) bilinear,
// CenterCrop(224), the corruption, a JPEG of quality 85), so that it is what
// Corrupted's Item returns.
//
// The class folder and file stem are those of the clean image when clean
// has a File(i) method returning its path, as Folder has (the ImageNet
// validation tree gives <wnid>/ILSVRC2012_val_….JPEG, as in ImageNet-C);
// otherwise they are the class name and the image index.
//
// Each file is written to a temporary name and renamed when complete;
// files that already exist are skipped, so that running again resumes.
func WriteImageNetC(dir string, clean Dataset, corruptions []string, severities []int, opts WriteOptions) error {
	cfg := corrupt.Config{Preset: corrupt.ImageNet, FrostDir: opts.FrostDir}
	if len(corruptions) == 0 {
		return errors.New("data: WriteImageNetC: no corruptions given")
	}
	if err := checkCorruptions(corruptions, cfg); err != nil {
		return err
	}
	if err := checkSeverities(severities); err != nil {
		return err
	}
	n, err := imagesToWrite(clean, opts.Limit)
	if err != nil {
		return err
	}
	rel := make([]string, n)
	from := make(map[string]int, n)
	for i := range rel {
		if rel[i], err = imageNetCFile(clean, i); err != nil {
			return err
		}
		if j, ok := from[rel[i]]; ok {
			return fmt.Errorf("data: %s: images %d and %d would both be written as %s", clean.Name(), j, i, rel[i])
		}
		from[rel[i]] = i
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	made := manifest{Layout: "imagenet-c", Source: opts.Source, Images: n, Seed: opts.Seed, Severities: slices.Sorted(slices.Values(severities))}
	if slices.Contains(corruptions, "frost") {
		if made.Frost, err = frostFingerprint(opts.FrostDir); err != nil {
			return err
		}
	}
	made, newManifest, err := checkManifest(dir, made)
	if err != nil {
		return err
	}
	if newManifest {
		if err := writeManifest(dir, made); err != nil {
			return err
		}
	}

	// Find the files still to write, and make their folders.
	type job struct{ c, sev int }
	todo := make([][]job, n)
	total := 0
	dirs := map[string]bool{}
	for i := range n {
		for ci, c := range corruptions {
			for _, sev := range severities {
				p := filepath.Join(dir, c, strconv.Itoa(sev), filepath.FromSlash(rel[i]))
				if _, err := os.Lstat(p); err == nil {
					continue
				} else if !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("data: %w", err)
				}
				todo[i] = append(todo[i], job{ci, sev})
				dirs[filepath.Dir(p)] = true
				total++
			}
		}
	}
	for d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("data: %w", err)
		}
	}
	prog := newProgressCounter(opts.Progress, total)
	var work []int
	for i, t := range todo {
		if len(t) > 0 {
			work = append(work, i)
		}
	}
	var written atomic.Int64
	err = parallelFor(len(work), opts.Workers, func(k int) error {
		if err := opts.stopped(); err != nil {
			return err
		}
		i := work[k]
		img, _, err := clean.Item(i)
		if err != nil {
			return err
		}
		in, err := imageNetCInput(img)
		if err != nil {
			return fmt.Errorf("data: %s: image %d: %w", clean.Name(), i, err)
		}
		var buf bytes.Buffer
		for _, j := range todo[i] {
			if err := opts.stopped(); err != nil {
				return err
			}
			c := corruptions[j.c]
			out, err := corruptImage(in, i, c, j.sev, cfg, opts.Seed)
			if err != nil {
				return fmt.Errorf("data: %s: image %d: %w", clean.Name(), i, err)
			}
			buf.Reset()
			if err := corrupt.EncodeImageNetC(&buf, toCorruptImage(out)); err != nil {
				return fmt.Errorf("data: %s: image %d: %w", clean.Name(), i, err)
			}
			p := filepath.Join(dir, c, strconv.Itoa(j.sev), filepath.FromSlash(rel[i]))
			if err := writeFileAtomic(p, false, func(w io.Writer) error {
				_, err := w.Write(buf.Bytes())
				return err
			}); err != nil {
				return err
			}
			written.Add(1)
			prog.add(1)
		}
		return nil
	})
	if err != nil {
		if serr := opts.stopped(); serr != nil {
			return &Interrupted{Written: int(written.Load()), Total: total, Err: serr}
		}
	}
	return err
}

// checkSeverities checks a list of distinct severities in 1…5.
func checkSeverities(severities []int) error {
	if len(severities) == 0 {
		return errors.New("data: no severities given")
	}
	for i, s := range severities {
		if s < 1 || s > Severities {
			return fmt.Errorf("data: severity %d out of range [1, %d]", s, Severities)
		}
		if slices.Contains(severities[:i], s) {
			return fmt.Errorf("data: severity %d is listed twice", s)
		}
	}
	return nil
}

// imagesToWrite is the number of clean images to write: all, or the first
// limit.
func imagesToWrite(clean Dataset, limit int) (int, error) {
	n := clean.Len()
	if limit > 0 {
		n = min(n, limit)
	}
	if n == 0 {
		return 0, fmt.Errorf("data: %s has no images", clean.Name())
	}
	return n, nil
}

// imageNetCFile is the path, relative to a <corruption>/<severity> folder,
// of image i: "<class folder>/<stem>.JPEG".
func imageNetCFile(ds Dataset, i int) (string, error) {
	if f, ok := ds.(interface{ File(int) string }); ok {
		rel := path.Clean(filepath.ToSlash(f.File(i)))
		dir, base := path.Split(rel)
		stem := strings.TrimSuffix(base, path.Ext(base))
		if dir == "" || stem == "" || path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return "", fmt.Errorf("data: %s: image %d: path %q is not <class folder>/<file>", ds.Name(), i, f.File(i))
		}
		return dir + stem + ".JPEG", nil
	}
	class := strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' {
			return '_'
		}
		return r
	}, ds.Classes()[ds.Label(i)])
	if class == "" || class == "." || class == ".." {
		class = "class" + strconv.Itoa(ds.Label(i))
	}
	return fmt.Sprintf("%s/%08d.JPEG", class, i), nil
}

// writeFileAtomic writes a file through write into a hidden temporary file
// beside p and renames it to p once complete (after an fsync if durable),
// so that p never holds a partial file. The temporary file is removed on
// failure.
func writeFileAtomic(p string, durable bool, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*.tmp")
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("data: writing %s: %w", p, err)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<16)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// parallelFor calls fn(i) for every i in [0, n) on up to workers goroutines
// (≤ 0: GOMAXPROCS). After a failure no new index is started; the error of
// the lowest failing index is returned.
func parallelFor(n, workers int, fn func(i int) error) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	var (
		next   atomic.Int64
		failed atomic.Bool
		mu     sync.Mutex
		errAt  = n
		first  error
		wg     sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if i < errAt {
						errAt, first = i, err
					}
					mu.Unlock()
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// progressCounter serialises the calls of a WriteOptions.Progress.
type progressCounter struct {
	mu          sync.Mutex
	done, total int
	fn          func(done, total int)
}

func newProgressCounter(fn func(done, total int), total int) *progressCounter {
	p := &progressCounter{total: total, fn: fn}
	if fn != nil {
		fn(0, total)
	}
	return p
}

func (p *progressCounter) add(n int) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	p.done += n
	p.fn(p.done, p.total)
	p.mu.Unlock()
}
