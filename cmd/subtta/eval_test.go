package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

func evalArgs(t *testing.T, out string, extra ...string) []string {
	return append([]string{"eval",
		"--model", fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"),
		"--vocab", fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz"),
		"--dataset", "cifar10-c",
		"--data", fixture.Path(t, "assets/cifar10/test-jpg.tar.gz"),
		"--out", out, "--quiet",
	}, extra...)
}

func TestEvalCommand(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := evalArgs(t, out, "--methods", "source,subtta-m", "--corruptions", "gaussian_noise,contrast",
		"--limit", "8", "--batch-size", "4", "--plot")
	if st := run(args, &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	for _, want := range []string{"source", "subtta-m", "Mean"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, f := range []string{"results.md", "results.csv", "results.json", "results.jsonl", "plots/accuracy.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stderr.String(), "4 domains computed, 0 taken from earlier runs") {
		t.Errorf("stderr: %s", stderr.String())
	}

	// The same run from a config file, one more method given as a flag:
	// only the new method's domains are computed.
	cfg := map[string]any{"methods": []string{"source", "subtta-m"}, "corruptions": []string{"gaussian_noise", "contrast"},
		"limit": 8, "batch_size": 4} // seeds default to 1, as on the command line
	b, _ := json.Marshal(cfg)
	path := filepath.Join(t.TempDir(), "eval.json")
	os.WriteFile(path, b, 0o644)
	stdout.Reset()
	stderr.Reset()
	if st := run(evalArgs(t, out, "--config", path, "--methods", "source,subtta-m,tent"), &stdout, &stderr); st != 0 {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if !strings.Contains(stderr.String(), "2 domains computed, 4 taken from earlier runs") || !strings.Contains(stdout.String(), "tent") {
		t.Errorf("resumed run: stderr %s\nstdout %s", stderr.String(), stdout.String())
	}
}

func TestEvalBadInput(t *testing.T) {
	dir := t.TempDir()
	badCfg := filepath.Join(dir, "bad.json")
	os.WriteFile(badCfg, []byte(`{"methodz": ["source"]}`), 0o644)
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"eval"}, 2, "--model is required"},
		{evalArgs(t, dir, "--severities", "x"), 2, `"x" is not an integer`},
		{evalArgs(t, dir, "--corruptions", "rain"), 1, `"rain"`},
		{evalArgs(t, dir, "--data", filepath.Join(dir, "missing")), 1, "no such file or folder"},
		{evalArgs(t, dir, "--config", badCfg), 1, `unknown field "methodz"`},
		{evalArgs(t, dir, "stray"), 2, `unexpected argument "stray"`},
	} {
		var stdout, stderr bytes.Buffer
		st := run(tc.args, &stdout, &stderr)
		if st != tc.status || !strings.Contains(stderr.String(), tc.stderr) || strings.Count(strings.TrimSpace(stderr.String()), "\n") > 2 {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tc.args[1:], st, stderr.String(), tc.status, tc.stderr)
		}
	}
}
