package serve

import (
	"context"
	"errors"
	"fmt"
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

func (d *dirStore) Load(_ context.Context, id string) (*savedStream, error) {
	b, err := os.ReadFile(d.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeState(b, id, d.path(id))
}

// Head reads the file's head only (the whole of a file of the earlier
// format).
func (d *dirStore) Head(_ context.Context, id string) (*streamHead, error) {
	f, err := os.Open(d.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
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
		if cur != nil {
			st = &cur.Stamp
		}
		if !sameStamp(st, prev) {
			return errStale
		}
		return atomicfile.Write(d.path(sv.ID), b)
	})
}

// Delete removes the stream's file under its lock, so that no save of
// another server lands between its check and its rename. Its empty lock
// file stays (filelock).
func (d *dirStore) Delete(ctx context.Context, id string, only func(*streamHead) bool) error {
	return d.locked(id, func() error {
		if only != nil {
			// A file that cannot be read is removed all the same.
			if h, err := d.Head(ctx, id); err == nil && h != nil && !only(h) {
				return nil
			}
		}
		if err := os.Remove(d.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
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
