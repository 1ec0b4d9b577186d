package textenc

import (
	"fmt"
	"math"
)

const (
	sotText   = "<|startoftext|>"
	eotText   = "<|endoftext|>"
	endOfWord = "</w>" // suffix of a token that ends a word
)

// byteRunes maps each byte to the printable character that stands for it in
// the vocabulary, and byteOrder lists the bytes in vocabulary order: this is
// bytes_to_unicode of GPT-2 and CLIP. Printable Latin-1 bytes stand for
// themselves; the other 68 bytes, in increasing order, take U+0100 onwards.
var byteRunes, byteOrder = makeByteRunes()

func makeByteRunes() (runes [256]rune, order [256]byte) {
	printable := func(b int) bool {
		return '!' <= b && b <= '~' || '¡' <= b && b <= '¬' || '®' <= b && b <= 'ÿ'
	}
	n, extra := 0, 0
	for b := 0; b < 256; b++ {
		if printable(b) {
			runes[b] = rune(b)
			order[n] = byte(b)
			n++
		}
	}
	for b := 0; b < 256; b++ {
		if !printable(b) {
			runes[b] = rune(256 + extra)
			extra++
			order[n] = byte(b)
			n++
		}
	}
	return runes, order
}

// Merge is a BPE merge rule: where the tokens Left and Right stand side by
// side in a word, they become the one token Left+Right. Tokens are written in
// the vocabulary's alphabet, where each byte is one printable character (a
// space is "Ġ"), and a token that ends a word carries the suffix "</w>".
type Merge struct {
	Left, Right string
}

// NewBPETokenizer returns a tokenizer whose vocabulary is built from merges as
// OpenAI's SimpleTokenizer builds it: the 256 byte tokens, the same with
// "</w>", the result of each merge in order, then <|startoftext|> and
// <|endoftext|>. The merges are ranked in the order given. CLIP's vocabulary
// has 48894 merges and so 49408 tokens.
func NewBPETokenizer(merges []Merge) (*BPETokenizer, error) {
	return newOpenAIVocab("merge list", merges)
}

func newOpenAIVocab(source string, merges []Merge) (*BPETokenizer, error) {
	tokens := make([]string, 0, 512+len(merges)+2)
	for _, b := range byteOrder {
		tokens = append(tokens, string(byteRunes[b]))
	}
	for _, b := range byteOrder {
		tokens = append(tokens, string(byteRunes[b])+endOfWord)
	}
	for _, m := range merges {
		tokens = append(tokens, m.Left+m.Right)
	}
	tokens = append(tokens, sotText, eotText)
	vocab := make(map[string]int, len(tokens))
	for id, tok := range tokens {
		vocab[tok] = id // a later duplicate wins, as in Python's dict(zip(vocab, ids))
	}
	return newBPETokenizer(source, vocab, merges)
}

// newBPETokenizer builds a tokenizer from a vocabulary (token → id) and ranked
// merges, checking that they fit together. source names them in errors.
func newBPETokenizer(source string, vocab map[string]int, merges []Merge) (*BPETokenizer, error) {
	t := &BPETokenizer{source: source}
	size := 0
	for tok, id := range vocab {
		if id < 0 || id > math.MaxInt32-1 {
			return nil, fmt.Errorf("textenc: %s: token %q has id %d out of range", source, tok, id)
		}
		size = max(size, id+1)
	}
	t.tokens = make([]string, size)
	t.tokenBytes = make([][]byte, size)
	for tok, id := range vocab {
		if t.tokenBytes[id] != nil {
			a, b := t.tokens[id], tok
			if a > b {
				a, b = b, a
			}
			return nil, fmt.Errorf("textenc: %s: tokens %q and %q share the id %d", source, a, b, id)
		}
		raw, err := tokenTextBytes(tok)
		if err != nil {
			return nil, fmt.Errorf("textenc: %s: %w", source, err)
		}
		t.tokens[id], t.tokenBytes[id] = tok, raw
	}

	lookup := func(tok string) (int32, error) {
		id, ok := vocab[tok]
		if !ok {
			return 0, fmt.Errorf("textenc: %s: token %q is missing from the vocabulary", source, tok)
		}
		return int32(id), nil
	}
	var err error
	if t.sot, err = lookupInt(lookup, sotText); err != nil {
		return nil, err
	}
	if t.eot, err = lookupInt(lookup, eotText); err != nil {
		return nil, err
	}
	for b := range 256 {
		if t.byteID[b], err = lookup(string(byteRunes[b])); err != nil {
			return nil, err
		}
		if t.byteEndID[b], err = lookup(string(byteRunes[b]) + endOfWord); err != nil {
			return nil, err
		}
	}

	t.merges = make(map[uint64]bpeMerge, len(merges))
	for rank, m := range merges {
		if m.Left == "" || m.Right == "" {
			return nil, fmt.Errorf("textenc: %s: merge %d (%q %q) has an empty side", source, rank, m.Left, m.Right)
		}
		left, err := lookup(m.Left)
		if err != nil {
			return nil, fmt.Errorf("%w (left side of merge %d)", err, rank)
		}
		right, err := lookup(m.Right)
		if err != nil {
			return nil, fmt.Errorf("%w (right side of merge %d)", err, rank)
		}
		joined, err := lookup(m.Left + m.Right)
		if err != nil {
			return nil, fmt.Errorf("%w (result of merge %d)", err, rank)
		}
		// A repeated pair takes its last rank, as in Python's dict(zip(merges, ranks)).
		t.merges[pairKey(left, right)] = bpeMerge{rank: int32(rank), id: joined}
	}
	return t, nil
}

func lookupInt(lookup func(string) (int32, error), tok string) (int, error) {
	id, err := lookup(tok)
	return int(id), err
}

// runeBytes inverts byteRunes: runeBytes[r] is the byte r stands for, or -1.
var runeBytes = func() (inv [256 + 68]int16) {
	for i := range inv {
		inv[i] = -1
	}
	for b, r := range byteRunes {
		inv[r] = int16(b)
	}
	return inv
}()

// byteOfRune returns the byte r stands for, or -1 if it stands for none.
func byteOfRune(r rune) int {
	if r < 0 || int(r) >= len(runeBytes) {
		return -1
	}
	return int(runeBytes[r])
}

// tokenTextBytes returns the text bytes a vocabulary token stands for. The
// "</w>" suffix is made of printable ASCII, which stands for itself, so it is
// kept as is; Decode turns it into a space afterwards, as OpenAI does.
func tokenTextBytes(tok string) ([]byte, error) {
	raw := make([]byte, 0, len(tok))
	for _, r := range tok {
		b := byteOfRune(r)
		if b < 0 {
			return nil, fmt.Errorf("token %q: character %q is not in the byte alphabet", tok, r)
		}
		raw = append(raw, byte(b))
	}
	return raw, nil
}

// bpe splits one word (the bytes of a regex match) into vocabulary ids. It
// follows SimpleTokenizer.bpe: start from single bytes, the last one marked
// "</w>"; repeatedly take the adjacent pair of lowest merge rank and join all
// its occurrences from left to right; stop when no pair can merge.
func (t *BPETokenizer) bpe(word []byte) []int32 {
	syms := make([]int32, len(word))
	for i, b := range word {
		syms[i] = t.byteID[b]
	}
	syms[len(syms)-1] = t.byteEndID[word[len(word)-1]]
	for len(syms) > 1 {
		best, at := bpeMerge{rank: math.MaxInt32}, -1
		for i := 0; i+1 < len(syms); i++ {
			if m, ok := t.merges[pairKey(syms[i], syms[i+1])]; ok && m.rank < best.rank {
				best, at = m, i
			}
		}
		if at < 0 {
			break
		}
		// at is the first occurrence of the pair: an earlier one would have
		// the same rank and have been found first.
		left, right := syms[at], syms[at+1]
		out := syms[:at]
		for i := at; i < len(syms); {
			if i+1 < len(syms) && syms[i] == left && syms[i+1] == right {
				out = append(out, best.id)
				i += 2
			} else {
				out = append(out, syms[i])
				i++
			}
		}
		syms = out
	}
	return syms[:len(syms):len(syms)]
}
