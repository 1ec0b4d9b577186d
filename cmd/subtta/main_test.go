package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

func TestRunExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{nil, 2, "usage"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"tokenize"}, 2, "no text given"},
		{[]string{"convert", "--dtype", "f8", "a", "b"}, 2, `--dtype "f8"`},
		{[]string{"classify", "--labels", "a", "--model", "/does/not/exist.pt", "x.png"}, 1, "/does/not/exist.pt"},
		{[]string{"bench", "--batch", "0"}, 2, "must be positive"},
	} {
		var out, errb bytes.Buffer
		if got := run(tc.args, &out, &errb); got != tc.status || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tc.args, got, errb.String(), tc.status, tc.stderr)
		}
	}
}

func TestTokenizeAndClassify(t *testing.T) {
	vocab := fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")
	var out, errb bytes.Buffer
	if st := run([]string{"tokenize", "--vocab", vocab, "Hello World!"}, &out, &errb); st != 0 {
		t.Fatalf("tokenize: status %d: %s", st, errb.String())
	}
	var rows []struct{ IDs []int }
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 || len(rows[0].IDs) == 0 {
		t.Fatalf("tokenize output %q: %v", out.String(), err)
	}
	model := fixture.Path(t, "fixtures/clip-tiny.openai.safetensors")
	img := fixture.Path(t, "assets/clip/CLIP.png")
	out.Reset()
	if st := run([]string{"classify", "--json", "--model", model, "--vocab", vocab, "--labels", "a diagram,a dog,a cat", img}, &out, &errb); st != 0 {
		t.Fatalf("classify: status %d: %s", st, errb.String())
	}
	var res []struct{ Probs map[string]float64 }
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 1 || len(res[0].Probs) != 3 {
		t.Fatalf("classify output %q: %v", out.String(), err)
	}
	var sum float64
	for _, p := range res[0].Probs {
		sum += p
	}
	if sum < 0.999 || sum > 1.001 {
		t.Errorf("probabilities sum to %g", sum)
	}
}
