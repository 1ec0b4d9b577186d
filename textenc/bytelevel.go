package textenc

import "fmt"

// Ids of the byte-level tokenizer's special tokens. The end token has the
// largest id so that CLIP's pooling, which takes the features at the
// position of the largest id in each row, finds it as with BPE.
const (
	ByteSOT       = 256 // start of text
	BytePad       = 257 // padding after the end token
	ByteEOT       = 258 // end of text
	ByteVocabSize = 259
)

// ByteTokenizer is a tokenizer without a vocabulary file for small models
// trained from scratch: each byte of the UTF-8 text is one id (0 to 255),
// followed by start, padding and end ids. Text is taken as is, with no
// clean-up or lower-casing. The zero value is ready to use.
type ByteTokenizer struct{}

// SOT returns ByteSOT.
func (ByteTokenizer) SOT() int { return ByteSOT }

// EOT returns ByteEOT.
func (ByteTokenizer) EOT() int { return ByteEOT }

// Pad returns BytePad.
func (ByteTokenizer) Pad() int { return BytePad }

// VocabSize returns ByteVocabSize.
func (ByteTokenizer) VocabSize() int { return ByteVocabSize }

// Encode returns the bytes of text as ids.
func (t ByteTokenizer) Encode(text string) []int {
	return t.appendEncode(make([]int, 0, len(text)), text)
}

func (ByteTokenizer) appendEncode(dst []int, text string) []int {
	for i := 0; i < len(text); i++ {
		dst = append(dst, int(text[i]))
	}
	return dst
}

// Tokenize returns contextLength ids: ByteSOT, the bytes of text, ByteEOT,
// then BytePad. Text that does not fit is an error unless truncate is set;
// then the first contextLength ids are kept and the last becomes ByteEOT
// (which may cut a multi-byte character).
func (t ByteTokenizer) Tokenize(text string, contextLength int, truncate bool) ([]int, error) {
	return tokenize(t, text, contextLength, truncate)
}

// TokenizeBatch tokenizes each text as Tokenize does.
func (t ByteTokenizer) TokenizeBatch(texts []string, contextLength int, truncate bool) ([][]int, error) {
	return tokenizeBatch(t, texts, contextLength, truncate)
}

// Decode returns the bytes of ids as a string, leaving out the start, end
// and padding ids, so that it inverts both Encode and Tokenize (without
// truncation). An id outside [0, ByteVocabSize) is an error.
func (ByteTokenizer) Decode(ids []int) (string, error) {
	b := make([]byte, 0, len(ids))
	for i, id := range ids {
		switch {
		case 0 <= id && id < 256:
			b = append(b, byte(id))
		case id == ByteSOT || id == ByteEOT || id == BytePad:
		default:
			return "", fmt.Errorf("textenc: decode: id %d at position %d is not a byte-level id", id, i)
		}
	}
	return string(b), nil
}
