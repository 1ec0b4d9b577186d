package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/textenc"
)

// maxContext bounds --context: far beyond any CLIP's 77, and small enough
// that a typo cannot ask for gigabytes of padding.
const maxContext = 4096

// tokenizeOptions are the flags of tokenize.
type tokenizeOptions struct {
	vocab   string
	context int

	stdout, stderr io.Writer
}

// newTokenizeCmd is `subtta tokenize TEXT...`.
func newTokenizeCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &tokenizeOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "tokenize TEXT...",
		Short: "CLIP BPE token ids of texts (JSON)",
		Long:  "CLIP BPE token ids of texts (JSON)",
		RunE:  func(cmd *cobra.Command, args []string) error { return o.run(args) },
	}
	f := c.Flags()
	f.StringVar(&o.vocab, "vocab", "", "CLIP vocabulary: bpe_simple_vocab_16e6.txt.gz, vocab.json+merges.txt folder, or tokenizer.json (default: $SUBTTA_VOCAB, else the built-in model's byte-level tokenizer; nothing is downloaded)")
	f.IntVar(&o.context, "context", 77, "context length of the padded ids")
	return c
}

// run prints the token ids of texts.
func (o *tokenizeOptions) run(texts []string) error {
	if len(texts) == 0 {
		return usagef("no text given")
	}
	if o.context < 2 || o.context > maxContext {
		return usagef("--context %d: want 2 to %d (the start and end tokens take two)", o.context, maxContext)
	}
	tok, err := tokenizeTokenizer(o.vocab, o.stderr)
	if err != nil {
		return err
	}
	type row struct {
		Text   string `json:"text"`
		IDs    []int  `json:"ids"`
		Padded []int  `json:"padded"`
	}
	var out []row
	for _, text := range texts {
		padded, err := tok.Tokenize(text, o.context, true)
		if err != nil {
			return err
		}
		warnCut(o.stderr, tok, []string{text}, o.context)
		ids := tok.Encode(text)
		if ids == nil {
			ids = []int{} // "ids": [] for an empty text, not null
		}
		out = append(out, row{Text: text, IDs: ids, Padded: padded})
	}
	return writeJSON(o.stdout, out)
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

// warnCutShown is how many cut texts warnCut names one by one; the rest
// are counted.
const warnCutShown = 5

// warnCut prints a warning for each text that does not fit in the context
// and is therefore cut (CLIP truncates silently: a long template can make
// every prompt the same), the first warnCutShown by name and the number
// of the others.
func warnCut(w io.Writer, tok textenc.Tokenizer, texts []string, context int) {
	cut := 0
	for _, t := range texts {
		if n := len(tok.Encode(t)) + 2; n > context {
			if cut < warnCutShown {
				fmt.Fprintf(w, "warning: %q is %d tokens, more than the context of %d: it is cut\n", t, n, context)
			}
			cut++
		}
	}
	if cut > warnCutShown {
		fmt.Fprintf(w, "warning: %d more texts are longer than the context of %d and cut\n", cut-warnCutShown, context)
	}
}
