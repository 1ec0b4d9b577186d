package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// TestTokenizeEmptyText: an empty text has no ids, printed as [] (a list,
// as for any other text), not null, with CLIP's BPE and with the built-in
// byte-level tokenizer alike.
func TestTokenizeEmptyText(t *testing.T) {
	t.Setenv("SUBTTA_VOCAB", "")
	for _, vocab := range []string{"", fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")} {
		args := []string{"tokenize", "--context", "4", ""}
		if vocab != "" {
			args = append(args, "--vocab", vocab)
		}
		var out, errb bytes.Buffer
		if st := run(args, &out, &errb); st != 0 {
			t.Fatalf("%q: status %d: %s", args, st, errb.String())
		}
		if s := out.String(); !strings.Contains(strings.Join(strings.Fields(s), ""), `"ids":[],`) || strings.Contains(s, "null") {
			t.Errorf("%q: output %q, want \"ids\": []", args, s)
		}
	}
}

// builtinContext is the text context of the built-in model, as its
// checkpoint states it.
func builtinContext(t *testing.T) int {
	t.Helper()
	_, c, err := weights.LoadCLIPBytes(builtin.ModelFile, builtin.ModelBytes())
	if err != nil {
		t.Fatal(err)
	}
	return c.Text.ContextLength
}

// TestTokenizeContext: without --context, tokenize pads to the context of
// the model its tokens are for (the built-in model's with its byte-level
// tokens, CLIP's 77 with a vocabulary) and warns, as embed does, of a
// text that does not fit and is cut; --context, when given, is the
// length; a vocabulary that cannot be read is blamed on where it was
// named, --vocab or $SUBTTA_VOCAB.
func TestTokenizeContext(t *testing.T) {
	t.Setenv("SUBTTA_VOCAB", "")
	vocab := fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")
	context := builtinContext(t)
	long := strings.Repeat("a ", context/2+3) // context+6 byte-level ids, well under 77 BPE ones
	tokenize := func(args ...string) (padded int, stderr string) {
		t.Helper()
		var out, errb bytes.Buffer
		if st := run(append([]string{"tokenize"}, args...), &out, &errb); st != 0 {
			t.Fatalf("tokenize %q: status %d: %s", args, st, errb.String())
		}
		var rows []struct{ Padded []int }
		if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("tokenize %q: output %q: %v", args, out.String(), err)
		}
		return len(rows[0].Padded), errb.String()
	}
	cut := "more than the context of"
	if n, stderr := tokenize(long); n != context || !strings.Contains(stderr, cut) {
		t.Errorf("byte-level: %d ids, stderr %q; want the built-in model's context %d and a warning that the text is cut", n, stderr, context)
	}
	if n, stderr := tokenize("a cat"); n != context || strings.Contains(stderr, cut) {
		t.Errorf("byte-level, short: %d ids, stderr %q; want %d and no warning", n, stderr, context)
	}
	if n, stderr := tokenize("--vocab", vocab, long); n != textenc.ContextLength || strings.Contains(stderr, cut) {
		t.Errorf("--vocab: %d ids, stderr %q; want CLIP's %d and no warning", n, stderr, textenc.ContextLength)
	}
	if n, _ := tokenize("--context", "10", "a cat"); n != 10 {
		t.Errorf("--context 10: %d ids", n)
	}
	if n, _ := tokenize("--vocab", vocab, "--context", "100", "a cat"); n != 100 {
		t.Errorf("--vocab, --context 100: %d ids", n)
	}

	for _, c := range []struct {
		env, flag, want, not string
	}{
		{"/does/not/exist", "", "SUBTTA_VOCAB: ", "--vocab"},
		{"", "/does/not/exist", "--vocab: ", "SUBTTA_VOCAB"},
		{vocab, "/does/not/exist", "--vocab: ", "SUBTTA_VOCAB"},
	} {
		t.Setenv("SUBTTA_VOCAB", c.env)
		args := []string{"tokenize", "a cat"}
		if c.flag != "" {
			args = append(args, "--vocab", c.flag)
		}
		var out, errb bytes.Buffer
		if st := run(args, &out, &errb); st != 1 || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), c.not) {
			t.Errorf("SUBTTA_VOCAB=%q %q: status %d, stderr %q; want 1, %q and no %q", c.env, args, st, errb.String(), c.want, c.not)
		}
	}
}
