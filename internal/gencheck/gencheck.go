package gencheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Check runs the generator (a `//go:build ignore` program of the package
// in the current directory, such as gen_asm.go) in a temporary directory
// and compares every file it writes with the package's file of that name.
// It skips, saying why, where the go command cannot be found, and fails
// under CI (CI=true), where it must be.
func Check(t *testing.T, generator string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("gencheck: no go command to run %s: %v", generator, err)
		}
		t.Skipf("gencheck: no go command to run %s", generator)
	}
	src, err := os.ReadFile(generator)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, generator), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "run", generator)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run %s: %v\n%s", generator, err, out)
	}
	written, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range written {
		if e.Name() == generator {
			continue
		}
		got, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(e.Name())
		if err != nil {
			t.Errorf("%s writes %s, which the package does not have: %v", generator, e.Name(), err)
			continue
		}
		if !bytes.Equal(got, have) {
			t.Errorf("%s differs from what %s writes now: run go generate", e.Name(), generator)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("%s wrote no file", generator)
	}
}
