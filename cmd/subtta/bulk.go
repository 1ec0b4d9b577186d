package main

import (
	"bytes"
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
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/embedfile"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/internal/atomicfile"
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
		images: fs.String("images", "", "many images at once: a folder (searched recursively; a file's first folder is its label), a .tar or .tar.gz of class folders, or a list file (one image path a line, relative to the list's folder, optionally a tab and a label)"),
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

// check validates the flags of the bulk form.
func (b *bulkFlags) check(what string) error {
	switch {
	case *b.out == "":
		return usagef("--images%s needs --out (%s)", map[bool]string{true: " or --texts", false: ""}[b.texts != nil], what)
	case *b.batch < 1:
		return usagef("--batch-size %d: must be positive", *b.batch)
	}
	return nil
}

// imageSet is a list of images to read: each has an id (its path as given,
// or its member path in an archive) and a label when its folder names one.
type imageSet struct {
	ids, labels []string
	read        func(i int) (*data.RGB, error)
	close       func() error
}

// openImageSet opens a folder, an archive (recognised by content) or a
// list file of images.
func openImageSet(src string) (*imageSet, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, usagef("--images: %v", err)
	}
	if st.IsDir() {
		return folderImages(src)
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
		return archiveImages(src)
	}
	return listImages(src)
}

// isImageFile reports whether name has an image extension and is not
// hidden, as data.Folder reads them.
func isImageFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".jpg", ".jpeg", ".png", ".gif":
		return true
	}
	return false
}

func folderImages(root string) (*imageSet, error) {
	s := &imageSet{close: func() error { return nil }}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !isImageFile(d.Name()) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		label := ""
		if i := strings.IndexRune(rel, filepath.Separator); i > 0 {
			label = rel[:i]
		}
		s.ids, s.labels = append(s.ids, p), append(s.labels, label)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("--images %s: %w", root, err)
	}
	if len(s.ids) == 0 {
		return nil, usagef("--images %s: no image (.jpg, .jpeg, .png, .gif) in the folder", root)
	}
	s.read = func(i int) (*data.RGB, error) { return data.ReadRGB(s.ids[i]) }
	return s, nil
}

func archiveImages(src string) (*imageSet, error) {
	d, err := data.OpenFolder(src, data.FolderOptions{})
	if err != nil {
		return nil, fmt.Errorf("--images: %w", err)
	}
	s := &imageSet{close: d.Close}
	classes := d.Classes()
	for i := range d.Len() {
		s.ids = append(s.ids, d.File(i))
		s.labels = append(s.labels, classes[d.Label(i)])
	}
	s.read = func(i int) (*data.RGB, error) {
		img, _, err := d.Item(i)
		return img, err
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
func readBatches(set *imageSet, pre *data.Preprocessor, from, n, batch int) *prefetch.Pipe[*imageBatch] {
	L := pre.OutputLen()
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

// bulkEmbed writes the features of --images and --texts into --out.
func bulkEmbed(bf *bulkFlags, b *clip.Bundle, model string, prec kernel.Choice, normalize bool, stdout, stderr io.Writer) error {
	id, err := modelIdentity(model)
	if err != nil {
		return err
	}
	m := b.Model
	dim := m.Config.EmbedDim
	if *bf.images != "" {
		set, err := openImageSet(*bf.images)
		if err != nil {
			return err
		}
		defer set.close()
		f, err := embedfile.Open(*bf.out, "images", embedfile.Settings{Model: id, Precision: withDevicePrecision(prec), Normalize: normalize, BatchSize: *bf.batch, Rows: len(set.ids), Dim: dim})
		if err != nil {
			return err
		}
		// The rows already written must be of these images.
		if err := checkWritten(set, f, stderr); err != nil {
			f.Close()
			return err
		}
		if !f.Complete() {
			if err := embedImages(set, b, f, normalize, stderr); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "%s (%d × %d float32), %s\n", f.Path(".npy"), len(set.ids), dim, f.Path(".jsonl"))
	}
	if *bf.texts != "" {
		raw, err := os.ReadFile(*bf.texts)
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
			return usagef("--texts %s: no text", *bf.texts)
		}
		if blank > 0 {
			// The rows then no longer follow the file's line numbers.
			fmt.Fprintf(stderr, "note: --texts %s: %d blank lines skipped: row i of texts.npy is the text on line i of texts.jsonl\n", *bf.texts, blank)
		}
		tok, err := b.Tokenizer()
		if err != nil {
			return err
		}
		warnCut(stderr, tok, texts, b.Model.Config.Text.ContextLength)
		f, err := embedfile.Open(*bf.out, "texts", embedfile.Settings{Model: id, Precision: withDevicePrecision(prec), Normalize: normalize, BatchSize: *bf.batch, Rows: len(texts), Dim: dim})
		if err != nil {
			return err
		}
		for i, r := range f.Written() {
			if r.Text != texts[i] {
				f.Close()
				return fmt.Errorf("%s: row %d was %q, now %q: give another --out, or remove it", f.Path(".jsonl"), i, r.Text, texts[i])
			}
		}
		if !f.Complete() {
			if err := embedTexts(texts, b, f, normalize, stderr); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "%s (%d × %d float32), %s\n", f.Path(".npy"), len(texts), dim, f.Path(".jsonl"))
	}
	return nil
}

// checkWritten verifies that the rows a resumed run finds written (recs)
// are of the images set holds now: the same path and the same pixels (their
// digest). The images are decoded on every core, with progress, since a
// run stopped late has most of them behind it; the first row that differs
// (the lowest) is the error.
func checkWritten(set *imageSet, f *embedfile.File, stderr io.Writer) error {
	recs := f.Written()
	if len(recs) == 0 {
		return nil
	}
	bar := newProgress(stderr, "checking the rows already written", len(recs))
	defer bar.Done()
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
				if i >= len(recs) || int64(i) > firstBad.Load() {
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

func embedImages(set *imageSet, b *clip.Bundle, f *embedfile.File, normalize bool, stderr io.Writer) error {
	defer f.Close() // after Finish, nothing; else the .part files stay, for the next run to resume
	n := f.Settings().Rows
	bar := newProgress(stderr, "embedding images", n-f.Done())
	defer bar.Done()
	batches := readBatches(set, b.Preprocessor, f.Done(), n, f.Settings().BatchSize)
	defer batches.Close()
	for {
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

func embedTexts(texts []string, b *clip.Bundle, f *embedfile.File, normalize bool, stderr io.Writer) error {
	defer f.Close() // after Finish, nothing; else the .part files stay, for the next run to resume
	tok, err := b.Tokenizer()
	if err != nil {
		return err
	}
	n, batch := f.Settings().Rows, f.Settings().BatchSize
	bar := newProgress(stderr, "embedding texts", n-f.Done())
	defer bar.Done()
	for lo := f.Done(); lo < n; lo += batch {
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
// is done; an interrupted run resumes there (classifyProgress).
func bulkClassify(bf *bulkFlags, b *clip.Bundle, model string, prec kernel.Choice, head *clip.ZeroShot, classes, templates []string, stderr io.Writer) error {
	out := *bf.out
	csvOut := !strings.HasSuffix(strings.ToLower(out), ".jsonl")
	if csvOut && !strings.HasSuffix(strings.ToLower(out), ".csv") {
		return usagef("--out %s: want a .csv or .jsonl file", out)
	}
	id, err := modelIdentity(model)
	if err != nil {
		return err
	}
	set, err := openImageSet(*bf.images)
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
	if csvOut {
		settings.Format = "csv"
	}
	if dir := filepath.Dir(out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	partPath, progPath := out+".part", out+".part.json"
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
	batches := readBatches(set, b.Preprocessor, prog.Rows, len(set.ids), *bf.batch)
	defer batches.Close()
	var buf bytes.Buffer
	for {
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
	fmt.Fprintf(stderr, "%d images classified into %s\n", len(set.ids), out)
	return nil
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
	a, _ := json.Marshal(saved.Settings)
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
