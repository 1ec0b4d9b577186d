package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrDamagedLine is wrapped by the error for a line of a records file that
// is not a record, other than a last line cut short.
var ErrDamagedLine = errors.New("damaged record")

// ReadRecords reads records in JSON Lines format, one JSON object per line.
// Blank lines are skipped. A last line without a terminating newline that
// does not parse is taken to be a write cut short by a killed run and is
// ignored; a malformed line anywhere else is an error that names the line
// and wraps ErrDamagedLine.
func ReadRecords(r io.Reader) ([]Record, error) {
	return readRecords(r, "")
}

// ReadRecordsFile reads the records of the JSON Lines file at path, as
// ReadRecords does. A missing file holds no records and is not an error,
// so that a fresh run and a resumed one are handled alike.
func ReadRecordsFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	return readRecords(f, path)
}

func readRecords(r io.Reader, name string) ([]Record, error) {
	where := func(line int) string {
		if name == "" {
			return fmt.Sprintf("line %d", line)
		}
		return fmt.Sprintf("%s: line %d", name, line)
	}
	// bufio.Reader rather than bufio.Scanner: a line holding the per-batch
	// diagnostics of a large domain may exceed any fixed token limit.
	br := bufio.NewReader(r)
	var recs []Record
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return recs, fmt.Errorf("report: %s: %w", where(line), err)
		}
		complete := err == nil // ends in '\n'
		if t := bytes.TrimSpace(b); len(t) > 0 {
			var rec Record
			if perr := json.Unmarshal(t, &rec); perr != nil {
				if !complete {
					// A truncated last line from a killed run.
					return recs, nil
				}
				return recs, fmt.Errorf("report: %s: %w: %w", where(line), ErrDamagedLine, perr)
			}
			recs = append(recs, rec)
		}
		if !complete {
			return recs, nil
		}
	}
}

// AppendRecord appends rec as one JSON line to the file at path, creating
// the file if needed, and syncs it to stable storage before returning.
//
// The line is written with a single write on a file opened with O_APPEND,
// so a run killed while writing leaves at most one partial last line. If
// the file ends in such a partial line, AppendRecord first removes it
// (truncating the file after its last newline), so that the partial line
// cannot corrupt the new record. A last line that lacks only its newline
// but holds a complete record is kept and terminated.
func AppendRecord(path string, rec Record) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("report: %s: method %q, domain %q: %w", path, rec.Method, rec.Domain, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	err = appendLine(f, line)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return nil
}

// appendLine repairs the end of f if it lacks a final newline, then writes
// line and a newline and syncs f.
func appendLine(f *os.File, line []byte) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(line)+2)
	if size := fi.Size(); size > 0 {
		tail, start, err := lastLine(f, size)
		if err != nil {
			return err
		}
		if len(tail) > 0 {
			var r Record
			if json.Unmarshal(tail, &r) == nil {
				buf = append(buf, '\n') // complete record, missing only its newline
			} else if err := f.Truncate(start); err != nil {
				return err
			}
		}
	}
	buf = append(buf, line...)
	buf = append(buf, '\n')
	if _, err := f.Write(buf); err != nil {
		return err
	}
	return f.Sync()
}

// lastLine returns the bytes after the last newline of f, whose size is
// size, and the offset where they start. tail is empty when f ends in a
// newline.
func lastLine(f *os.File, size int64) (tail []byte, start int64, err error) {
	const chunk = 64 << 10
	end := size
	for end > 0 {
		n := int64(chunk)
		if n > end {
			n = end
		}
		b := make([]byte, n)
		if _, err := f.ReadAt(b, end-n); err != nil {
			return nil, 0, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			start = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	// start is 0 when there is no newline at all.
	tail = make([]byte, size-start)
	if _, err := f.ReadAt(tail, start); err != nil {
		return nil, 0, err
	}
	return tail, start, nil
}
