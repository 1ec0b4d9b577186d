package embedfile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/internal/dirlock"
)

// ErrMadeOtherwise: the folder holds an output made with other settings,
// or one whose files do not agree with each other.
var ErrMadeOtherwise = errors.New("made otherwise")

// Settings are what DIR/<name>.json records: the model, precision and
// normalisation the rows were computed with, the batch size (a resumed
// run computes the same batches) and the shape.
type Settings struct {
	Model     string `json:"model"`
	Precision string `json:"precision,omitempty"` // "" for fp32, as before it was recorded
	Normalize bool   `json:"normalize"`
	BatchSize int    `json:"batch_size"`
	Rows      int    `json:"rows"`
	Dim       int    `json:"dim"`
}

// Record is a line of DIR/<name>.jsonl: row Index's image (its path and
// label) or text, and a digest of its decoded pixels or its text.
type Record struct {
	Index  int    `json:"index"`
	Path   string `json:"path,omitempty"`
	Label  string `json:"label,omitempty"`
	Text   string `json:"text,omitempty"`
	SHA256 string `json:"sha256"` // of the decoded pixels or the text, first 16 bytes
}

// File is one output being written.
type File struct {
	dir, name string
	settings  Settings
	done      int
	written   []Record
	// npy and jsonl are the .part files, positioned after the rows done;
	// nil when the output is complete.
	npy, jsonl *os.File
	lock       *dirlock.Lock // the folder's, until Close or Finish
}

// Open prepares the output <name> in dir with settings s: it keeps the
// whole batches of an earlier run with the same settings (Done, Written)
// and positions the .part files after them. A complete output is done:
// all rows, and Complete reports it. Settings that differ from those
// recorded wrap ErrMadeOtherwise. A batch size above the number of rows
// makes the same one batch as the number of rows, and is recorded and
// compared as that.
//
// The File holds the folder's lock (internal/dirlock) until Close or
// Finish: while it is open, another Open of the folder, in this process
// or another, is refused with an error that wraps dirlock.ErrLocked, so
// that two runs never append to the same .part files.
func Open(dir, name string, s Settings) (_ *File, err error) {
	s.BatchSize = effectiveBatch(s.BatchSize, s.Rows)
	f := &File{dir: dir, name: name, settings: s}
	if s.BatchSize < 1 || s.Rows < 0 || s.Dim < 1 {
		return nil, fmt.Errorf("embedfile: %s: batch size %d, %d rows of %d", f.Path(".npy"), s.BatchSize, s.Rows, s.Dim)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := dirlock.Acquire(dir)
	if err != nil {
		if errors.Is(err, dirlock.ErrLocked) {
			return nil, fmt.Errorf("%w: another run is writing this output (wait for it to end, or give another --out)", err)
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Unlock()
		}
	}()
	want, _ := json.Marshal(s)
	if old, err := os.ReadFile(f.Path(".json")); err == nil {
		var o Settings
		if json.Unmarshal(old, &o) != nil || o.effective() != s {
			return nil, fmt.Errorf("%s was %w (%s; now %s): give another --out, or remove it", f.Path(".json"), ErrMadeOtherwise, bytes.TrimSpace(old), want)
		}
	} else if err := atomicfile.Write(f.Path(".json"), append(want, '\n')); err != nil {
		return nil, err
	}
	if _, err := os.Stat(f.Path(".npy")); err == nil {
		recs, err := ReadRecords(f.Path(".jsonl"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w: remove the folder", f.Path(".jsonl"), err)
		}
		if len(recs) != s.Rows {
			return nil, fmt.Errorf("%s: %d whole records in order for the %d rows of %s: remove the folder", f.Path(".jsonl"), len(recs), s.Rows, f.Path(".npy"))
		}
		f.done, f.written, f.lock = s.Rows, recs, lock
		return f, nil
	}
	if err := f.openParts(); err != nil {
		return nil, err
	}
	f.lock = lock
	return f, nil
}

// effectiveBatch is the batch size that batch makes for rows rows: no
// batch holds more than every row.
func effectiveBatch(batch, rows int) int {
	if rows > 0 && batch > rows {
		return rows
	}
	return batch
}

// effective is s with the batch size it makes (effectiveBatch), as Open
// records it; settings recorded before were the batch size given.
func (s Settings) effective() Settings {
	s.BatchSize = effectiveBatch(s.BatchSize, s.Rows)
	return s
}

// openParts opens the .part files, keeps their whole batches and cuts
// off the rest.
func (f *File) openParts() (err error) {
	hdr, err := data.NPYHeader("<f4", []int{f.settings.Rows, f.settings.Dim})
	if err != nil {
		return err
	}
	rowBytes := int64(4 * f.settings.Dim)
	npy, err := os.OpenFile(f.Path(".npy.part"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			npy.Close()
		}
	}()
	st, err := npy.Stat()
	if err != nil {
		return err
	}
	npyRows := 0
	if st.Size() >= int64(len(hdr)) {
		npyRows = int((st.Size() - int64(len(hdr))) / rowBytes)
	}
	// Records that cannot be read (other than absent) stop the resume
	// before the rows are cut: read as none, they would discard them all.
	recs, err := ReadRecords(f.Path(".jsonl.part"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("embedfile: resuming %s: %w", f.Path(".npy.part"), err)
	}
	done := min(npyRows, len(recs))
	done -= done % f.settings.BatchSize // the same batches as without the interruption
	recs = recs[:done]
	if err = npy.Truncate(int64(len(hdr)) + int64(done)*rowBytes); err != nil {
		return err
	}
	if _, err = npy.WriteAt(hdr, 0); err != nil {
		return err
	}
	if _, err = npy.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	if err = os.WriteFile(f.Path(".jsonl.part"), recordLines(recs), 0o644); err != nil {
		return err
	}
	jsonl, err := os.OpenFile(f.Path(".jsonl.part"), os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	f.done, f.written, f.npy, f.jsonl = done, recs, npy, jsonl
	return nil
}

// Path is the output's file with the extension ext (".npy", ".jsonl",
// ".json").
func (f *File) Path(ext string) string { return filepath.Join(f.dir, f.name+ext) }

// Settings are the settings the output is written with.
func (f *File) Settings() Settings { return f.settings }

// Done is the number of rows already written, from 0 to Settings.Rows.
func (f *File) Done() int { return f.done }

// Written are the records of the rows already written.
func (f *File) Written() []Record { return f.written }

// Complete reports whether the output was complete when opened: nothing
// is left to write.
func (f *File) Complete() bool { return f.npy == nil }

// Append writes rows (each of Settings.Dim values, stored as float32) and
// their records, and syncs both files.
func (f *File) Append(rows [][]float64, recs []Record) error {
	if f.npy == nil {
		return fmt.Errorf("embedfile: %s is complete or closed", f.Path(".npy"))
	}
	if len(rows) != len(recs) {
		return fmt.Errorf("embedfile: %d rows with %d records", len(rows), len(recs))
	}
	buf := make([]byte, 0, 4*f.settings.Dim*len(rows))
	for _, r := range rows {
		if len(r) != f.settings.Dim {
			return fmt.Errorf("embedfile: a row of %d values, want %d", len(r), f.settings.Dim)
		}
		for _, x := range r {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(x)))
		}
	}
	if _, err := f.npy.Write(buf); err != nil {
		return err
	}
	if _, err := f.jsonl.Write(recordLines(recs)); err != nil {
		return err
	}
	if err := f.npy.Sync(); err != nil {
		return err
	}
	if err := f.jsonl.Sync(); err != nil {
		return err
	}
	f.done += len(rows)
	return nil
}

// Finish closes the .part files, renames them into place and releases
// the folder.
func (f *File) Finish() error {
	defer f.unlock()
	if f.npy == nil {
		return nil
	}
	err := errors.Join(f.npy.Close(), f.jsonl.Close())
	f.npy, f.jsonl = nil, nil
	if err != nil {
		return err
	}
	if err := os.Rename(f.Path(".jsonl.part"), f.Path(".jsonl")); err != nil {
		return err
	}
	return os.Rename(f.Path(".npy.part"), f.Path(".npy"))
}

// Close closes the .part files, leaving them for a later run to resume,
// and releases the folder. It may be called more than once, and after
// Finish.
func (f *File) Close() error {
	defer f.unlock()
	if f.npy == nil {
		return nil
	}
	err := errors.Join(f.npy.Close(), f.jsonl.Close())
	f.npy, f.jsonl = nil, nil
	return err
}

// unlock releases the folder's lock.
func (f *File) unlock() {
	f.lock.Unlock()
	f.lock = nil
}

// ReadRecords reads the whole lines of a JSONL file of records, in order
// from index 0; it stops at a line cut short or out of order.
func ReadRecords(p string) ([]Record, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var recs []Record
	for len(b) > 0 {
		line, rest, ok := bytes.Cut(b, []byte{'\n'})
		if !ok {
			break // a line cut short
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil || r.Index != len(recs) {
			break
		}
		recs = append(recs, r)
		b = rest
	}
	return recs, nil
}

func recordLines(recs []Record) []byte {
	var buf bytes.Buffer
	for _, r := range recs {
		b, _ := json.Marshal(r)
		buf.Write(append(b, '\n'))
	}
	return buf.Bytes()
}
