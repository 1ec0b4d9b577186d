package textenc_test

import (
	"fmt"
	"log"

	"github.com/subtta/subtta/textenc"
)

// A tokenizer over a tiny vocabulary built in memory, the way OpenAI builds
// CLIP's from its merge list: 512 byte tokens, one token per merge, then the
// start and end tokens.
func ExampleNewBPETokenizer() {
	tok, err := textenc.NewBPETokenizer([]textenc.Merge{
		{Left: "p", Right: "h"},
		{Left: "o", Right: "t"},
		{Left: "ph", Right: "ot"},
		{Left: "phot", Right: "o</w>"}, // "</w>" marks the end of a word
	})
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("A  PHOTO!")
	fmt.Println(ids)
	row, err := tok.Tokenize("A  PHOTO!", 8, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(row)
	text, err := tok.Decode(ids)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", text)
	// Output:
	// [320 515 256]
	// [516 320 515 256 517 0 0 0]
	// "a photo ! "
}

// Loading CLIP's vocabulary: OpenAI's bpe_simple_vocab_16e6.txt.gz, a Hugging
// Face vocab.json (with merges.txt beside it) or tokenizer.json, or a
// directory holding one of them.
func ExampleLoadBPETokenizer() {
	tok, err := textenc.LoadBPETokenizer("bpe_simple_vocab_16e6.txt.gz")
	if err != nil {
		log.Fatal(err)
	}
	ids, err := tok.Tokenize("a photo of a cat.", textenc.ContextLength, true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids[:8]) // [49406 320 1125 539 320 2368 269 49407]
}

func ExampleByteTokenizer() {
	var tok textenc.ByteTokenizer
	row, err := tok.Tokenize("café", 8, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(row)
	text, _ := tok.Decode(row)
	fmt.Println(text)
	// Output:
	// [256 99 97 102 195 169 258 257]
	// café
}
