package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/embedfile"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/internal/dirlock"
	"github.com/subtta/subtta/internal/prefetch"
)

// Bulk embedding and classification: many images (a folder, a .tar or
// .tar.gz, or a list file) or texts (a file of lines) go through the model
// in batches, the next batch decoded while the model runs on the current
// one, with a progress bar.

// bulkFlags are the flags of embed and classify for many inputs at once.
type bulkFlags struct {
	images, texts, out *string
	batch              *int
}

// addBulkFlags adds --images, --out and --batch-size (and, for embed,
// --texts) to fs.
func addBulkFlags(fs *pflag.FlagSet, texts bool, outHelp string) *bulkFlags {
	b := &bulkFlags{
		images: fs.String("images", "", "many images at once: a folder (searched recursively), a .tar or .tar.gz read as the folder it extracts to (labels: the folders under the deepest folder holding every image), or a list file (one image path a line, relative to the list's folder, optionally a tab and a label)"),
		out:    fs.String("out", "", outHelp),
		batch:  fs.Int("batch-size", 64, "images (or texts) per forward pass with --images or --texts"),
	}
	if texts {
		b.texts = fs.String("texts", "", "many texts at once: a file of one text a line (blank lines skipped)")
	}
	return b
}

// given reports whether the bulk form was asked for.
func (b *bulkFlags) given() bool {
	return *b.images != "" || (b.texts != nil && *b.texts != "")
}

// checkUnused refuses the bulk form's own flags (--out, --batch-size) in
// a run without --images or --texts, where nothing would read them.
func (b *bulkFlags) checkUnused(fs *pflag.FlagSet) error {
	bulk := "--images"
	if b.texts != nil {
		bulk += " or --texts"
	}
	for _, name := range []string{"out", "batch-size"} {
		if fs.Changed(name) {
			return usagef("--%s is for %s (without them the results are printed)", name, bulk)
		}
	}
	return nil
}

// check validates the flags of the bulk form, before anything is
// computed: --out is embed's folder (b.texts set) or classify's .csv or
// .jsonl file, and one of the other kind already there is refused by
// name, not found when the results are to be written.
func (b *bulkFlags) check(what string) error {
	out := *b.out
	switch {
	case out == "":
		return usagef("--images%s needs --out (%s)", map[bool]string{true: " or --texts", false: ""}[b.texts != nil], what)
	case *b.batch < 1:
		return usagef("--batch-size %d: must be positive", *b.batch)
	}
	st, err := os.Stat(out)
	if b.texts != nil {
		if err == nil && !st.IsDir() {
			return usagef("--out %s is a file: give a folder (for images.npy, images.jsonl, texts.npy, texts.jsonl)", out)
		}
		return nil
	}
	lower := strings.ToLower(out)
	if !strings.HasSuffix(lower, ".csv") && !strings.HasSuffix(lower, ".jsonl") {
		return usagef("--out %s: want a .csv or .jsonl file", out)
	}
	if err == nil && st.IsDir() {
		return usagef("--out %s is a folder: give a .csv or .jsonl file to write", out)
	}
	return nil
}

// imageSet is a list of images to read: each has an id (its path as
// given for a folder or a list file, its member path in an archive) and a
// label (imageLabels; a list file's own).
type imageSet struct {
	ids, labels []string
	read        func(i int) (*data.RGB, error)
	close       func() error
}

// openImageSet opens a folder, an archive (recognised by content) or a
// list file of images. A folder and an archive are read by one rule
// (imageLabels: an archive as the folder it extracts to), and what they
// skip, and a wrapping folder their labels are taken below, are said on
// stderr.
func openImageSet(src string, stderr io.Writer) (*imageSet, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, usagef("--images: %v", err)
	}
	if st.IsDir() {
		return folderImages(src, stderr)
	}
	head := make([]byte, 512)
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	n, _ := io.ReadFull(f, head)
	f.Close()
	head = head[:n]
	isTar := len(head) > 262 && string(head[257:262]) == "ustar"
	if isTar || bytes.HasPrefix(head, []byte{0x1f, 0x8b}) {
		return archiveImages(src, stderr)
	}
	return listImages(src)
}

// skipped counts what a folder or an archive holds besides images: files
// (or archive members) that are not images or are hidden, and hidden
// folders, none of them read.
type skipped struct {
	files, folders int
	first          string // the first skipped, for the note
}

func (s *skipped) add(name string, folder bool) {
	if s.first == "" {
		s.first = name
	}
	if folder {
		s.folders++
	} else {
		s.files++
	}
}

// note says on w what was skipped in src, in one line, if anything.
func (s *skipped) note(w io.Writer, src string) {
	var what []string
	if s.files > 0 {
		what = append(what, counted(s.files, "file")+" not an image (.jpg, .jpeg, .png, .gif) or hidden")
	}
	if s.folders > 0 {
		what = append(what, counted(s.folders, "hidden folder"))
	}
	if len(what) > 0 {
		fmt.Fprintf(w, "note: --images %s: skipped %s (the first: %s)\n", src, strings.Join(what, " and "), s.first)
	}
}

// counted is "1 file", "2 files".
func counted(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// comparePaths orders '/'-separated paths folder by folder, each level by
// name: the order filepath.WalkDir visits a folder in.
func comparePaths(a, b string) int {
	for a != "" && b != "" {
		ca, ra, _ := strings.Cut(a, "/")
		cb, rb, _ := strings.Cut(b, "/")
		if c := strings.Compare(ca, cb); c != 0 {
			return c
		}
		a, b = ra, rb
	}
	return cmp.Compare(len(a), len(b))
}

// imageLabels gives the images at the '/'-separated paths rels, relative
// to the folder or in the archive src, their labels, by one rule for a
// folder and an archive (an archive is read as the folder it extracts
// to): the label of an image is the folder under the root
// (data.ImageRoot) it lies in, and an image directly in the root has
// none (""), but is kept.
// A root below the top (a folder that wraps the class folders, as test/
// in the built-in archive), and images without a label beside images with
// one, are said on stderr; paths are left whole.
func imageLabels(src string, archive bool, rels []string, stderr io.Writer) []string {
	root := data.ImageRoot(rels)
	prefix := ""
	if root != "" {
		prefix = root + "/"
		where := filepath.Join(src, filepath.FromSlash(root))
		if archive {
			where = prefix + " in the archive"
		}
		fmt.Fprintf(stderr, "note: --images %s: every image is under %s: the labels are the folders in it\n", src, where)
	}
	labels := make([]string, len(rels))
	loose := 0
	for i, r := range rels {
		rel := strings.TrimPrefix(r, prefix)
		if c, _, ok := strings.Cut(rel, "/"); ok {
			labels[i] = c
		} else {
			loose++
		}
	}
	if loose > 0 && loose < len(rels) {
		rootName := src
		if root != "" {
			rootName = prefix
		}
		fmt.Fprintf(stderr, "note: --images %s: %s directly in %s, not in a class folder: kept, with an empty label\n", src, counted(loose, "image"), rootName)
	}
	return labels
}

// folderImages lists the images of the folder root, searched recursively
// (data.WalkImages: hidden files and folders skipped), their ids the
// paths to open.
func folderImages(root string, stderr io.Writer) (*imageSet, error) {
	var sk skipped
	rels, err := data.WalkImages(root, sk.add)
	if err != nil {
		return nil, fmt.Errorf("--images %s: %w", root, err)
	}
	sk.note(stderr, root)
	if len(rels) == 0 {
		return nil, usagef("--images %s: no image (.jpg, .jpeg, .png, .gif) in the folder", root)
	}
	slices.SortStableFunc(rels, comparePaths)
	s := &imageSet{close: func() error { return nil }}
	for _, rel := range rels {
		s.ids = append(s.ids, filepath.Join(root, filepath.FromSlash(rel)))
	}
	s.labels = imageLabels(root, false, rels, stderr)
	s.read = func(i int) (*data.RGB, error) { return data.ReadRGB(s.ids[i]) }
	return s, nil
}

// archiveImages lists the images of the .tar or .tar.gz archive src
// (data.ImageArchive; members outside the folder it extracts to, absolute
// or through "..", skipped), their ids their member paths (without a
// leading "./"). A
// .tar.gz is decompressed once, its images kept in memory; a .tar's are
// read where they lie.
func archiveImages(src string, stderr io.Writer) (*imageSet, error) {
	a, err := data.OpenImageArchive(src, data.ArchiveOptions{SkipAbsolute: true})
	if err != nil {
		return nil, fmt.Errorf("--images %w", err)
	}
	var sk skipped
	sk.files, sk.first = a.Skipped()
	sk.note(stderr, src)
	if a.Len() == 0 {
		a.Close()
		return nil, usagef("--images %s: no image (.jpg, .jpeg, .png, .gif) in the archive", src)
	}
	order := make([]int, a.Len()) // member indices, by path
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return comparePaths(a.Name(i), a.Name(j)) })
	s := &imageSet{close: a.Close}
	for _, m := range order {
		s.ids = append(s.ids, a.Name(m))
	}
	s.labels = imageLabels(src, true, s.ids, stderr)
	s.read = func(i int) (*data.RGB, error) {
		b, err := a.Read(order[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		return data.DecodeRGB(src+":"+s.ids[i], b)
	}
	return s, nil
}

func listImages(list string) (*imageSet, error) {
	b, err := os.ReadFile(list)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(list)
	s := &imageSet{close: func() error { return nil }}
	var paths []string
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, label, _ := strings.Cut(line, "\t")
		if !utf8Valid(line) {
			return nil, usagef("--images %s: line %d is not text: not a list of images, a folder or an archive", list, n+1)
		}
		full := p
		if !filepath.IsAbs(p) {
			full = filepath.Join(dir, p)
		}
		if _, err := os.Stat(full); err != nil {
			return nil, usagef("--images %s: line %d: %v", list, n+1, err)
		}
		s.ids, s.labels, paths = append(s.ids, p), append(s.labels, label), append(paths, full)
	}
	if len(s.ids) == 0 {
		return nil, usagef("--images %s: no image listed", list)
	}
	s.read = func(i int) (*data.RGB, error) { return data.ReadRGB(paths[i]) }
	return s, nil
}

func utf8Valid(s string) bool {
	return !strings.ContainsRune(s, 0) && strings.ToValidUTF8(s, "\uFFFD") == s
}

// pixelDigest identifies an image by its decoded pixels.
func pixelDigest(img *data.RGB) string {
	h := sha256.New()
	var wh [8]byte
	binary.LittleEndian.PutUint32(wh[:4], uint32(img.W))
	binary.LittleEndian.PutUint32(wh[4:], uint32(img.H))
	h.Write(wh[:])
	h.Write(img.Pix)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func textDigest(t string) string {
	s := sha256.Sum256([]byte(t))
	return hex.EncodeToString(s[:16])
}

// imageBatch is one batch of preprocessed images.
type imageBatch struct {
	lo, hi  int
	px      []float32
	digests []string
	hold    *autograd.DeviceInput // px's copy on the device, or nil
}

// release frees the batch's copy on the device, once the model has read
// it, before the reader reuses the batch's memory.
func (b *imageBatch) release() {
	b.hold.Release()
	b.hold = nil
}

// readBatches decodes and preprocesses the images of [from, n) in batches
// of size batch, one batch ahead of the caller (prefetch.Pipe: batch b+1
// is decoded while the model runs on batch b), each batch's images on up
// to GOMAXPROCS goroutines. With a device (--device cuda) each batch is
// also uploaded once read (autograd.DeviceInput.Prefetch: beside the
// current batch's pass), and the caller releases it (imageBatch.release)
// after encoding it. A batch is the caller's until its next call to Next;
// the pipe must be closed.
//
// A batch larger than the images to read is as many as there are: its
// memory is that of the images read, not of the batch size asked for.
func readBatches(set *imageSet, pre *data.Preprocessor, from, n, batch int) *prefetch.Pipe[*imageBatch] {
	L := pre.OutputLen()
	batch = min(batch, max(n-from, 1))
	count := (max(n-from, 0) + batch - 1) / batch
	ahead := autograd.CurrentDevice() != nil
	return prefetch.StartWith(count, func(i int, b *imageBatch) (*imageBatch, error) {
		lo := from + i*batch
		hi := min(lo+batch, n)
		if b == nil {
			b = &imageBatch{px: make([]float32, batch*L), digests: make([]string, batch)}
		}
		b.lo, b.hi, b.px, b.digests = lo, hi, b.px[:(hi-lo)*L], b.digests[:hi-lo]
		errs := make([]error, hi-lo)
		prefetch.Each(hi-lo, 0, func(k int) {
			img, err := set.read(lo + k)
			if err == nil {
				b.digests[k] = pixelDigest(img)
				_, err = pre.Transform(b.px[k*L:(k+1)*L:(k+1)*L], img) // in place
			}
			if err != nil {
				errs[k] = fmt.Errorf("%s: %w", set.ids[lo+k], err)
			}
		})
		if err := errors.Join(errs...); err != nil || !ahead {
			return b, err
		}
		b.hold = autograd.HoldValues(b.px)
		if err := b.hold.Prefetch(); err != nil {
			b.release()
			return b, err
		}
		return b, nil
	}, (*imageBatch).release)
}

// modelIdentity names the model of a --model value by content, as eval
// and serve do.
func modelIdentity(model string) (string, error) {
	if isBuiltin(model) {
		return "built-in, sha256 " + builtin.ModelSHA256()[:16], nil
	}
	fp, err := eval.ModelFingerprint(model)
	if err != nil {
		return "", err
	}
	return filepath.Base(filepath.Clean(model)) + " " + fp, nil
}

// bulkSignals is a context that the first SIGINT or SIGTERM ends, so
// that a bulk run stops after the batch in progress, its rows kept; a
// second signal ends the process at once (as convert's). stop releases
// the signals.
func bulkSignals() (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// bulkEmbed writes the features of --images and --texts into --out; on
// SIGINT or SIGTERM it stops after the batch in progress, saying how much
// is kept, with errInterrupted (the same command resumes).
func bulkEmbed(bf *bulkFlags, b *clip.Bundle, model string, prec kernel.Choice, normalize bool, stdout, stderr io.Writer) error {
	id, err := modelIdentity(model)
	if err != nil {
		return err
	}
	ctx, stop := bulkSignals()
	defer stop()
	settings := embedfile.Settings{Model: id, Precision: withDevicePrecision(prec), Normalize: normalize, BatchSize: *bf.batch, Dim: b.Model.Config.EmbedDim}
	if *bf.images != "" {
		if err := bulkEmbedImages(ctx, *bf.images, *bf.out, settings, b, stdout, stderr); err != nil {
			return err
		}
	}
	if *bf.texts != "" {
		return bulkEmbedTexts(ctx, *bf.texts, *bf.out, settings, b, stdout, stderr)
	}
	return nil
}

// bulkEmbedImages writes the features of the images of src into
// out/images.npy, with settings s (but the number of rows).
func bulkEmbedImages(ctx context.Context, src, out string, s embedfile.Settings, b *clip.Bundle, stdout, stderr io.Writer) error {
	set, err := openImageSet(src, stderr)
	if err != nil {
		return err
	}
	defer set.close()
	s.Rows = len(set.ids)
	f, err := embedfile.Open(out, "images", s)
	if err != nil {
		return err
	}
	defer f.Close() // after Finish, nothing; else the .part files stay, for the next run to resume
	// The rows already written must be of these images.
	if err := checkWritten(ctx, set, f, stderr); err != nil {
		return err
	}
	if !f.Complete() {
		if err := embedImages(ctx, set, b, f, s.Normalize, stderr); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%s (%d × %d float32), %s\n", f.Path(".npy"), s.Rows, s.Dim, f.Path(".jsonl"))
	return nil
}

// bulkEmbedTexts writes the features of the lines of the file src into
// out/texts.npy, with settings s (but the number of rows).
func bulkEmbedTexts(ctx context.Context, src, out string, s embedfile.Settings, b *clip.Bundle, stdout, stderr io.Writer) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return usagef("--texts: %v", err)
	}
	var texts []string
	blank := 0
	lines := strings.Split(strings.TrimSuffix(strings.ReplaceAll(string(raw), "\r\n", "\n"), "\n"), "\n")
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			texts = append(texts, l)
		} else {
			blank++
		}
	}
	if len(texts) == 0 {
		return usagef("--texts %s: no text", src)
	}
	if blank > 0 {
		// The rows then no longer follow the file's line numbers.
		fmt.Fprintf(stderr, "note: --texts %s: %d blank lines skipped: row i of texts.npy is the text on line i of texts.jsonl\n", src, blank)
	}
	tok, err := b.Tokenizer()
	if err != nil {
		return err
	}
	warnCut(stderr, tok, texts, b.Model.Config.Text.ContextLength)
	s.Rows = len(texts)
	f, err := embedfile.Open(out, "texts", s)
	if err != nil {
		return err
	}
	defer f.Close() // after Finish, nothing; else the .part files stay, for the next run to resume
	for i, r := range f.Written() {
		if r.Text != texts[i] {
			return fmt.Errorf("%s: row %d was %q, now %q: give another --out, or remove it", f.Path(".jsonl"), i, r.Text, texts[i])
		}
	}
	if !f.Complete() {
		if err := embedTexts(ctx, texts, b, f, s.Normalize, stderr); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%s (%d × %d float32), %s\n", f.Path(".npy"), s.Rows, s.Dim, f.Path(".jsonl"))
	return nil
}

// bulkInterrupted says on stderr that a bulk run stopped on a signal, with
// done of total items (what) kept in part, and returns errInterrupted
// (exit status 130).
func bulkInterrupted(stderr io.Writer, done, total int, what, part string) error {
	fmt.Fprintf(stderr, "interrupted: %d of %d %s, kept in %s; the same command resumes\n", done, total, what, part)
	return errInterrupted
}

// checkWritten verifies that the rows a resumed run finds written (recs)
// are of the images set holds now: the same path and the same pixels (their
// digest). The images are decoded on every core, with progress, since a
// run stopped late has most of them behind it; the first row that differs
// (the lowest) is the error.
//
// On SIGINT or SIGTERM (ctx) it stops, with errInterrupted.
func checkWritten(ctx context.Context, set *imageSet, f *embedfile.File, stderr io.Writer) error {
	recs := f.Written()
	if len(recs) == 0 {
		return nil
	}
	bar := newProgress(stderr, "checking the rows already written", len(recs))
	var next atomic.Int64
	var firstBad atomic.Int64 // the lowest row found to differ, len(recs) if none
	firstBad.Store(int64(len(recs)))
	errs := make(map[int]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(recs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(recs) || int64(i) > firstBad.Load() || ctx.Err() != nil {
					return
				}
				err := checkRow(set, recs[i], i, f)
				bar.Add(1)
				if err == nil {
					continue
				}
				mu.Lock()
				errs[i] = err
				mu.Unlock()
				for {
					cur := firstBad.Load()
					if int64(i) >= cur || firstBad.CompareAndSwap(cur, int64(i)) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	bar.Done()
	if ctx.Err() != nil {
		written := f.Path(".npy.part")
		if f.Complete() {
			written = f.Path(".npy")
		}
		fmt.Fprintf(stderr, "interrupted while checking the %d rows already written in %s; the same command resumes\n", len(recs), written)
		return errInterrupted
	}
	if i := int(firstBad.Load()); i < len(recs) {
		return errs[i]
	}
	return nil
}

// checkRow reports whether record r, row i, is of image i of set.
func checkRow(set *imageSet, r embedfile.Record, i int, f *embedfile.File) error {
	if r.Path != set.ids[i] {
		return fmt.Errorf("%s: row %d was %s, now %s: give another --out, or remove it", f.Path(".jsonl"), i, r.Path, set.ids[i])
	}
	img, err := set.read(i)
	if err != nil {
		return fmt.Errorf("%s: %w", set.ids[i], err)
	}
	if d := pixelDigest(img); d != r.SHA256 {
		return fmt.Errorf("%s: row %d was %s (sha256 %s), now %s (sha256 %s): give another --out, or remove it", f.Path(".jsonl"), i, r.Path, r.SHA256, set.ids[i], d)
	}
	return nil
}

// embedImages embeds the images of set not yet written into f, and
// finishes it; on SIGINT or SIGTERM (ctx) it stops after the batch in
// progress, with errInterrupted.
func embedImages(ctx context.Context, set *imageSet, b *clip.Bundle, f *embedfile.File, normalize bool, stderr io.Writer) error {
	n := f.Settings().Rows
	bar := newProgress(stderr, "embedding images", n-f.Done())
	defer bar.Done()
	batches := readBatches(set, b.Preprocessor, f.Done(), n, f.Settings().BatchSize)
	defer batches.Close()
	for {
		if ctx.Err() != nil {
			bar.Done()
			return bulkInterrupted(stderr, f.Done(), n, "images embedded", f.Path(".npy.part"))
		}
		batch, ok, err := batches.Next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		n := batch.hi - batch.lo
		feat, err := b.Model.EncodeImage(batch.px, n)
		batch.release()
		if err != nil {
			return err
		}
		recs := make([]embedfile.Record, n)
		for k := range recs {
			i := batch.lo + k
			recs[k] = embedfile.Record{Index: i, Path: set.ids[i], Label: set.labels[i], SHA256: batch.digests[k]}
		}
		if err := f.Append(rows(feat.Value().Data().F64(), n, normalize), recs); err != nil {
			return err
		}
		bar.Add(n)
	}
	return f.Finish()
}

// embedTexts embeds the texts not yet written into f, and finishes it;
// on SIGINT or SIGTERM (ctx) it stops after the batch in progress, with
// errInterrupted.
func embedTexts(ctx context.Context, texts []string, b *clip.Bundle, f *embedfile.File, normalize bool, stderr io.Writer) error {
	tok, err := b.Tokenizer()
	if err != nil {
		return err
	}
	n, batch := f.Settings().Rows, f.Settings().BatchSize
	bar := newProgress(stderr, "embedding texts", n-f.Done())
	bar.SetUnit("texts")
	defer bar.Done()
	for lo := f.Done(); lo < n; lo += batch {
		if ctx.Err() != nil {
			bar.Done()
			return bulkInterrupted(stderr, f.Done(), n, "texts embedded", f.Path(".npy.part"))
		}
		hi := min(lo+batch, n)
		ids := make([][]int, hi-lo)
		recs := make([]embedfile.Record, hi-lo)
		for k := range ids {
			if ids[k], err = tok.Tokenize(texts[lo+k], b.Model.Config.Text.ContextLength, true); err != nil {
				return err
			}
			recs[k] = embedfile.Record{Index: lo + k, Text: texts[lo+k], SHA256: textDigest(texts[lo+k])}
		}
		feat, err := b.Model.EncodeText(ids)
		if err != nil {
			return err
		}
		if err := f.Append(rows(feat.Value().Data().F64(), hi-lo, normalize), recs); err != nil {
			return err
		}
		bar.Add(hi - lo)
	}
	return f.Finish()
}

// classifySettings is what the rows of a classify --images run depend
// on: a run interrupted leaves its rows in OUT.part and its progress in
// OUT.part.json, and a later run resumes them only with the same
// settings.
type classifySettings struct {
	Model     string   `json:"model"`
	Precision string   `json:"precision"`
	Classes   []string `json:"classes"`
	Templates []string `json:"templates"`
	BatchSize int      `json:"batch_size"`
	// Images is the number of images and ImagesSHA256 a digest of their
	// ids in order: the rows written must be of the same images.
	Images       int    `json:"images"`
	ImagesSHA256 string `json:"images_sha256"`
	Format       string `json:"format"` // csv or jsonl
}

// classifyProgress is OUT.part.json: the settings and how much of
// OUT.part is complete, written after each batch's rows are synced, so
// that a run killed at any moment resumes after the last batch recorded
// (the bytes of a batch written but not recorded are cut off).
type classifyProgress struct {
	Settings classifySettings `json:"settings"`
	Rows     int              `json:"rows"`
	Bytes    int64            `json:"bytes"`
}

// bulkClassify writes the predictions of --images into --out (.csv or
// .jsonl), batch by batch into OUT.part, renamed to OUT when every image
// is done; an interrupted run resumes there (classifyProgress). While it
// writes, it holds the lock OUT.part.lock (internal/dirlock), so that
// another run with the same --out is refused at once, and removes it when
// done. On SIGINT or SIGTERM it stops after the batch in progress, with
// errInterrupted.
func bulkClassify(bf *bulkFlags, b *clip.Bundle, model string, prec kernel.Choice, head *clip.ZeroShot, classes, templates []string, stderr io.Writer) error {
	out := *bf.out
	csvOut := !strings.HasSuffix(strings.ToLower(out), ".jsonl")
	if dir := filepath.Dir(out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	partPath, progPath := out+".part", out+".part.json"
	lock, err := dirlock.AcquireFile(out+".part.lock", out)
	if err != nil {
		if errors.Is(err, dirlock.ErrLocked) {
			return fmt.Errorf("%w: another run is writing it (wait for it to end, or give another --out)", err)
		}
		return err
	}
	defer func() {
		// The lock file stays beside a run to resume, and goes where
		// there is none (a run refused, or done).
		if _, err := os.Stat(progPath); errors.Is(err, fs.ErrNotExist) {
			lock.Remove()
		}
		lock.Unlock()
	}()
	id, err := modelIdentity(model)
	if err != nil {
		return err
	}
	ctx, stop := bulkSignals()
	defer stop()
	set, err := openImageSet(*bf.images, stderr)
	if err != nil {
		return err
	}
	defer set.close()
	ids := sha256.New()
	for _, p := range set.ids {
		ids.Write([]byte(p))
		ids.Write([]byte{0})
	}
	settings := classifySettings{Model: id, Precision: withDevicePrecision(prec), Classes: classes, Templates: templates,
		BatchSize: *bf.batch, Images: len(set.ids), ImagesSHA256: hex.EncodeToString(ids.Sum(nil)), Format: "jsonl"}
	settings = settings.effective()
	if csvOut {
		settings.Format = "csv"
	}
	prog, f, err := openClassifyPart(partPath, progPath, settings)
	if err != nil {
		return err
	}
	defer f.Close()
	if prog.Rows == 0 && prog.Bytes == 0 && csvOut {
		var buf bytes.Buffer
		cw := csv.NewWriter(&buf)
		cw.Write(append([]string{"path", "label", "prediction", "probability"}, classes...))
		cw.Flush()
		if err := prog.commit(f, progPath, buf.Bytes(), 0); err != nil {
			return err
		}
	} else if prog.Rows > 0 {
		fmt.Fprintf(stderr, "resuming %s after %d of %d images\n", partPath, prog.Rows, len(set.ids))
	}
	type labelProb struct {
		Label string  `json:"label"`
		Prob  float64 `json:"prob"`
	}
	bar := newProgress(stderr, "classifying", len(set.ids)-prog.Rows)
	batches := readBatches(set, b.Preprocessor, prog.Rows, len(set.ids), settings.BatchSize)
	defer batches.Close()
	var buf bytes.Buffer
	for {
		if ctx.Err() != nil {
			bar.Done()
			return bulkInterrupted(stderr, prog.Rows, len(set.ids), "images classified", partPath)
		}
		batch, ok, err := batches.Next()
		if err != nil {
			bar.Done()
			return err
		}
		if !ok {
			break
		}
		feat, err := b.Model.EncodeImage(batch.px, batch.hi-batch.lo)
		batch.release()
		if err != nil {
			bar.Done()
			return err
		}
		buf.Reset()
		cw := csv.NewWriter(&buf)
		for k, p := range clip.Softmax(b.Model.Classify(head, feat)) {
			i := batch.lo + k
			best := 0
			for j := range p {
				if p[j] > p[best] {
					best = j
				}
			}
			if csvOut {
				row := []string{set.ids[i], set.labels[i], classes[best], fmt.Sprintf("%.6g", p[best])}
				for _, x := range p {
					row = append(row, fmt.Sprintf("%.6g", x))
				}
				cw.Write(row)
				continue
			}
			r := struct {
				Path        string      `json:"path"`
				Label       string      `json:"label,omitempty"`
				Prediction  string      `json:"prediction"`
				Probability float64     `json:"probability"`
				Probs       []labelProb `json:"probs"`
			}{Path: set.ids[i], Label: set.labels[i], Prediction: classes[best], Probability: p[best]}
			for j, c := range classes {
				r.Probs = append(r.Probs, labelProb{c, p[j]})
			}
			line, _ := json.Marshal(r)
			buf.Write(append(line, '\n'))
		}
		cw.Flush()
		if err := cw.Error(); err != nil {
			bar.Done()
			return err
		}
		if err := prog.commit(f, progPath, buf.Bytes(), batch.hi-batch.lo); err != nil {
			bar.Done()
			return err
		}
		bar.Add(batch.hi - batch.lo)
	}
	bar.Done()
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(partPath, out); err != nil {
		return err
	}
	if err := os.Remove(progPath); err != nil {
		return err
	}
	if err := lock.Remove(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d images classified into %s\n", len(set.ids), out)
	return nil
}

// effective is s with the batch size it makes: no batch holds more than
// every image (as embedfile records it).
func (s classifySettings) effective() classifySettings {
	if s.Images > 0 && s.BatchSize > s.Images {
		s.BatchSize = s.Images
	}
	return s
}

// openClassifyPart opens the rows file at partPath for appending: that of
// an interrupted run with settings s, cut to its last recorded batch
// (progPath), or a new one.
func openClassifyPart(partPath, progPath string, s classifySettings) (*classifyProgress, *os.File, error) {
	prog := &classifyProgress{Settings: s}
	raw, err := os.ReadFile(progPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(partPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		return prog, f, err
	case err != nil:
		return nil, nil, err
	}
	var saved classifyProgress
	if err := json.Unmarshal(raw, &saved); err != nil {
		return nil, nil, fmt.Errorf("%s: unreadable (%v): remove it and %s, or give another --out", progPath, err, partPath)
	}
	// A batch size recorded above the number of images (as before the
	// effective one was) makes the same batch as the number.
	a, _ := json.Marshal(saved.Settings.effective())
	b, _ := json.Marshal(s)
	if !bytes.Equal(a, b) {
		return nil, nil, fmt.Errorf("%s: an interrupted run with other settings (model, precision, labels, templates, batch size, images or format): give another --out, or remove it and %s", progPath, partPath)
	}
	f, err := os.OpenFile(partPath, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s records %d images done, but: %w", progPath, saved.Rows, err)
	}
	st, err := f.Stat()
	if err == nil && st.Size() < saved.Bytes {
		err = fmt.Errorf("%s is %d bytes, shorter than the %d that %s records: remove both, or give another --out", partPath, st.Size(), saved.Bytes, progPath)
	}
	if err == nil {
		err = f.Truncate(saved.Bytes) // a batch written but not recorded
	}
	if err == nil {
		_, err = f.Seek(saved.Bytes, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	prog.Rows, prog.Bytes = saved.Rows, saved.Bytes
	return prog, f, nil
}

// commit appends rows, the rows of n images, to f, syncs it, and records
// the progress at progPath.
func (p *classifyProgress) commit(f *os.File, progPath string, rows []byte, n int) error {
	if _, err := f.Write(rows); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	p.Rows += n
	p.Bytes += int64(len(rows))
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return atomicfile.Write(progPath, b)
}
