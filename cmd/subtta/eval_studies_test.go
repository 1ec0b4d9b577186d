package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestEvalStudyFlags: --set repeated, --templates with a file and a set,
// --classes with its seed and --class-names reach the config; a bad --set
// is a usage error naming the flag.
func TestEvalStudyFlags(t *testing.T) {
	t.Setenv("SUBTTA_CACHE", t.TempDir())
	dir := t.TempDir()
	file := filepath.Join(dir, "templates.txt")
	os.WriteFile(file, []byte("a {} seen from afar.\nart of a {}.\n"), 0o644)
	fs := pflag.NewFlagSet("eval", pflag.ContinueOnError)
	f := newEvalFlags(fs)
	err := fs.Parse([]string{"--set", "subtta.rank=8", "--set", "tent.lr=5e-4", "--templates", "@" + file, "--templates", "t3",
		"--classes", "4", "--class-seed", "9", "--methods", "subtta-m,tent"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MethodOptions["subtta"]["rank"] != "8" || cfg.MethodOptions["tent"]["lr"] != "5e-4" {
		t.Errorf("method options %v", cfg.MethodOptions)
	}
	if !slices.Equal(cfg.Templates, []string{"a {} seen from afar.", "art of a {}.", "t3"}) {
		t.Errorf("templates %q", cfg.Templates)
	}
	if cfg.Classes != 4 || cfg.ClassSeed != 9 {
		t.Errorf("classes %d, seed %d", cfg.Classes, cfg.ClassSeed)
	}

	fs = pflag.NewFlagSet("eval", pflag.ContinueOnError)
	f = newEvalFlags(fs)
	if err := fs.Parse([]string{"--class-names", "cat,dog"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err = f.config(); err != nil || !slices.Equal(cfg.ClassNames, []string{"cat", "dog"}) {
		t.Errorf("class names %q, %v", cfg.ClassNames, err)
	}

	var stdout, stderr bytes.Buffer
	if st := run([]string{"eval", "--set", "rank=8"}, &stdout, &stderr); st == 0 || !strings.Contains(stderr.String(), "--set") {
		t.Errorf("--set rank=8: status %d, %s", st, stderr.String())
	}
	stderr.Reset()
	if st := run([]string{"eval", "--methods", "subtta-m", "--set", "subtta-m.rank=0"}, &stdout, &stderr); st == 0 || !strings.Contains(stderr.String(), "subtta-m.rank") {
		t.Errorf("--set subtta-m.rank=0: status %d, %s", st, stderr.String())
	}
	stdout.Reset()
	if st := run([]string{"eval", "--options", "subtta-m"}, &stdout, &stderr); st != 0 || !strings.Contains(stdout.String(), "rank") {
		t.Errorf("--options subtta-m: status %d, %s", st, stdout.String())
	}
	// Under the episodic protocol, the preset an episodic run takes.
	stdout.Reset()
	if st := run([]string{"eval", "--options", "subtta-m", "--protocol", "episodic"}, &stdout, &stderr); st != 0 ||
		!regexp.MustCompile(`(?m)^  batch_size +1 `).MatchString(stdout.String()) || !regexp.MustCompile(`(?m)^  bank_size +64 `).MatchString(stdout.String()) ||
		!strings.Contains(stdout.String(), "episodic protocol") {
		t.Errorf("--options subtta-m --protocol episodic: status %d, %s", st, stdout.String())
	}
	stdout.Reset()
	if st := run([]string{"eval", "--wnids", "--dataset", "imagenet-a"}, &stdout, &stderr); st != 0 || len(strings.Fields(stdout.String())) != 200 || !strings.HasPrefix(stdout.String(), "n01498041\n") {
		t.Errorf("--wnids imagenet-a: status %d, %d lines", st, len(strings.Fields(stdout.String())))
	}
}
