package main

import "io"

func runTokenize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "TEXT...", stderr)
	vocab := fs.String("vocab", "", "CLIP vocabulary: bpe_simple_vocab_16e6.txt.gz, vocab.json+merges.txt folder, or tokenizer.json (default: $SUBTTA_VOCAB, else downloaded into the cache)")
	ctx := fs.Int("context", 77, "context length of the padded ids")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no text given")
	}
	tok, err := loadTokenizer(*vocab, "", stderr)
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
		out = append(out, row{Text: text, IDs: tok.Encode(text), Padded: padded})
	}
	return writeJSON(stdout, out)
}
