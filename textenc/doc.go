// Package textenc is CLIP's text side: the tokenizers, which turn text into
// token ids, and the text transformer (Model), which turns ids into features.
//
// # Tokenizers
//
// BPETokenizer is OpenAI CLIP's tokenizer, id for id: SimpleTokenizer.encode
// is Encode, and clip.tokenize is Tokenize with ContextLength (77). Its
// vocabulary comes from OpenAI's bpe_simple_vocab_16e6.txt.gz (DefaultVocabURL),
// from Hugging Face's vocab.json and merges.txt, or from a Hugging Face
// tokenizer.json; LoadBPETokenizer takes any of them. For CLIP all three give
// the same 49408 ids: 256 byte tokens, the same with the end-of-word suffix
// "</w>", 48894 merges, then <|startoftext|> (49406) and <|endoftext|> (49407).
//
// Encoding follows SimpleTokenizer step by step: unescape HTML entities
// twice as Python's html.unescape does, strip, collapse white space, lower-case
// with Python's rules, split with CLIP's regular expression (Unicode letters,
// single digits, runs of other characters, English contractions, the two
// special tokens), map every byte to a printable character, and apply the BPE
// merges in rank order. Unlike OpenAI's code, ftfy.fix_text is not run (it
// has no Go port): text with mojibake, curly quotes, ligatures or full-width
// forms may tokenize differently from OpenAI's, and text should be in NFC
// form, as ftfy would make it.
//
// ByteTokenizer needs no vocabulary: every UTF-8 byte is one id. It suits
// small text towers trained from scratch.
//
// Both implement Tokenizer. Padding follows clip.tokenize: start id, text
// ids, end id, then padding; too long a text is an error, or with truncation
// is cut so that the last position holds the end id.
package textenc
