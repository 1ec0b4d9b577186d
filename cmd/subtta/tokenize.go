package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/textenc"
)

// maxContext bounds --context: far beyond any CLIP's 77, and small enough
// that a typo cannot ask for gigabytes of padding.
const maxContext = 4096

// tokenizeOptions are the flags of tokenize.
type tokenizeOptions struct {
	vocab        string
	context      int
	contextGiven bool // --context was given; else the model's (tokenizeTokenizer)

	stdout, stderr io.Writer
}

// newTokenizeCmd is `subtta tokenize TEXT...`.
func newTokenizeCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &tokenizeOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "tokenize TEXT...",
		Short: "CLIP BPE token ids of texts (JSON)",
		Long: "CLIP BPE token ids of texts (JSON)\n\n" +
			"With --vocab (or $SUBTTA_VOCAB), CLIP's BPE, padded to CLIP's context of 77; else the built-in model's\n" +
			"byte-level tokens, padded to its context (64). A text longer than the context is cut, with a warning.",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.contextGiven = cmd.Flags().Changed("context")
			return o.run(args)
		},
	}
	f := c.Flags()
	f.StringVar(&o.vocab, "vocab", "", "CLIP vocabulary: bpe_simple_vocab_16e6.txt.gz, vocab.json+merges.txt folder, or tokenizer.json (default: $SUBTTA_VOCAB, else the built-in model's byte-level tokenizer; nothing is downloaded)")
	f.IntVar(&o.context, "context", 0, "context length of the padded ids (default: the model's: 77 with a CLIP vocabulary, else the built-in model's 64)")
	return c
}

// run prints the token ids of texts.
func (o *tokenizeOptions) run(texts []string) error {
	if len(texts) == 0 {
		return usagef("no text given")
	}
	if o.contextGiven && (o.context < 2 || o.context > maxContext) {
		return usagef("--context %d: want 2 to %d (the start and end tokens take two)", o.context, maxContext)
	}
	context := 0 // the model's
	if o.contextGiven {
		context = o.context
	}
	tok, context, err := tokenizeTokenizer(o.vocab, context, o.stderr)
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
		padded, err := tok.Tokenize(text, context, true)
		if err != nil {
			return err
		}
		warnCut(o.stderr, tok, []string{text}, context)
		ids := tok.Encode(text)
		if ids == nil {
			ids = []int{} // "ids": [] for an empty text, not null
		}
		out = append(out, row{Text: text, IDs: ids, Padded: padded})
	}
	return writeJSON(o.stdout, out)
}

// tokenizeTokenizer is tokenize's tokenizer and the context to pad to:
// CLIP's BPE from vocab or $SUBTTA_VOCAB, else the built-in model's
// byte-level tokenizer, with a note on stderr saying so. The context is
// context when not 0, else that of the model the tokens are for: CLIP's
// (textenc.ContextLength) with BPE, the built-in model's text context with
// byte-level tokens. A padded sequence of another length would not be the
// input of the model the tokens are said to be for, and would hide that a
// text is cut. It never downloads: a vocabulary is used only when named,
// so that the command's output does not depend on the network or on what
// a cache happens to hold. Its errors name where the vocabulary came from
// (--vocab or SUBTTA_VOCAB).
func tokenizeTokenizer(vocab string, context int, stderr io.Writer) (textenc.Tokenizer, int, error) {
	source := "--vocab"
	if vocab == "" {
		source, vocab = "SUBTTA_VOCAB", os.Getenv("SUBTTA_VOCAB")
	}
	if vocab == "" {
		if context != 0 {
			fmt.Fprintln(stderr, "byte-level tokens (the built-in model's tokenizer); give --vocab or SUBTTA_VOCAB for CLIP's BPE")
			return builtin.Tokenizer(), context, nil
		}
		b, err := openModel(builtin.ModelName, "", "", "", kernel.FP32, stderr)
		if err != nil {
			return nil, 0, err
		}
		context = b.Model.Config.Text.ContextLength
		fmt.Fprintf(stderr, "byte-level tokens and the context of %d (the built-in model's tokenizer); give --vocab or SUBTTA_VOCAB for CLIP's BPE\n", context)
		return builtin.Tokenizer(), context, nil
	}
	t, err := textenc.LoadBPETokenizer(vocab)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", source, err)
	}
	if context == 0 {
		context = textenc.ContextLength
	}
	return t, context, nil
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
