package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/internal/atomicfile"
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
func addBulkFlags(fs *flag.FlagSet, texts bool, outHelp string) *bulkFlags {
	b := &bulkFlags{
		images: fs.String("images", "", "many images at once: a folder (searched recursively; a file's first folder is its label), a .tar or .tar.gz of class folders, or a list file (one image path a line, relative to the list's folder, optionally a tab and a label)"),
		out:    fs.String("out", "", outHelp),
		batch:  fs.Int("batch-size", 64, "images (or texts) per forward pass with --images or --texts"),
	}
	if texts {
		b.texts = fs.String("texts", "", "many texts at once: a file of one text a line")
	}
	return b
}

// given reports whether the bulk form was asked for.
func (b *bulkFlags) given() bool {
	return *b.images != "" || (b.texts != nil && *b.texts != "")
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
	err     error
}

// prefetch decodes and preprocesses the images of [from, n) in batches of
// size batch, decoding one batch ahead of the consumer with up to
// GOMAXPROCS goroutines; stop ends it early.
func prefetch(set *imageSet, pre *data.Preprocessor, from, n, batch int) (batches <-chan imageBatch, stop func()) {
	out := make(chan imageBatch, 1)
	quit := make(chan struct{})
	go func() {
		defer close(out)
		for lo := from; lo < n; lo += batch {
			hi := min(lo+batch, n)
			b := imageBatch{lo: lo, hi: hi, px: make([]float32, (hi-lo)*pre.OutputLen()), digests: make([]string, hi-lo)}
			errs := make([]error, hi-lo)
			var wg sync.WaitGroup
			next := make(chan int)
			for range min(runtime.GOMAXPROCS(0), hi-lo) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range next {
						img, err := set.read(lo + k)
						if err == nil {
							b.digests[k] = pixelDigest(img)
							L := pre.OutputLen()
							_, err = pre.Transform(b.px[k*L:(k+1)*L:(k+1)*L], img) // in place
						}
						if err != nil {
							errs[k] = fmt.Errorf("%s: %w", set.ids[lo+k], err)
						}
					}
				}()
			}
			for k := range hi - lo {
				next <- k
			}
			close(next)
			wg.Wait()
			b.err = errors.Join(errs...)
			select {
			case out <- b:
			case <-quit:
				return
			}
			if b.err != nil {
				return
			}
		}
	}()
	var once sync.Once
	return out, func() { once.Do(func() { close(quit) }) }
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

// featureFile is one output of bulk embedding: OUT/<name>.npy (float32,
// rows × dim), OUT/<name>.jsonl (a record per row) and OUT/<name>.json
// (how they were made). Until complete they are <name>.npy.part and
// <name>.jsonl.part, which a rerun with the same inputs resumes.
type featureFile struct {
	dir, name string
	rows, dim int
	settings  bulkSettings
}

// bulkSettings is what OUT/<name>.json records: a folder made otherwise is
// refused, not mixed.
type bulkSettings struct {
	Model     string `json:"model"`
	Precision string `json:"precision,omitempty"` // precisionID: "" for fp32, as before it was recorded
	Normalize bool   `json:"normalize"`
	BatchSize int    `json:"batch_size"`
	Rows      int    `json:"rows"`
	Dim       int    `json:"dim"`
}

func (f *featureFile) path(ext string) string { return filepath.Join(f.dir, f.name+ext) }

// npyHeader is the .npy version 1.0 header of a C-order float32 array of
// rows × dim, padded to 64 bytes as NumPy pads it.
func npyHeader(rows, dim int) []byte {
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, dim)
	pad := (64 - (10+len(dict)+1)%64) % 64
	h := dict + strings.Repeat(" ", pad) + "\n"
	out := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	return append(out, h...)
}

// record is a line of OUT/<name>.jsonl.
type record struct {
	Index  int    `json:"index"`
	Path   string `json:"path,omitempty"`
	Label  string `json:"label,omitempty"`
	Text   string `json:"text,omitempty"`
	SHA256 string `json:"sha256"` // of the decoded pixels or the text, first 16 bytes
}

// open prepares the output: it returns the rows already done (those of an
// earlier run with the same settings, whole batches), their records, and
// the two files positioned after them. A finished output is done: all rows.
func (f *featureFile) open() (done int, recs []record, npy, jsonl *os.File, err error) {
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return 0, nil, nil, nil, err
	}
	want, _ := json.Marshal(f.settings)
	if old, err := os.ReadFile(f.path(".json")); err == nil {
		var s bulkSettings
		if json.Unmarshal(old, &s) != nil || s != f.settings {
			return 0, nil, nil, nil, fmt.Errorf("%s was made otherwise (%s; now %s): give another --out, or remove it", f.path(".json"), bytes.TrimSpace(old), want)
		}
	} else if err := atomicfile.Write(f.path(".json"), append(want, '\n')); err != nil {
		return 0, nil, nil, nil, err
	}
	if _, err := os.Stat(f.path(".npy")); err == nil {
		recs, err := readRecords(f.path(".jsonl"))
		if err != nil || len(recs) != f.rows {
			return 0, nil, nil, nil, fmt.Errorf("%s: %d records for %d rows (%v): remove the folder", f.path(".jsonl"), len(recs), f.rows, err)
		}
		return f.rows, recs, nil, nil, nil
	}
	hdr := npyHeader(f.rows, f.dim)
	rowBytes := int64(4 * f.dim)
	npy, err = os.OpenFile(f.path(".npy.part"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	st, _ := npy.Stat()
	npyRows := 0
	if st.Size() >= int64(len(hdr)) {
		npyRows = int((st.Size() - int64(len(hdr))) / rowBytes)
	}
	recs, _ = readRecords(f.path(".jsonl.part"))
	done = min(npyRows, len(recs))
	done -= done % f.settings.BatchSize // the same batches as without the interruption
	recs = recs[:done]
	if err := npy.Truncate(int64(len(hdr)) + int64(done)*rowBytes); err == nil {
		_, err = npy.WriteAt(hdr, 0)
	}
	if err == nil {
		_, err = npy.Seek(0, io.SeekEnd)
	}
	if err != nil {
		npy.Close()
		return 0, nil, nil, nil, err
	}
	var buf bytes.Buffer
	for _, r := range recs {
		b, _ := json.Marshal(r)
		buf.Write(append(b, '\n'))
	}
	if err := os.WriteFile(f.path(".jsonl.part"), buf.Bytes(), 0o644); err != nil {
		npy.Close()
		return 0, nil, nil, nil, err
	}
	jsonl, err = os.OpenFile(f.path(".jsonl.part"), os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		npy.Close()
		return 0, nil, nil, nil, err
	}
	return done, recs, npy, jsonl, nil
}

// readRecords reads the whole lines of a JSONL file of records.
func readRecords(p string) ([]record, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var recs []record
	for len(b) > 0 {
		line, rest, ok := bytes.Cut(b, []byte{'\n'})
		if !ok {
			break // a line cut short
		}
		var r record
		if err := json.Unmarshal(line, &r); err != nil || r.Index != len(recs) {
			break
		}
		recs = append(recs, r)
		b = rest
	}
	return recs, nil
}

// append writes rows of features (float64 from the model, stored as
// float32) and their records, and syncs both files.
func appendRows(npy, jsonl *os.File, feats []float64, dim int, normalize bool, recs []record) error {
	rows := rows(feats, len(recs), normalize)
	buf := make([]byte, 0, 4*dim*len(recs))
	for _, r := range rows {
		for _, x := range r {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(x)))
		}
	}
	if _, err := npy.Write(buf); err != nil {
		return err
	}
	var jb bytes.Buffer
	for _, r := range recs {
		b, _ := json.Marshal(r)
		jb.Write(append(b, '\n'))
	}
	if _, err := jsonl.Write(jb.Bytes()); err != nil {
		return err
	}
	if err := npy.Sync(); err != nil {
		return err
	}
	return jsonl.Sync()
}

// finish renames the complete .part files into place.
func (f *featureFile) finish(npy, jsonl *os.File) error {
	if err := errors.Join(npy.Close(), jsonl.Close()); err != nil {
		return err
	}
	if err := os.Rename(f.path(".jsonl.part"), f.path(".jsonl")); err != nil {
		return err
	}
	return os.Rename(f.path(".npy.part"), f.path(".npy"))
}

// bulkEmbed writes the features of --images and --texts into --out.
func bulkEmbed(bf *bulkFlags, b *clip.Bundle, model string, prec kernel.Precision, normalize bool, stdout, stderr io.Writer) error {
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
		f := &featureFile{dir: *bf.out, name: "images", rows: len(set.ids), dim: dim,
			settings: bulkSettings{Model: id, Precision: withDevicePrecision(prec), Normalize: normalize, BatchSize: *bf.batch, Rows: len(set.ids), Dim: dim}}
		done, recs, npy, jsonl, err := f.open()
		if err != nil {
			return err
		}
		// The rows already written must be of these images.
		if err := checkWritten(set, recs, f, stderr); err != nil {
			if npy != nil {
				npy.Close()
				jsonl.Close()
			}
			return err
		}
		if npy != nil {
			if err := embedImages(set, b, f, done, npy, jsonl, normalize, stderr); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "%s (%d × %d float32), %s\n", f.path(".npy"), f.rows, dim, f.path(".jsonl"))
	}
	if *bf.texts != "" {
		raw, err := os.ReadFile(*bf.texts)
		if err != nil {
			return usagef("--texts: %v", err)
		}
		var texts []string
		for _, l := range strings.Split(strings.ReplaceAll(string(raw), "\r\n", "\n"), "\n") {
			if strings.TrimSpace(l) != "" {
				texts = append(texts, l)
			}
		}
		if len(texts) == 0 {
			return usagef("--texts %s: no text", *bf.texts)
		}
		f := &featureFile{dir: *bf.out, name: "texts", rows: len(texts), dim: dim,
			settings: bulkSettings{Model: id, Precision: withDevicePrecision(prec), Normalize: normalize, BatchSize: *bf.batch, Rows: len(texts), Dim: dim}}
		done, recs, npy, jsonl, err := f.open()
		if err != nil {
			return err
		}
		for i, r := range recs {
			if r.Text != texts[i] {
				if npy != nil {
					npy.Close()
					jsonl.Close()
				}
				return fmt.Errorf("%s: row %d was %q, now %q: give another --out, or remove it", f.path(".jsonl"), i, r.Text, texts[i])
			}
		}
		if npy != nil {
			if err := embedTexts(texts, b, f, done, npy, jsonl, normalize, stderr); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "%s (%d × %d float32), %s\n", f.path(".npy"), f.rows, dim, f.path(".jsonl"))
	}
	return nil
}

// checkWritten verifies that the rows a resumed run finds written (recs)
// are of the images set holds now: the same path and the same pixels (their
// digest). The images are decoded on every core, with progress, since a
// run stopped late has most of them behind it; the first row that differs
// (the lowest) is the error.
func checkWritten(set *imageSet, recs []record, f *featureFile, stderr io.Writer) error {
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
func checkRow(set *imageSet, r record, i int, f *featureFile) error {
	if r.Path != set.ids[i] {
		return fmt.Errorf("%s: row %d was %s, now %s: give another --out, or remove it", f.path(".jsonl"), i, r.Path, set.ids[i])
	}
	img, err := set.read(i)
	if err != nil {
		return fmt.Errorf("%s: %w", set.ids[i], err)
	}
	if d := pixelDigest(img); d != r.SHA256 {
		return fmt.Errorf("%s: row %d was %s (sha256 %s), now %s (sha256 %s): give another --out, or remove it", f.path(".jsonl"), i, r.Path, r.SHA256, set.ids[i], d)
	}
	return nil
}

func embedImages(set *imageSet, b *clip.Bundle, f *featureFile, done int, npy, jsonl *os.File, normalize bool, stderr io.Writer) error {
	finished := false
	defer func() {
		if !finished { // the .part files stay, for the next run to resume
			npy.Close()
			jsonl.Close()
		}
	}()
	bar := newProgress(stderr, "embedding images", f.rows-done)
	defer bar.Done()
	batches, stop := prefetch(set, b.Preprocessor, done, f.rows, f.settings.BatchSize)
	defer stop()
	for batch := range batches {
		if batch.err != nil {
			return batch.err
		}
		n := batch.hi - batch.lo
		feat, err := b.Model.EncodeImage(batch.px, n)
		if err != nil {
			return err
		}
		recs := make([]record, n)
		for k := range recs {
			i := batch.lo + k
			recs[k] = record{Index: i, Path: set.ids[i], Label: set.labels[i], SHA256: batch.digests[k]}
		}
		if err := appendRows(npy, jsonl, feat.Value().Data().F64(), f.dim, normalize, recs); err != nil {
			return err
		}
		bar.Add(n)
	}
	finished = true
	return f.finish(npy, jsonl)
}

func embedTexts(texts []string, b *clip.Bundle, f *featureFile, done int, npy, jsonl *os.File, normalize bool, stderr io.Writer) error {
	finished := false
	defer func() {
		if !finished {
			npy.Close()
			jsonl.Close()
		}
	}()
	tok, err := b.Tokenizer()
	if err != nil {
		return err
	}
	bar := newProgress(stderr, "embedding texts", f.rows-done)
	defer bar.Done()
	for lo := done; lo < f.rows; lo += f.settings.BatchSize {
		hi := min(lo+f.settings.BatchSize, f.rows)
		ids := make([][]int, hi-lo)
		recs := make([]record, hi-lo)
		for k := range ids {
			if ids[k], err = tok.Tokenize(texts[lo+k], b.Model.Config.Text.ContextLength, true); err != nil {
				return err
			}
			recs[k] = record{Index: lo + k, Text: texts[lo+k], SHA256: textDigest(texts[lo+k])}
		}
		feat, err := b.Model.EncodeText(ids)
		if err != nil {
			return err
		}
		if err := appendRows(npy, jsonl, feat.Value().Data().F64(), f.dim, normalize, recs); err != nil {
			return err
		}
		bar.Add(hi - lo)
	}
	finished = true
	return f.finish(npy, jsonl)
}

// bulkClassify classifies every image of --images into --out: CSV (path,
// label, prediction, probability, then one column per class) or, for a
// name ending in .jsonl, one JSON object a line.
func bulkClassify(bf *bulkFlags, b *clip.Bundle, head *clip.ZeroShot, classes []string, stderr io.Writer) error {
	out := *bf.out
	csvOut := !strings.HasSuffix(strings.ToLower(out), ".jsonl")
	if csvOut && !strings.HasSuffix(strings.ToLower(out), ".csv") {
		return usagef("--out %s: want a .csv or .jsonl file", out)
	}
	set, err := openImageSet(*bf.images)
	if err != nil {
		return err
	}
	defer set.close()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if csvOut {
		fmt.Fprint(w, "path,label,prediction,probability")
		for _, c := range classes {
			fmt.Fprint(w, ",", csvField(c))
		}
		fmt.Fprintln(w)
	}
	type labelProb struct {
		Label string  `json:"label"`
		Prob  float64 `json:"prob"`
	}
	bar := newProgress(stderr, "classifying", len(set.ids))
	batches, stop := prefetch(set, b.Preprocessor, 0, len(set.ids), *bf.batch)
	defer stop()
	for batch := range batches {
		if batch.err != nil {
			bar.Done()
			return batch.err
		}
		f, err := b.Model.EncodeImage(batch.px, batch.hi-batch.lo)
		if err != nil {
			bar.Done()
			return err
		}
		for k, p := range clip.Softmax(b.Model.Classify(head, f)) {
			i := batch.lo + k
			best := 0
			for j := range p {
				if p[j] > p[best] {
					best = j
				}
			}
			if csvOut {
				fmt.Fprintf(w, "%s,%s,%s,%.6g", csvField(set.ids[i]), csvField(set.labels[i]), csvField(classes[best]), p[best])
				for _, x := range p {
					fmt.Fprintf(w, ",%.6g", x)
				}
				fmt.Fprintln(w)
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
			w.Write(append(line, '\n'))
		}
		bar.Add(batch.hi - batch.lo)
	}
	bar.Done()
	if err := w.Flush(); err != nil {
		return err
	}
	if dir := filepath.Dir(out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := atomicfile.Write(out, buf.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d images classified into %s\n", len(set.ids), out)
	return nil
}

// csvField quotes s for CSV when it needs it.
func csvField(s string) string {
	if !strings.ContainsAny(s, ",\"\n\r") {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
