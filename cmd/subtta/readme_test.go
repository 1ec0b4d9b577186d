package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestREADMECommands runs every ```sh block of the README as written, in
// a scratch folder that holds the repository's builtin/, with the test
// binary standing in for `go run ./cmd/subtta`. Blocks it does not run,
// and why, are logged: the set-up block (`go test ./...` is this test
// suite; its `eval` takes minutes: SUBTTA_README_SLOW=1 runs it too). No
// block needs a network.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the README's commands take about a minute")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bash is not installed")
		}
		t.Skip("bash is not installed")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	rest := string(readme)
	for {
		_, after, ok := strings.Cut(rest, "\n```sh\n")
		if !ok {
			break
		}
		block, tail, _ := strings.Cut(after, "\n```\n")
		blocks, rest = append(blocks, block), tail
	}
	if len(blocks) < 4 {
		t.Fatalf("%d sh blocks in README.md", len(blocks))
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(exe, filepath.Join(bin, "subtta")); err != nil {
		t.Fatal(err)
	}
	repoBuiltin, err := filepath.Abs(filepath.Join("..", "..", "builtin"))
	if err != nil {
		t.Fatal(err)
	}
	slow := os.Getenv("SUBTTA_README_SLOW") == "1"
	for i, block := range blocks {
		first := strings.SplitN(block, "\n", 2)[0]
		if strings.Contains(block, "go test ./...") && !slow {
			t.Logf("not run: the block of %q (go test ./... is this suite; its eval takes minutes; SUBTTA_README_SLOW=1 runs that eval)", first)
			continue
		}
		script := strings.ReplaceAll(block, "go run ./cmd/subtta", "subtta")
		script = strings.ReplaceAll(script, "go test ./...", "true")
		dir := t.TempDir()
		if err := os.Symlink(repoBuiltin, filepath.Join(dir, "builtin")); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bash, "-euo", "pipefail", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("README block %d (%q): %v\n%s", i, first, err, out)
			continue
		}
		t.Logf("ran the block of %q in %v", first, time.Since(start).Round(time.Millisecond))
	}
}
