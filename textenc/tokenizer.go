package textenc

import (
	"bytes"
	"fmt"
	"sync"
	"unicode/utf8"
)

// ContextLength is the number of token positions of OpenAI's CLIP text
// transformer, the length clip.tokenize pads to.
const ContextLength = 77

// DefaultVocabURL is where OpenAI publishes the CLIP BPE merges, pinned to the
// commit the fixtures were made from.
const DefaultVocabURL = "https://raw.githubusercontent.com/openai/CLIP/d05afc436d78f1c48dc0dbf8e5980a9d471f35f6/clip/bpe_simple_vocab_16e6.txt.gz"

// DefaultVocabSHA256 is the SHA-256 of the file at DefaultVocabURL.
const DefaultVocabSHA256 = "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a"

// Tokenizer turns text into the token ids a text transformer consumes.
// BPETokenizer and ByteTokenizer implement it.
type Tokenizer interface {
	// Encode returns the ids of text without start and end tokens.
	Encode(text string) []int
	// Tokenize returns exactly contextLength ids: the start token, the ids
	// of text, the end token, then padding. Text that does not fit is an
	// error unless truncate is set; then the last kept id is the end token.
	Tokenize(text string, contextLength int, truncate bool) ([]int, error)
	// Decode returns the text of ids.
	Decode(ids []int) (string, error)
	// SOT, EOT and Pad return the start, end and padding ids.
	SOT() int
	EOT() int
	Pad() int
	// VocabSize returns the number of ids; every id is in [0, VocabSize()).
	VocabSize() int
}

// BPETokenizer is OpenAI CLIP's byte-level BPE tokenizer, the Go twin of
// SimpleTokenizer in openai/CLIP and of clip.tokenize. It is safe for
// concurrent use.
//
// Text is cleaned as SimpleTokenizer does, except that ftfy.fix_text is not
// run (there is no Go port): HTML entities are unescaped twice, surrounding
// white space is stripped, inner runs of white space become one space, and the
// text is lower-cased with Python's rules. Invalid UTF-8 bytes count as
// U+FFFD each.
type BPETokenizer struct {
	source string // where the vocabulary came from, for messages

	tokens     []string   // id → token; "" for an id the vocabulary skips
	tokenBytes [][]byte   // id → the text bytes of the token, "</w>" kept
	byteID     [256]int32 // byte → id of its one-byte token
	byteEndID  [256]int32 // byte → id of its one-byte token + "</w>"
	merges     map[uint64]bpeMerge
	sot, eot   int

	cache wordCache
}

// bpeMerge is what joining a pair of adjacent tokens gives: its priority
// (lower merges first) and the id of the joined token.
type bpeMerge struct {
	rank int32
	id   int32
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// SOT returns the id of <|startoftext|> (49406 for CLIP).
func (t *BPETokenizer) SOT() int { return t.sot }

// EOT returns the id of <|endoftext|> (49407 for CLIP).
func (t *BPETokenizer) EOT() int { return t.eot }

// Pad returns the padding id, 0 as in clip.tokenize.
func (t *BPETokenizer) Pad() int { return 0 }

// VocabSize returns the number of ids (49408 for CLIP).
func (t *BPETokenizer) VocabSize() int { return len(t.tokens) }

// Token returns the vocabulary entry of id, such as "photo</w>", and whether
// id is in the vocabulary.
func (t *BPETokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || t.tokenBytes[id] == nil {
		return "", false
	}
	return t.tokens[id], true
}

// String describes the tokenizer by its source and size.
func (t *BPETokenizer) String() string {
	return fmt.Sprintf("BPETokenizer(%s, %d tokens)", t.source, len(t.tokens))
}

// Encode returns the BPE ids of text, without start and end tokens, as
// SimpleTokenizer.encode does. A literal "<|startoftext|>" or
// "<|endoftext|>" in the text becomes the start or end id.
func (t *BPETokenizer) Encode(text string) []int {
	return t.appendEncode(nil, text)
}

func (t *BPETokenizer) appendEncode(dst []int, text string) []int {
	var stack [256]byte
	s := cleanText(stack[:0], text)
	for i := 0; ; {
		start, end := nextWord(s, i)
		if start == end {
			return dst
		}
		dst = t.appendWord(dst, s[start:end])
		i = end
	}
}

// appendWord appends the ids of one word of the split text.
func (t *BPETokenizer) appendWord(dst []int, word []byte) []int {
	switch string(word) {
	case sotText:
		return append(dst, t.sot)
	case eotText:
		return append(dst, t.eot)
	}
	ids, ok := t.cache.get(word)
	if !ok {
		ids = t.bpe(word)
		t.cache.put(word, ids)
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

// Tokenize returns the ids clip.tokenize gives for one text: the start id,
// the ids of Encode, the end id, then zeros up to contextLength. When that is
// longer than contextLength, Tokenize fails unless truncate is set; then it
// keeps the first contextLength ids and makes the last one the end id.
func (t *BPETokenizer) Tokenize(text string, contextLength int, truncate bool) ([]int, error) {
	return tokenize(t, text, contextLength, truncate)
}

// TokenizeBatch tokenizes each text as Tokenize does.
func (t *BPETokenizer) TokenizeBatch(texts []string, contextLength int, truncate bool) ([][]int, error) {
	return tokenizeBatch(t, texts, contextLength, truncate)
}

// Decode returns the text of ids as SimpleTokenizer.decode does: every
// end-of-word marker becomes a space, so the text of Encode(s) is the words of
// the cleaned s, each followed by a space. Byte sequences that are not UTF-8
// become U+FFFD as in Python's errors="replace". An id outside the vocabulary
// is an error.
func (t *BPETokenizer) Decode(ids []int) (string, error) {
	var b []byte
	for i, id := range ids {
		if id < 0 || id >= len(t.tokens) || t.tokenBytes[id] == nil {
			return "", fmt.Errorf("textenc: decode: id %d at position %d is not in the vocabulary of %d tokens", id, i, len(t.tokens))
		}
		b = append(b, t.tokenBytes[id]...)
	}
	b = bytes.ReplaceAll(b, []byte(endOfWord), []byte(" "))
	return decodeUTF8Replace(b), nil
}

// encoder is what tokenize needs of a tokenizer.
type encoder interface {
	appendEncode(dst []int, text string) []int
	SOT() int
	EOT() int
	Pad() int
}

// tokenize implements Tokenize for both tokenizers.
func tokenize(t encoder, text string, contextLength int, truncate bool) ([]int, error) {
	if contextLength < 2 {
		return nil, fmt.Errorf("textenc: context length %d cannot hold the start and end tokens", contextLength)
	}
	ids := make([]int, 1, contextLength)
	ids[0] = t.SOT()
	ids = t.appendEncode(ids, text)
	ids = append(ids, t.EOT())
	if len(ids) > contextLength {
		if !truncate {
			return nil, fmt.Errorf("textenc: text %s is too long for context length %d: %d tokens with start and end",
				quoteShort(text), contextLength, len(ids))
		}
		ids = ids[:contextLength]
		ids[contextLength-1] = t.EOT()
	}
	for len(ids) < contextLength {
		ids = append(ids, t.Pad())
	}
	return ids, nil
}

func tokenizeBatch(t encoder, texts []string, contextLength int, truncate bool) ([][]int, error) {
	out := make([][]int, len(texts))
	for i, s := range texts {
		ids, err := tokenize(t, s, contextLength, truncate)
		if err != nil {
			return nil, fmt.Errorf("textenc: batch text %d: %w", i, err)
		}
		out[i] = ids
	}
	return out, nil
}

// quoteShort quotes s for an error message, shortened to about 60 bytes.
func quoteShort(s string) string {
	const max = 60
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}

// wordCache remembers the ids of words already split by BPE. It holds at
// most wordCacheSize words and starts afresh when full, so that a stream of
// distinct words cannot grow it without bound.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const wordCacheSize = 1 << 16

func (c *wordCache) get(word []byte) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[string(word)]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(word []byte, ids []int32) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= wordCacheSize {
		c.m = make(map[string][]int32)
	}
	c.m[string(word)] = ids
	c.mu.Unlock()
}
