package filelock

import (
	"fmt"
	"os"
)

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// Acquire waits until the caller holds the exclusive lock on the lock file
// path, created (empty) if missing in a folder that must exist. Two
// Acquires of one path exclude each other within one process too: each
// opens the lock file anew.
func Acquire(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filelock: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("filelock: lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	uerr := unlockFile(l.f)
	err := l.f.Close()
	l.f = nil
	if uerr != nil {
		return fmt.Errorf("filelock: unlock: %w", uerr)
	}
	return err
}
