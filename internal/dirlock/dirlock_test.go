package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestSecondWriterRefused(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no advisory locks on this system")
	}
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A second open file description conflicts even within one process.
	_, err = Acquire(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second Acquire: %v; want ErrLocked naming PID %d", err, os.Getpid())
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("after Unlock: %v", err)
	}
	l2.Unlock()
}

// TestAcquireFileRemove: a lock file beside an output refuses a second
// holder, naming the output and the PID; once its holder removes it, the
// file is gone and the next AcquireFile holds a new one.
func TestAcquireFileRemove(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no advisory locks on this system")
	}
	path := filepath.Join(t.TempDir(), "out.csv.part.lock")
	l, err := AcquireFile(path, "out.csv")
	if err != nil {
		t.Fatal(err)
	}
	_, err = AcquireFile(path, "out.csv")
	if !errors.Is(err, ErrLocked) || !strings.HasPrefix(err.Error(), fmt.Sprintf("out.csv is in use by process %d", os.Getpid())) {
		t.Fatalf("second AcquireFile: %v; want ErrLocked naming out.csv and PID %d", err, os.Getpid())
	}
	if err := l.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file after Remove: %v", err)
	}
	l2, err := AcquireFile(path, "out.csv")
	if err != nil {
		t.Fatalf("after Remove: %v", err)
	}
	l2.Remove()
}

// TestAcquireFileRemovedWhileLocking: a process that opened the lock file
// before its holder removed it, and locks it after, must not hold a lock
// on the removed file while another holds the path's new one: AcquireFile
// finds the path leads to another file, starts again, and is refused.
func TestAcquireFileRemovedWhileLocking(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no advisory locks on this system")
	}
	path := filepath.Join(t.TempDir(), "x.lock")
	first, err := AcquireFile(path, "x")
	if err != nil {
		t.Fatal(err)
	}
	var third *Lock
	afterOpen = func() {
		// Between the second's open and lock: the first is done and
		// removes its file, and a third takes the path's new one.
		afterOpen = nil
		if err := first.Remove(); err != nil {
			t.Error(err)
		}
		if third, err = AcquireFile(path, "x"); err != nil {
			t.Error(err)
		}
	}
	defer func() { afterOpen = nil }()
	second, err := AcquireFile(path, "x")
	if third == nil {
		t.Fatal("the third AcquireFile did not run")
	}
	defer third.Unlock()
	if !errors.Is(err, ErrLocked) {
		second.Unlock()
		t.Fatalf("second AcquireFile: %v while the third holds the path's lock file; want ErrLocked", err)
	}
}
