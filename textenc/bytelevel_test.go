package textenc

import (
	"slices"
	"strings"
	"testing"
)

var (
	_ Tokenizer = ByteTokenizer{}
	_ Tokenizer = (*BPETokenizer)(nil)
)

func TestByteTokenizer(t *testing.T) {
	var tok ByteTokenizer
	tests := []struct {
		text     string
		ctx      int
		truncate bool
		want     []int // nil: an error
	}{
		{"hi", 6, false, []int{ByteSOT, 'h', 'i', ByteEOT, BytePad, BytePad}},
		{"hi", 4, false, []int{ByteSOT, 'h', 'i', ByteEOT}},
		{"hello", 4, true, []int{ByteSOT, 'h', 'e', ByteEOT}},
		{"hello", 4, false, nil},
		{"é", 5, false, []int{ByteSOT, 0xc3, 0xa9, ByteEOT, BytePad}}, // UTF-8 bytes
		{"", 2, false, []int{ByteSOT, ByteEOT}},
		{"\x00\xff", 4, false, []int{ByteSOT, 0, 255, ByteEOT}},
		{"a", 1, true, nil},
	}
	for _, tc := range tests {
		got, err := tok.Tokenize(tc.text, tc.ctx, tc.truncate)
		if tc.want == nil {
			if err == nil {
				t.Errorf("Tokenize(%q, %d, %v) = %v, want an error", tc.text, tc.ctx, tc.truncate, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Tokenize(%q, %d, %v) = %v, %v; want %v", tc.text, tc.ctx, tc.truncate, got, err, tc.want)
		}
	}
	if _, err := tok.Tokenize("hello", 4, false); err == nil || !strings.Contains(err.Error(), "7 tokens") {
		t.Errorf("too long: error %v, want one giving the length", err)
	}
	for _, ids := range [][]int{{-1}, {ByteVocabSize}} {
		if _, err := tok.Decode(ids); err == nil {
			t.Errorf("Decode(%v): no error", ids)
		}
	}
}

// TestByteRoundTrip checks that Decode inverts Tokenize and that the end
// token is the largest id of every row, where CLIP's pooling looks for it.
func TestByteRoundTrip(t *testing.T) {
	var tok ByteTokenizer
	texts := []string{"", "a photo of a cat.", "naïve café 🐶", "\x00\xfe bad utf-8"}
	for _, r := range loadGolden(t) {
		texts = append(texts, r.Text)
	}
	ctx := 0 // one byte per id: a context that fits the longest text
	for _, s := range texts {
		ctx = max(ctx, len(s)+2)
	}
	rows, err := tok.TokenizeBatch(texts, ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range rows {
		got, err := tok.Decode(row)
		if err != nil || got != texts[i] {
			t.Errorf("Decode(Tokenize(%q)) = %q, %v", texts[i], got, err)
		}
		if at := slices.Index(row, ByteEOT); at != len(texts[i])+1 || slices.Max(row) != ByteEOT {
			t.Errorf("%q: EOT at %d, max id %d", texts[i], at, slices.Max(row))
		}
		if got := tok.Encode(texts[i]); !slices.Equal(got, row[1:1+len(texts[i])]) {
			t.Errorf("Encode(%q) = %v, not the middle of its Tokenize row", texts[i], got)
		}
	}
	if _, err := tok.TokenizeBatch([]string{"ok", strings.Repeat("x", 10)}, 8, false); err == nil || !strings.Contains(err.Error(), "batch text 1") {
		t.Errorf("TokenizeBatch error = %v, want one naming text 1", err)
	}
}
