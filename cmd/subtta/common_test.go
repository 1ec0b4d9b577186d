package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/pretrain"
	"github.com/subtta/subtta/weights"
)

// TestVocabDoesNotFit: a vocabulary whose ids the model's text tower has no
// embedding for is refused before any work, naming where it was given:
// --vocab for the built-in byte-level model in every command that takes
// it (classify, embed, eval), and --vocab or $SUBTTA_VOCAB for a BPE model
// with fewer ids than the vocabulary; a $SUBTTA_VOCAB that cannot be read
// is named too. The byte-level model does not read $SUBTTA_VOCAB.
func TestVocabDoesNotFit(t *testing.T) {
	t.Setenv("SUBTTA_VOCAB", "")
	vocab := fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")
	dir := t.TempDir()
	jpegs, err := builtin.JPEGs(1)
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img.jpg")
	if err := os.WriteFile(img, jpegs[0], 0o644); err != nil {
		t.Fatal(err)
	}
	byteLevel := []string{"--vocab: the vocabulary does not fit", "has 49408 entries", "byte-level tokens (vocabulary 259)", "leave it out"}
	for _, args := range [][]string{
		{"classify", "--vocab", vocab, "--labels", "cat,dog", img},
		{"embed", "--vocab", vocab, "--text", "a cat"},
		{"eval", "--vocab", vocab, "--limit", "1", "--methods", "source", "--corruptions", "fog", "--out", filepath.Join(dir, "eval")},
	} {
		var out, errb bytes.Buffer
		st := run(args, &out, &errb)
		if st != 2 || out.Len() > 0 {
			t.Errorf("%q: status %d, stdout %q; want 2 and nothing", args, st, out.String())
		}
		for _, want := range byteLevel {
			if !strings.Contains(errb.String(), want) {
				t.Errorf("%q: stderr %q; want %q", args, errb.String(), want)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "eval")); err == nil {
		t.Error("eval made its results folder before refusing --vocab")
	}

	// A text tower of 1,000 ids, not byte-level: CLIP's vocabulary has
	// more.
	cfg := pretrain.SmallCIFAR()
	cfg.Vision.Layers, cfg.Text.Layers = 1, 1
	s, err := pretrain.RandomState(&cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Text.VocabSize = 1000
	token := cfg.TensorNames().Text.Token
	s.Set(&weights.Param{Name: token, Shape: []int{cfg.Text.VocabSize, cfg.Text.Width}, Data: make([]float32, cfg.Text.VocabSize*cfg.Text.Width)})
	cj, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "model.safetensors")
	if err := weights.WriteFile(model, s.Tensors(weights.F32), map[string]string{"config": string(cj)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env, flag string
		status    int
		want      []string
	}{
		{"", vocab, 2, []string{"--vocab: the vocabulary does not fit the model's text tower: " + vocab + " has 49408 entries, the model's text tower 1000"}},
		{vocab, "", 1, []string{"the vocabulary does not fit the model's text tower: " + vocab + " has 49408 entries, the model's text tower 1000"}},
		{"/does/not/exist", "", 1, []string{"SUBTTA_VOCAB: ", "/does/not/exist"}},
		{"", "/does/not/exist", 1, []string{"--vocab: ", "/does/not/exist"}},
	} {
		t.Setenv("SUBTTA_VOCAB", c.env)
		args := []string{"embed", "--model", model, "--text", "a cat"}
		if c.flag != "" {
			args = append(args, "--vocab", c.flag)
		}
		var out, errb bytes.Buffer
		st := run(args, &out, &errb)
		ok := st == c.status && out.Len() == 0
		for _, want := range c.want {
			ok = ok && strings.Contains(errb.String(), want)
		}
		if !ok {
			t.Errorf("SUBTTA_VOCAB=%q %q: status %d, stdout %q, stderr %q; want %d and %q", c.env, args, st, out.String(), errb.String(), c.status, c.want)
		}
	}

	t.Setenv("SUBTTA_VOCAB", vocab)
	var out, errb bytes.Buffer
	if st := run([]string{"embed", "--text", "a cat"}, &out, &errb); st != 0 {
		t.Errorf("the built-in model with SUBTTA_VOCAB set: status %d, stderr %q; want 0 (byte-level tokens)", st, errb.String())
	}
}
