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
	f *os.File
}

// Acquire locks dir, which must exist, without waiting: when another
// process holds it, the error wraps ErrLocked and names that process's
// PID.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
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
			return nil, lockedError(fmt.Sprintf("%s is in use by %s (lock file %s)", dir, holder, path))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
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
