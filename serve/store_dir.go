package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/internal/filelock"
)

// dirStore keeps each stream's state in the file ID.stream of a folder,
// rewritten whole (atomically) at every save. Its compare-and-swap reads
// the stamp in the file's head (not the rest of the file) and writes the
// new state under an exclusive lock on the hidden .ID.stream.lock
// (internal/filelock), so that several servers may share the folder.
type dirStore struct {
	dir string

	mu   sync.Mutex
	held map[string]*filelock.Lock // streams whose lock this store holds (Lock)
}

func openDirStore(dir string) (*dirStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("serve: state directory: %w", err)
	}
	if err := checkFoldedNames(dir); err != nil {
		return nil, err
	}
	return &dirStore{dir: dir, held: map[string]*filelock.Lock{}}, nil
}

func (d *dirStore) path(id string) string { return filepath.Join(d.dir, id+".stream") }

// lockPath is the lock file of a stream's state file: hidden, and left
// behind when the stream is deleted (filelock).
func (d *dirStore) lockPath(id string) string { return filepath.Join(d.dir, "."+id+".stream.lock") }

func (d *dirStore) Where(id string) string { return d.path(id) }

func (d *dirStore) Close() error { return nil }

// asidePath is where a damaged state file is set aside.
func (d *dirStore) asidePath(id string) string { return d.path(id) + ".damaged" }

func (d *dirStore) Load(_ context.Context, id string) (*savedStream, error) {
	b, sv, err := d.read(id)
	if errors.Is(err, errBadState) && b != nil {
		return nil, d.setAside(id, b, err)
	}
	return sv, err
}

func (d *dirStore) Peek(_ context.Context, id string) (*savedStream, error) {
	_, sv, err := d.read(id)
	return sv, err
}

// read reads the stream's state file whole and decodes it, returning its
// bytes too (nil where there is no file).
func (d *dirStore) read(id string) ([]byte, *savedStream, error) {
	f, err := d.open(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, d.asideErr(id)
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: reading %s: %w", d.path(id), err)
	}
	sv, err := decodeState(b, id, d.path(id))
	return b, sv, err
}

// open opens the stream's state file. A path that holds something other
// than a regular file (a directory, a pipe, a device), which reading would
// fail on, or wait on, every time, is a notFileError.
func (d *dirStore) open(id string) (*os.File, error) {
	fi, err := os.Stat(d.path(id))
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		kind := "a directory"
		if !fi.IsDir() {
			kind = fmt.Sprintf("a file of type %s", fi.Mode().Type())
		}
		return nil, &notFileError{where: d.path(id), kind: kind}
	}
	return os.Open(d.path(id))
}

// setAside renames the state file, found damaged as b (err says why), to
// asidePath, under the stream's lock, if it still holds b: a state saved
// meanwhile stays.
func (d *dirStore) setAside(id string, b []byte, err error) error {
	var be *badStateError
	errors.As(err, &be)
	lerr := d.locked(id, func() error {
		now, err := os.ReadFile(d.path(id))
		if err != nil || !bytes.Equal(now, b) {
			return err
		}
		return os.Rename(d.path(id), d.asidePath(id))
	})
	if lerr != nil {
		return errors.Join(err, fmt.Errorf("serve: setting %s aside: %w", d.path(id), lerr))
	}
	be.aside = d.asidePath(id)
	return be
}

// asideErr is Load's and Head's error for a stream without a state file:
// errBadState when a damaged one was set aside, else nil.
func (d *dirStore) asideErr(id string) error {
	_, err := os.Stat(d.asidePath(id))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	return &badStateError{where: d.path(id), aside: d.asidePath(id), err: errSetAside}
}

// Head reads the file's head only (the whole of a file of the earlier
// format).
func (d *dirStore) Head(_ context.Context, id string) (*streamHead, error) {
	f, err := d.open(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil, d.asideErr(id)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readHead(f, id, d.path(id))
}

// Lock takes the stream's file lock until unlock; the store's own saves
// of the stream meanwhile do not wait for it.
func (d *dirStore) Lock(_ context.Context, id string) (unlock func() error, err error) {
	l, err := filelock.Acquire(d.lockPath(id))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.held[id] = l
	d.mu.Unlock()
	return func() error {
		d.mu.Lock()
		delete(d.held, id)
		d.mu.Unlock()
		return l.Unlock()
	}, nil
}

// locked runs f under the stream's file lock: held by Lock, or taken here.
func (d *dirStore) locked(id string, f func() error) (err error) {
	d.mu.Lock()
	_, held := d.held[id]
	d.mu.Unlock()
	if !held {
		l, err := filelock.Acquire(d.lockPath(id))
		if err != nil {
			return err
		}
		defer func() {
			if uerr := l.Unlock(); err == nil {
				err = uerr
			}
		}()
	}
	return f()
}

func (d *dirStore) Save(ctx context.Context, sv *savedStream, prev *stamp) error {
	b, _, err := encodeState(sv)
	if err != nil {
		return err
	}
	return d.locked(sv.ID, func() error {
		cur, err := d.Head(ctx, sv.ID)
		if err != nil {
			return err
		}
		var st *stamp
		if cur != nil && !cur.Deleted {
			st = &cur.Stamp
		}
		if !sameStamp(st, prev) {
			return errStale
		}
		return atomicfile.Write(d.path(sv.ID), b)
	})
}

// Delete writes the stream's tombstone over its file under its lock, so
// that no save of another server lands between its check and its write.
// Its lock file stays (filelock). A damaged state stays for the operator to
// look at: one set aside (ID.stream.damaged) is kept, and a file whose head
// is damaged, not yet set aside (found by GET, which sets nothing aside,
// or by no one), is set aside before the tombstone is written; a damaged
// body Delete does not see, reading the head alone. The tombstone, not the
// copy's absence, is what lets the stream start afresh: a copy set aside
// counts only where the stream has no file (asideErr).
func (d *dirStore) Delete(ctx context.Context, id string, allow func(*streamHead) bool) (deleted bool, err error) {
	err = d.locked(id, func() error {
		h, err := d.Head(ctx, id)
		if err != nil && !errors.Is(err, errBadState) {
			return err
		}
		var be *badStateError
		switch {
		case errors.As(err, &be) && be.aside != "":
			// Only a damaged file set aside remains: its head may
			// still say whose it is.
			if ah, aerr := d.asideHead(id); aerr == nil {
				h = ah
			} else if !errors.Is(aerr, errBadState) {
				return aerr
			}
			if !allow(h) {
				return nil
			}
			if err := d.writeTombstone(id, h); err != nil {
				return err
			}
			deleted = true
			return nil
		case err != nil: // the state file is damaged
			if !allow(nil) {
				return nil
			}
			if err := os.Rename(d.path(id), d.asidePath(id)); err != nil {
				return fmt.Errorf("serve: setting %s aside: %w", d.path(id), err)
			}
			if err := d.writeTombstone(id, nil); err != nil {
				return err
			}
			deleted = true
			return nil
		case h == nil || h.Deleted:
			return nil
		case !allow(h):
			return nil
		}
		deleted = true
		return d.writeTombstone(id, h)
	})
	return deleted, err
}

// writeTombstone writes the tombstone of the state whose head is h (nil:
// unknown, damaged) over the stream's file.
func (d *dirStore) writeTombstone(id string, h *streamHead) error {
	var was stamp
	owner := ""
	if h != nil {
		was, owner = h.Stamp, h.Owner
	}
	b, _, err := encodeState(tombstone(id, was, owner))
	if err != nil {
		return err
	}
	return atomicfile.Write(d.path(id), b)
}

// asideHead reads the head of the damaged file set aside.
func (d *dirStore) asideHead(id string) (*streamHead, error) {
	f, err := os.Open(d.asidePath(id))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readHead(f, id, d.asidePath(id))
}

// checkFoldedNames refuses a state directory that holds the file of a
// stream id with capitals, saved before ids were folded to lower case: its
// stream would not be found under its folded id. It names the first such
// file and the name to give it.
func checkFoldedNames(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("serve: state directory: %w", err)
	}
	var bad []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".stream")
		if ok && validID.MatchString(id) && id != strings.ToLower(id) {
			bad = append(bad, e.Name())
		}
	}
	if len(bad) == 0 {
		return nil
	}
	more := ""
	if len(bad) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(bad)-1)
	}
	return fmt.Errorf("serve: state directory %s holds %s%s, the file of a stream id with capitals, saved before stream ids were folded to lower case: rename it to %s (where that name is taken, keep one of the two)",
		dir, bad[0], more, strings.ToLower(bad[0]))
}
