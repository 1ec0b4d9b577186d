package filelock

import (
	"path/filepath"
	"testing"
	"time"
)

// A second Acquire of a path waits until the first is released.
func TestSecondLockWaits(t *testing.T) {
	if !Supported {
		t.Skip("no advisory locks on this system")
	}
	path := filepath.Join(t.TempDir(), ".s.stream.lock")
	first, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock)
	go func() {
		l, err := Acquire(path)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("the second Acquire did not wait for the first")
	case <-time.After(100 * time.Millisecond):
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second Acquire was not granted after the first was released")
	}
	if err := first.Unlock(); err != nil {
		t.Errorf("second Unlock: %v", err)
	}
}

func TestLockNeedsFolder(t *testing.T) {
	if _, err := Acquire(filepath.Join(t.TempDir(), "missing", ".s.stream.lock")); err == nil {
		t.Error("locking in a missing folder succeeded")
	}
}
