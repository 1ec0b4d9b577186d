package textenc

// This file measures github.com/sugarme/tokenizer v0.3.0, the Go port of
// Hugging Face tokenizers, on CLIP's tokenizer.json against OpenAI's ids. It
// reports how many golden rows sugarme gets right and how fast it is; it
// fails only if sugarme cannot load the file at all.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	sugarme "github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/pretrained"

	"github.com/subtta/subtta/internal/fixture"
)

func loadSugarme(tb testing.TB) *sugarme.Tokenizer {
	tb.Helper()
	path := fixture.Path(tb, "assets/clip/"+HFTokenizerFile)
	tk, err := func() (tk *sugarme.Tokenizer, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return pretrained.FromFile(path)
	}()
	if err != nil {
		tb.Fatalf("sugarme cannot load %s: %v", path, err)
	}
	return tk
}

// The ways of asking sugarme for ids.
const (
	sugarmePlain    = iota // EncodeSingle(s, false): the public API, no special tokens
	sugarmeSpecial         // EncodeSingle(s, true): with SOT and EOT
	sugarmeSequence        // EncodeSingleSequence: skips the post-processor
)

// sugarmeEncode encodes s with sugarme, turning its panics and nil results
// into errors.
func sugarmeEncode(tk *sugarme.Tokenizer, s string, mode int) (ids []int, err error) {
	defer func() {
		if p := recover(); p != nil {
			ids, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	var en *sugarme.Encoding
	switch mode {
	case sugarmePlain:
		en, err = tk.EncodeSingle(s, false)
	case sugarmeSpecial:
		en, err = tk.EncodeSingle(s, true)
	default:
		en, err = tk.EncodeSingleSequence(sugarme.NewInputSequence(s), 0, sugarme.Byte)
	}
	if err != nil {
		return nil, err
	}
	if en == nil {
		return nil, errors.New("nil encoding and nil error")
	}
	return en.Ids, nil
}

func TestSugarmeAgainstGolden(t *testing.T) {
	rows := loadGolden(t)
	tk := loadSugarme(t)
	ours := clipTokenizer(t)
	for _, m := range []struct {
		mode int
		name string
	}{
		{sugarmePlain, "EncodeSingle(s, false)"},
		{sugarmeSpecial, "EncodeSingle(s, true)"},
		{sugarmeSequence, "EncodeSingleSequence (no post-processor)"},
	} {
		var match, failed int
		var examples, matched []string
		start := time.Now()
		for _, r := range rows {
			want := r.IDs
			if m.mode == sugarmeSpecial {
				want = append(append([]int{ours.SOT()}, r.IDs...), ours.EOT())
			}
			ids, err := sugarmeEncode(tk, r.Text, m.mode)
			switch {
			case err != nil:
				failed++
				if len(examples) < 1 {
					examples = append(examples, fmt.Sprintf("%q: %v", r.Text, err))
				}
			case slices.Equal(ids, want):
				match++
				matched = append(matched, fmt.Sprintf("%q", r.Text))
			default:
				if len(examples) < 3 {
					examples = append(examples, fmt.Sprintf("%q: sugarme %v, OpenAI %v", r.Text, ids, want))
				}
			}
		}
		perEncode := time.Since(start) / time.Duration(len(rows))
		t.Logf("sugarme v0.3.0 %s: %d of %d golden rows match OpenAI's ids, %d errors or panics, %v per encode",
			m.name, match, len(rows), failed, perEncode)
		if match > 0 && match <= 5 {
			t.Logf("    matching: %s", strings.Join(matched, ", "))
		}
		for _, e := range examples {
			t.Log("    e.g. " + e)
		}
	}
}

// BenchmarkEncodeSugarme times sugarme on the golden texts, in the one mode
// that returns ids (see TestSugarmeAgainstGolden); compare with
// BenchmarkEncodeOurs.
func BenchmarkEncodeSugarme(b *testing.B) {
	tk := loadSugarme(b)
	rows := loadGolden(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sugarmeEncode(tk, rows[i%len(rows)].Text, sugarmeSequence)
	}
}
