package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FileName is the lock file created in a locked folder; it holds the PID
// of the process that holds the lock.
const FileName = ".lock"

// ErrLocked matches Acquire's error when another process holds the lock.
var ErrLocked = errors.New("in use by another process")

// lockedError says who holds a lock; it matches ErrLocked.
type lockedError string

func (e lockedError) Error() string        { return string(e) }
func (e lockedError) Is(target error) bool { return target == ErrLocked }

// Lock is a held lock.
type Lock struct {
	f    *os.File
	path string
}

// Acquire locks dir, which must exist, without waiting: when another
// process holds it, the error wraps ErrLocked and names that process's
// PID.
func Acquire(dir string) (*Lock, error) {
	return AcquireFile(filepath.Join(dir, FileName), dir)
}

// maxRetries bounds how often AcquireFile starts again on a lock file
// removed (Remove) or replaced between its open and its lock.
const maxRetries = 100

// afterOpen, nil but in tests, runs between AcquireFile's open and lock.
var afterOpen func()

// AcquireFile locks the lock file path (created if missing, in a folder
// that must exist) without waiting, for the output what that it guards
// (a file beside it, where a folder of its own is not to be had): when
// another process holds it, the error wraps ErrLocked and names what and
// that process's PID.
//
// Its holder may remove the lock file when it is done (Remove): a process
// that opened the file before the removal and locks it after finds that
// the path no longer leads to the file it locked, and starts again on the
// path's new file, so that two processes never hold locks on two files of
// one path.
func AcquireFile(path, what string) (*Lock, error) {
	for range maxRetries {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if afterOpen != nil {
			afterOpen()
		}
		if err := lockFile(f); err != nil {
			holder := "another process"
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					holder = fmt.Sprintf("process %d", pid)
				}
			}
			f.Close()
			if errors.Is(err, errWouldBlock) {
				return nil, lockedError(fmt.Sprintf("%s is in use by %s (lock file %s)", what, holder, path))
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		held, herr := f.Stat()
		now, nerr := os.Stat(path)
		if herr != nil || nerr != nil || !os.SameFile(held, now) {
			// Removed (or replaced) by its holder meanwhile: the lock
			// is on a file no one else will open.
			unlockFile(f)
			f.Close()
			continue
		}
		if err := f.Truncate(0); err == nil {
			f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &Lock{f: f, path: path}, nil
	}
	return nil, fmt.Errorf("lock %s: the lock file was removed or replaced %d times while it was being locked", path, maxRetries)
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	unlockFile(l.f)
	err := l.f.Close()
	l.f = nil
	return err
}

// Remove removes the lock file, then releases the lock: for a lock file
// beside an output (AcquireFile) that the finished output no longer
// needs. A process that opened the file meanwhile starts again on a new
// one (AcquireFile).
func (l *Lock) Remove() error {
	if l == nil || l.f == nil {
		return nil
	}
	rerr := os.Remove(l.path)
	return errors.Join(rerr, l.Unlock())
}
