package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/builtin"
)

// TestFrostDirBuiltin: with neither --frost nor SUBTTA_FROST, the overlays
// are the embedded ones, written into the cache (no network), and written
// again where one was lost or changed.
func TestFrostDirBuiltin(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("SUBTTA_CACHE", cache)
	t.Setenv("SUBTTA_FROST", "")
	dir, err := frostDir("")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "builtin", "frost"); dir != want {
		t.Errorf("frostDir = %s, want %s", dir, want)
	}
	check := func(when string) {
		t.Helper()
		for _, name := range frostFiles {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if want := builtin.FrostFiles()[name]; err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %s: %v, %d bytes; want the %d embedded", when, name, err, len(got), len(want))
			}
		}
	}
	check("first call")
	os.Remove(filepath.Join(dir, "frost4.jpg"))
	os.WriteFile(filepath.Join(dir, "frost2.png"), []byte("x"), 0o644)
	if _, err := frostDir(""); err != nil {
		t.Fatal(err)
	}
	check("after losing frost4.jpg and changing frost2.png")
}

func TestFrostDirPrecedence(t *testing.T) {
	full := t.TempDir()
	for _, name := range frostFiles {
		os.WriteFile(filepath.Join(full, name), []byte("x"), 0o644)
	}
	partial := t.TempDir()
	os.WriteFile(filepath.Join(partial, "frost1.png"), []byte("x"), 0o644)
	cache := t.TempDir()
	t.Setenv("SUBTTA_CACHE", cache)

	t.Setenv("SUBTTA_FROST", partial)
	if dir, err := frostDir(full); err != nil || dir != full {
		t.Errorf("flag over environment: %q, %v", dir, err)
	}
	_, err := frostDir("")
	if err == nil || !strings.Contains(err.Error(), "SUBTTA_FROST") || !strings.Contains(err.Error(), "frost2.png, frost3.png, frost4.jpg, frost5.jpg") {
		t.Errorf("incomplete SUBTTA_FROST folder: %v", err)
	}
	if _, err := frostDir(partial); err == nil || !strings.Contains(err.Error(), "--frost") {
		t.Errorf("incomplete --frost folder: %v", err)
	}
	t.Setenv("SUBTTA_FROST", full)
	if dir, err := frostDir(""); err != nil || dir != full {
		t.Errorf("environment: %q, %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(cache, "builtin")); err == nil {
		t.Error("the embedded overlays were written out though a folder was given")
	}
}
