package textenc

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// goldenRow is one row of fixtures/tokenizer_golden.json: SimpleTokenizer's
// encode(text) and clip.tokenize(text, truncate=True)[0].
type goldenRow struct {
	Text       string `json:"text"`
	IDs        []int  `json:"ids"`
	Tokenize77 []int  `json:"tokenize77"`
}

func loadGolden(tb testing.TB) []goldenRow {
	tb.Helper()
	data, err := os.ReadFile(fixture.Path(tb, "fixtures/tokenizer_golden.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var rows []goldenRow
	if err := json.Unmarshal(data, &rows); err != nil {
		tb.Fatalf("tokenizer_golden.json: %v", err)
	}
	if len(rows) == 0 {
		tb.Fatal("tokenizer_golden.json: no rows")
	}
	return rows
}

// vocabSources are the ways to load CLIP's vocabulary from the shared assets.
var vocabSources = []struct {
	name string
	load func(tb testing.TB) (*BPETokenizer, error)
}{
	{"openai-gz", func(tb testing.TB) (*BPETokenizer, error) {
		return LoadOpenAIVocab(fixture.Path(tb, "assets/clip/"+OpenAIVocabFile))
	}},
	{"hf-vocab-merges", func(tb testing.TB) (*BPETokenizer, error) {
		return LoadHFVocab(fixture.Path(tb, "assets/clip/"+HFVocabFile), fixture.Path(tb, "assets/clip/"+HFMergesFile))
	}},
	{"hf-tokenizer-json", func(tb testing.TB) (*BPETokenizer, error) {
		return LoadHFTokenizerJSON(fixture.Path(tb, "assets/clip/"+HFTokenizerFile))
	}},
	{"dir", func(tb testing.TB) (*BPETokenizer, error) {
		return LoadBPETokenizer(filepath.Dir(fixture.Path(tb, "assets/clip/"+OpenAIVocabFile)))
	}},
}

var (
	clipOnce sync.Once
	clipTok  *BPETokenizer
	clipErr  error
)

// clipTokenizer returns the tokenizer of OpenAI's vocabulary file, loaded once.
func clipTokenizer(tb testing.TB) *BPETokenizer {
	tb.Helper()
	path := fixture.Path(tb, "assets/clip/"+OpenAIVocabFile)
	clipOnce.Do(func() { clipTok, clipErr = LoadOpenAIVocab(path) })
	if clipErr != nil {
		tb.Fatal(clipErr)
	}
	return clipTok
}

func TestGolden(t *testing.T) {
	rows := loadGolden(t)
	for _, src := range vocabSources {
		t.Run(src.name, func(t *testing.T) {
			tok, err := src.load(t)
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for i, r := range rows {
				got := tok.Encode(r.Text)
				if !slices.Equal(got, r.IDs) {
					bad++
					t.Errorf("row %d %q: Encode = %v, want %v", i, r.Text, got, r.IDs)
				}
				// The context length is the fixture's row length (77 for CLIP).
				got77, err := tok.Tokenize(r.Text, len(r.Tokenize77), true)
				if err != nil {
					t.Errorf("row %d %q: Tokenize: %v", i, r.Text, err)
				} else if !slices.Equal(got77, r.Tokenize77) {
					bad++
					t.Errorf("row %d %q: Tokenize = %v, want %v", i, r.Text, got77, r.Tokenize77)
				}
			}
			t.Logf("%s: %d rows, %d mismatches (exact match required)", tok, len(rows), bad)
		})
	}
}

// TestSpecialIDs checks SOT, EOT and the vocabulary size against the golden
// rows: every row is SOT, ids, EOT, padding.
func TestSpecialIDs(t *testing.T) {
	rows := loadGolden(t)
	tok := clipTokenizer(t)
	// A row with padding after its end token (not cut to the context).
	i := slices.IndexFunc(rows, func(r goldenRow) bool { return len(r.IDs)+2 < len(r.Tokenize77) })
	if i < 0 {
		t.Skip("no golden row is shorter than its context: no end token and padding to read")
	}
	r := rows[i]
	if got, want := tok.SOT(), r.Tokenize77[0]; got != want {
		t.Errorf("SOT = %d, want %d", got, want)
	}
	if got, want := tok.EOT(), r.Tokenize77[len(r.IDs)+1]; got != want {
		t.Errorf("EOT = %d, want %d", got, want)
	}
	if got, want := tok.Pad(), r.Tokenize77[len(r.Tokenize77)-1]; got != want {
		t.Errorf("Pad = %d, want %d", got, want)
	}
	// CLIP's end token is its last id.
	if got, want := tok.VocabSize(), tok.EOT()+1; got != want {
		t.Errorf("VocabSize = %d, want %d", got, want)
	}
	if s, ok := tok.Token(tok.SOT()); !ok || s != sotText {
		t.Errorf("Token(SOT) = %q, %v", s, ok)
	}
}

// TestVocabSourcesAgree checks that the three vocabulary files describe the
// same tokens and merges.
func TestVocabSourcesAgree(t *testing.T) {
	ref := clipTokenizer(t)
	for _, src := range vocabSources[1:] {
		tok, err := src.load(t)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tok.tokens, ref.tokens) {
			t.Errorf("%s: tokens differ from %s", src.name, ref)
		}
		if len(tok.merges) != len(ref.merges) {
			t.Errorf("%s: %d merges, %s has %d", src.name, len(tok.merges), ref, len(ref.merges))
		}
		for k, m := range ref.merges {
			if tok.merges[k] != m {
				t.Errorf("%s: merge %d differs", src.name, m.rank)
				break
			}
		}
		if tok.SOT() != ref.SOT() || tok.EOT() != ref.EOT() {
			t.Errorf("%s: SOT, EOT = %d, %d; %s has %d, %d", src.name, tok.SOT(), tok.EOT(), ref, ref.SOT(), ref.EOT())
		}
	}
}

func TestDecode(t *testing.T) {
	tok := clipTokenizer(t)
	// Expected texts are those of SimpleTokenizer.decode (Python 3.11).
	tests := []struct {
		ids  []int
		want string
	}{
		{[]int{3306, 1002, 256}, "hello world ! "},
		{[]int{3306, 49407, 1002}, "hello <|endoftext|>world "},
		{[]int{49406, 320, 49407, 0}, "<|startoftext|>a <|endoftext|>!"},
		{[]int{47466, 254}, "你"},
		{[]int{163}, "\uFFFD"},        // a lone lead byte
		{[]int{163, 320}, "\uFFFDa "}, // one U+FFFD per maximal invalid subsequence
		{nil, ""},
	}
	for _, tc := range tests {
		got, err := tok.Decode(tc.ids)
		if err != nil || got != tc.want {
			t.Errorf("Decode(%v) = %q, %v; want %q", tc.ids, got, err, tc.want)
		}
	}
	for _, ids := range [][]int{{-1}, {320, tok.VocabSize()}} {
		if _, err := tok.Decode(ids); err == nil || !strings.Contains(err.Error(), "not in the vocabulary") {
			t.Errorf("Decode(%v) error = %v, want one naming the id", ids, err)
		}
	}
}

// TestDecodeRoundTrip checks on the golden rows that decoding gives the
// words of the cleaned text, each followed by a space (the end-of-word
// marker), and that encoding the decoded text gives the ids back.
func TestDecodeRoundTrip(t *testing.T) {
	tok := clipTokenizer(t)
	for i, r := range loadGolden(t) {
		text, err := tok.Decode(r.IDs)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if want := spacedWords(r.Text); text != want {
			t.Errorf("row %d: Decode = %q, want %q", i, text, want)
		}
		if got := tok.Encode(text); !slices.Equal(got, r.IDs) {
			t.Errorf("row %d %q: Encode(Decode(ids)) = %v, want %v", i, r.Text, got, r.IDs)
		}
	}
}

// spacedWords returns the words of the cleaned s, each followed by a space
// but for the special tokens, whose vocabulary entries lack "</w>".
func spacedWords(s string) string {
	var b strings.Builder
	c := cleanText(nil, s)
	for i := 0; ; {
		start, end := nextWord(c, i)
		if start == end {
			return b.String()
		}
		w := string(c[start:end])
		b.WriteString(w)
		if w != sotText && w != eotText {
			b.WriteByte(' ')
		}
		i = end
	}
}

func TestTokenizeLength(t *testing.T) {
	tok := clipTokenizer(t)
	rows := loadGolden(t)
	var long, short goldenRow
	for _, r := range rows {
		if len(r.IDs)+2 > len(r.Tokenize77) {
			long = r
		}
		// short fits its context and has ids to cut.
		if len(r.IDs) >= 3 && len(r.IDs)+2 <= len(r.Tokenize77) && short.Text == "" {
			short = r
		}
	}
	if short.Text == "" {
		t.Skip("golden file has no row of 3 or more ids that fits its context")
	}

	// A short text in a short context: cut so that the last id is EOT.
	n := len(short.IDs) // context of SOT + n-1 ids + EOT
	got, err := tok.Tokenize(short.Text, n+1, true)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]int{tok.SOT()}, short.IDs[:n-1]...), tok.EOT())
	if !slices.Equal(got, want) {
		t.Errorf("truncated Tokenize = %v, want %v", got, want)
	}
	// Exactly fitting needs no truncation.
	got, err = tok.Tokenize(short.Text, n+2, false)
	if err != nil || len(got) != n+2 || got[n+1] != tok.EOT() {
		t.Errorf("Tokenize(fitting) = %v, %v", got, err)
	}
	for _, bad := range []int{-1, 0, 1} {
		if _, err := tok.Tokenize("a", bad, true); err == nil {
			t.Errorf("Tokenize with context length %d: no error", bad)
		}
	}

	// A golden row longer than its context: refused without truncation,
	// truncated as clip.tokenize(truncate=True) does.
	if long.Text == "" {
		t.Skip("golden file has no row longer than its context length: truncation of a golden row not checked")
	}
	ctx := len(long.Tokenize77)
	_, err = tok.Tokenize(long.Text, ctx, false)
	if err == nil {
		t.Fatalf("Tokenize(%d tokens, %d, false): no error", len(long.IDs)+2, ctx)
	}
	for _, want := range []string{"too", fmt.Sprintf("context length %d", ctx), fmt.Sprintf("%d tokens", len(long.IDs)+2)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := tok.TokenizeBatch([]string{short.Text, long.Text}, ctx, false); err == nil || !strings.Contains(err.Error(), "batch text 1") {
		t.Errorf("TokenizeBatch error = %v, want one naming text 1", err)
	}
	batch, err := tok.TokenizeBatch([]string{short.Text, long.Text}, ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(batch[0], short.Tokenize77) || !slices.Equal(batch[1], long.Tokenize77) {
		t.Errorf("TokenizeBatch rows differ from the golden rows")
	}
}

// TestCleanText checks the clean-up against Python 3.11:
// regex.sub(r'\s+', ' ', html.unescape(html.unescape(s)).strip()).strip().lower().
func TestCleanText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"İstanbul", "i\u0307stanbul"}, // Python lower: two code points
		{"ΟΔΟΣ ΣΑΣ", "οδος σας"},       // final sigma
		{"ΑΣ.Β", "ασ.β"},               // "." is case-ignorable, Β is cased
		{"Σ", "σ"},                     // no cased letter before it
		{"ΑΣ'", "ας'"},
		{"\x1c a \x1c", "a"}, // str.strip counts U+001C as space...
		{"a\x1cb", "a\x1cb"}, // ...but \s does not
		{"a\u00a0\u3000 b", "a b"},
		{"a\t\n\v\f\r b", "a b"},
		{"\u2028x\u0085", "x"},
		{"&amp;amp;", "&"},
		{"x&#1;y", "xy"},
		{"x&#9", "x"}, // a tab at the very end, then stripped
		{"&#x80;&#128;&#x81;", "\u20ac\u20ac\u0081"},
		{"&ampx &notin &notit; &amp-x", "&x \u00acin \u00acit; &-x"},
		{"&#99999999999999999999;", "\ufffd"},
		{"&#xD800;", "\ufffd"},
		{"&nGt;&nLt;", "\u226b\u20d2\u226a\u20d2"}, // missing from Go's entity table
		{"Hello  World!", "hello world!"},
		{"", ""},
		{" \t ", ""},
		{"bad\xffutf8", "bad\ufffdutf8"},
	}
	for _, tc := range tests {
		if got := string(cleanText(nil, tc.in)); got != tc.want {
			t.Errorf("cleanText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSplit checks the pattern against Python's regex.findall with
// IGNORECASE on the cleaned text.
func TestSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"it'ſ", []string{"it", "'ſ"}}, // "'s" matches "'ſ" by case folding
		{"<|ſtartoftext|>", []string{"<|ſtartoftext|>"}},
		{"!<|endoftext|>", []string{"!<|", "endoftext", "|>"}},
		{"a\u0345b", []string{"a", "b"}},
		{"''s'sa", []string{"''", "s", "'s", "a"}},
		{"x'S", []string{"x", "'s"}},
		{"c++ 3.14", []string{"c", "++", "3", ".", "1", "4"}},
		{"naïve", []string{"naïve"}},
		{"İ", []string{"i", "\u0307"}},
		{"<|endoftext|>|>", []string{"<|endoftext|>", "|>"}},
		{"'ll've", []string{"'ll", "'ve"}},
		{"hello\u0085world", []string{"hello", "world"}},
	}
	for _, tc := range tests {
		var got []string
		c := cleanText(nil, tc.in)
		for i := 0; ; {
			start, end := nextWord(c, i)
			if start == end {
				break
			}
			got = append(got, string(c[start:end]))
			i = end
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("split(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNewBPETokenizer(t *testing.T) {
	tok, err := NewBPETokenizer([]Merge{{"p", "h"}, {"o", "t"}, {"ph", "ot"}, {"phot", "o</w>"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.VocabSize(), 512+4+2; got != want {
		t.Errorf("VocabSize = %d, want %d", got, want)
	}
	// "photo" merges fully into "photo</w>" (512+3); "photos" stops at
	// phot, o, s</w>. A printable byte b has id b-'!', and b-'!'+256 with "</w>".
	o, sEnd := int('o'-'!'), int('s'-'!'+256)
	if got, want := tok.Encode("Photo photos"), []int{515, 514, o, sEnd}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if _, err := NewBPETokenizer([]Merge{{"p", "q r"}}); err == nil || !strings.Contains(err.Error(), "byte alphabet") {
		t.Errorf("merge with a space: error %v, want one about the byte alphabet", err)
	}
	if _, err := NewBPETokenizer([]Merge{{"zz", "h"}}); err == nil || !strings.Contains(err.Error(), `"zz"`) {
		t.Errorf("merge of unknown token: error %v, want one naming it", err)
	}
}

// TestBadVocabFiles checks that broken vocabulary files give errors naming
// the file and the problem.
func TestBadVocabFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	writeGz := func(name, content string) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		zw := gzip.NewWriter(f)
		zw.Write([]byte(content))
		zw.Close()
		f.Close()
		return p
	}
	// A small but valid vocabulary, for the Hugging Face cases.
	small, err := NewBPETokenizer([]Merge{{"h", "i</w>"}})
	if err != nil {
		t.Fatal(err)
	}
	vocab := map[string]int{}
	for id, s := range small.tokens {
		vocab[s] = id
	}
	vocabJSON, _ := json.Marshal(vocab)
	missingByte := map[string]int{}
	for s, id := range vocab {
		if s != "a</w>" {
			missingByte[s] = id
		}
	}
	missingJSON, _ := json.Marshal(missingByte)

	good := filepath.Join(dir, "good")
	os.Mkdir(good, 0o755)
	goodVocab := filepath.Join(good, HFVocabFile)
	os.WriteFile(goodVocab, vocabJSON, 0o644)
	os.WriteFile(filepath.Join(good, HFMergesFile), []byte("#version: 0.2\r\nh i</w>\r\n"), 0o644)
	if tok, err := LoadBPETokenizer(goodVocab); err != nil {
		t.Errorf("small HF vocabulary: %v", err)
	} else if got := tok.Encode("hi"); !slices.Equal(got, []int{512}) {
		t.Errorf("small HF vocabulary: Encode(hi) = %v, want [512]", got)
	}

	tests := []struct {
		name string
		load func() (*BPETokenizer, error)
		want []string // substrings of the error
	}{
		{"missing", func() (*BPETokenizer, error) { return LoadBPETokenizer(filepath.Join(dir, "nope.gz")) }, []string{"nope.gz"}},
		{"not gzip", func() (*BPETokenizer, error) { return LoadOpenAIVocab(write("plain.gz", "i n\n")) }, []string{"plain.gz", "gzip"}},
		{"short gz", func() (*BPETokenizer, error) { return LoadOpenAIVocab(writeGz("short.gz", "#version\ni n\nt h\n")) }, []string{"short.gz", "2 merges, want 48894"}},
		{"bad gz line", func() (*BPETokenizer, error) { return LoadOpenAIVocab(writeGz("bad.gz", "#version\ni n\nt h e\n")) }, []string{"bad.gz", "line 3", "not two tokens"}},
		{"vocab not json", func() (*BPETokenizer, error) {
			return LoadHFVocab(write("v1.json", "{"), write("m1.txt", ""))
		}, []string{"v1.json"}},
		{"vocab without byte token", func() (*BPETokenizer, error) {
			return LoadHFVocab(write("v2.json", string(missingJSON)), write("m2.txt", "#version: 0.2\n"))
		}, []string{"v2.json", `"a</w>" is missing`}},
		{"merge of unknown token", func() (*BPETokenizer, error) {
			return LoadHFVocab(write("v3.json", string(vocabJSON)), write("m3.txt", "#version: 0.2\nh i</w>\nq zz\n"))
		}, []string{"v3.json", `"zz" is missing`, "merge 1"}},
		{"merges file missing", func() (*BPETokenizer, error) {
			return LoadHFVocab(write("v4.json", string(vocabJSON)), filepath.Join(dir, "absent.txt"))
		}, []string{"absent.txt"}},
		{"tokenizer.json not BPE", func() (*BPETokenizer, error) {
			return LoadHFTokenizerJSON(write("t1.json", `{"model":{"type":"WordPiece","vocab":{}}}`))
		}, []string{"t1.json", "WordPiece"}},
		{"tokenizer.json without </w>", func() (*BPETokenizer, error) {
			return LoadHFTokenizerJSON(write("t2.json", `{"model":{"type":"BPE","vocab":{},"merges":[]}}`))
		}, []string{"t2.json", "not a CLIP tokenizer"}},
		{"tokenizer.json bad merges", func() (*BPETokenizer, error) {
			return LoadHFTokenizerJSON(write("t3.json", `{"model":{"type":"BPE","vocab":{},"merges":[1,2],"end_of_word_suffix":"</w>"}}`))
		}, []string{"t3.json", "model.merges"}},
		{"tokenizer.json no model", func() (*BPETokenizer, error) { return LoadHFTokenizerJSON(write("t4.json", `{}`)) }, []string{"t4.json", "model"}},
		{"unknown kind", func() (*BPETokenizer, error) { return LoadBPETokenizer(write("vocab.bin", "")) }, []string{"vocab.bin", "not a vocabulary file"}},
		{"empty dir", func() (*BPETokenizer, error) {
			d := filepath.Join(dir, "empty")
			os.Mkdir(d, 0o755)
			return LoadBPETokenizer(d)
		}, []string{"empty", "no " + OpenAIVocabFile}},
	}
	for _, tc := range tests {
		tok, err := tc.load()
		if err == nil {
			t.Errorf("%s: no error (got %v)", tc.name, tok)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
			}
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := clipTokenizer(t)
	rows := loadGolden(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(rows); i += 2 {
				if got := tok.Encode(rows[i].Text); !slices.Equal(got, rows[i].IDs) {
					t.Errorf("row %d: concurrent Encode = %v", i, got)
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkEncodeOurs(b *testing.B) {
	tok := clipTokenizer(b)
	rows := loadGolden(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.Encode(rows[i%len(rows)].Text)
	}
}

// BenchmarkEncodeOursNoCache is BenchmarkEncodeOurs with the word cache
// emptied before every encode, so that every word goes through BPE.
func BenchmarkEncodeOursNoCache(b *testing.B) {
	tok := clipTokenizer(b)
	rows := loadGolden(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tok.cache.m = nil
		b.StartTimer()
		tok.Encode(rows[i%len(rows)].Text)
	}
}

// BenchmarkEncodePrompt times one short prompt, the common case.
func BenchmarkEncodePrompt(b *testing.B) {
	tok := clipTokenizer(b)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tok.Encode("a photo of a cat.")
	}
}
