package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
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
