package main

import (
	"fmt"
	"io"
	"os"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/textenc"
)

// maxContext bounds --context: far beyond any CLIP's 77, and small enough
// that a typo cannot ask for gigabytes of padding.
const maxContext = 4096

func runTokenize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "TEXT...", stderr)
	vocab := fs.String("vocab", "", "CLIP vocabulary: bpe_simple_vocab_16e6.txt.gz, vocab.json+merges.txt folder, or tokenizer.json (default: $SUBTTA_VOCAB, else the built-in model's byte-level tokenizer; nothing is downloaded)")
	ctx := fs.Int("context", 77, "context length of the padded ids")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no text given")
	}
	if *ctx < 2 || *ctx > maxContext {
		return usagef("--context %d: want 2 to %d (the start and end tokens take two)", *ctx, maxContext)
	}
	tok, err := tokenizeTokenizer(*vocab, stderr)
	if err != nil {
		return err
	}
	type row struct {
		Text   string `json:"text"`
		IDs    []int  `json:"ids"`
		Padded []int  `json:"padded"`
	}
	var out []row
	for _, text := range fs.Args() {
		padded, err := tok.Tokenize(text, *ctx, true)
		if err != nil {
			return err
		}
		warnCut(stderr, tok, []string{text}, *ctx)
		out = append(out, row{Text: text, IDs: tok.Encode(text), Padded: padded})
	}
	return writeJSON(stdout, out)
}

// tokenizeTokenizer is tokenize's tokenizer: CLIP's BPE from vocab or
// $SUBTTA_VOCAB, else the built-in model's byte-level tokenizer, with a
// note on stderr saying so. It never downloads: a vocabulary is used only
// when named, so that the command's output does not depend on the network
// or on what a cache happens to hold.
func tokenizeTokenizer(vocab string, stderr io.Writer) (textenc.Tokenizer, error) {
	if vocab == "" {
		vocab = os.Getenv("SUBTTA_VOCAB")
	}
	if vocab == "" {
		fmt.Fprintln(stderr, "byte-level tokens (the built-in model's tokenizer); give --vocab or SUBTTA_VOCAB for CLIP's BPE")
		return builtin.Tokenizer(), nil
	}
	t, err := textenc.LoadBPETokenizer(vocab)
	if err != nil {
		return nil, fmt.Errorf("--vocab: %w", err)
	}
	return t, nil
}

// warnCut prints a warning for each text that does not fit in the context
// and is therefore cut (CLIP truncates silently: a long template can make
// every prompt the same).
func warnCut(w io.Writer, tok textenc.Tokenizer, texts []string, context int) {
	for _, t := range texts {
		if n := len(tok.Encode(t)) + 2; n > context {
			fmt.Fprintf(w, "warning: %q is %d tokens, more than the context of %d: it is cut\n", t, n, context)
		}
	}
}
