package textenc

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// File names of the vocabulary formats LoadBPETokenizer recognises.
const (
	OpenAIVocabFile = "bpe_simple_vocab_16e6.txt.gz" // OpenAI: merges only
	HFVocabFile     = "vocab.json"                   // Hugging Face: token → id
	HFMergesFile    = "merges.txt"                   // Hugging Face: merges
	HFTokenizerFile = "tokenizer.json"               // Hugging Face tokenizers
)

const (
	openAIMergeCount  = 49152 - 256 - 2 // SimpleTokenizer keeps lines [1, 48895)
	maxVocabFileBytes = 1 << 30
)

// LoadBPETokenizer loads a CLIP BPE vocabulary from path, which is one of
//
//   - OpenAI's bpe_simple_vocab_16e6.txt.gz (any name ending in .gz);
//   - a Hugging Face vocab.json, with merges.txt beside it;
//   - a Hugging Face tokenizer.json (any other name ending in .json);
//   - a directory holding one of these, tried in that order.
//
// All three describe the same tokenizer for CLIP. Only the vocabulary and
// merges are read from Hugging Face files; the text clean-up and split are
// always CLIP's (see BPETokenizer).
func LoadBPETokenizer(path string) (*BPETokenizer, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("textenc: %w", err)
	}
	if info.IsDir() {
		for _, name := range []string{OpenAIVocabFile, HFVocabFile, HFTokenizerFile} {
			p := filepath.Join(path, name)
			if _, err := os.Stat(p); err == nil {
				return LoadBPETokenizer(p)
			}
		}
		return nil, fmt.Errorf("textenc: %s: no %s, %s or %s in the directory", path, OpenAIVocabFile, HFVocabFile, HFTokenizerFile)
	}
	switch {
	case strings.HasSuffix(path, ".gz"):
		return LoadOpenAIVocab(path)
	case filepath.Base(path) == HFVocabFile:
		return LoadHFVocab(path, filepath.Join(filepath.Dir(path), HFMergesFile))
	case strings.HasSuffix(path, ".json"):
		return LoadHFTokenizerJSON(path)
	}
	return nil, fmt.Errorf("textenc: %s: not a vocabulary file (want %s, %s or %s)", path, OpenAIVocabFile, HFVocabFile, HFTokenizerFile)
}

// LoadOpenAIVocab loads OpenAI's gzipped merge list, bpe_simple_vocab_16e6.txt.gz.
// As SimpleTokenizer does, it skips the first line, takes the next 48894
// lines as merges and builds the vocabulary from them (see NewBPETokenizer).
func LoadOpenAIVocab(path string) (*BPETokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("textenc: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("textenc: %s: not a gzip file: %w", path, err)
	}
	sc := bufio.NewScanner(io.LimitReader(zr, maxVocabFileBytes))
	sc.Buffer(nil, 1<<20)
	merges := make([]Merge, 0, openAIMergeCount)
	for line := 0; len(merges) < openAIMergeCount && sc.Scan(); line++ {
		if line == 0 {
			continue // "#version: 0.2"
		}
		m, err := parseMerge(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("textenc: %s: line %d: %w", path, line+1, err)
		}
		merges = append(merges, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("textenc: %s: %w", path, err)
	}
	if len(merges) < openAIMergeCount {
		return nil, fmt.Errorf("textenc: %s: %d merges, want %d", path, len(merges), openAIMergeCount)
	}
	return newOpenAIVocab(path, merges)
}

// parseMerge parses a merges line, two tokens separated by white space.
func parseMerge(line string) (Merge, error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return Merge{}, fmt.Errorf("merge %q is not two tokens", line)
	}
	return Merge{f[0], f[1]}, nil
}

// LoadHFVocab loads a Hugging Face CLIP vocabulary: vocab.json (token → id)
// and merges.txt (one merge per line, ranked by order, after an optional
// "#version" line).
func LoadHFVocab(vocabPath, mergesPath string) (*BPETokenizer, error) {
	data, err := readFile(vocabPath)
	if err != nil {
		return nil, err
	}
	var vocab map[string]int
	if err := json.Unmarshal(data, &vocab); err != nil {
		return nil, fmt.Errorf("textenc: %s: %w", vocabPath, err)
	}
	data, err = readFile(mergesPath)
	if err != nil {
		return nil, err
	}
	var merges []Merge
	for i, line := range strings.Split(string(data), "\n") {
		if i == 0 && strings.HasPrefix(line, "#version") || strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseMerge(line)
		if err != nil {
			return nil, fmt.Errorf("textenc: %s: line %d: %w", mergesPath, i+1, err)
		}
		merges = append(merges, m)
	}
	return newBPETokenizer(vocabPath+" + "+filepath.Base(mergesPath), vocab, merges)
}

// LoadHFTokenizerJSON loads the vocabulary and merges of a Hugging Face
// tokenizer.json whose model is a BPE with the end-of-word suffix "</w>", as
// CLIP's is. Its normalizer, pre-tokenizer and post-processor are not read.
func LoadHFTokenizerJSON(path string) (*BPETokenizer, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Model *struct {
			Type            string          `json:"type"`
			Vocab           map[string]int  `json:"vocab"`
			Merges          json.RawMessage `json:"merges"`
			EndOfWordSuffix *string         `json:"end_of_word_suffix"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("textenc: %s: %w", path, err)
	}
	m := file.Model
	switch {
	case m == nil:
		return nil, fmt.Errorf("textenc: %s: no \"model\" object", path)
	case m.Type != "BPE":
		return nil, fmt.Errorf("textenc: %s: model type %q, want \"BPE\"", path, m.Type)
	case m.EndOfWordSuffix == nil || *m.EndOfWordSuffix != endOfWord:
		return nil, fmt.Errorf("textenc: %s: BPE model without end_of_word_suffix %q: not a CLIP tokenizer", path, endOfWord)
	}
	merges, err := parseJSONMerges(m.Merges)
	if err != nil {
		return nil, fmt.Errorf("textenc: %s: model.merges: %w", path, err)
	}
	vocab := m.Vocab
	if vocab == nil {
		vocab = make(map[string]int)
	}
	for _, t := range file.AddedTokens {
		if _, ok := vocab[t.Content]; !ok {
			vocab[t.Content] = t.ID
		}
	}
	return newBPETokenizer(path, vocab, merges)
}

// parseJSONMerges reads merges written either as "left right" strings
// (tokenizers before 0.20) or as [left, right] pairs.
func parseJSONMerges(raw json.RawMessage) ([]Merge, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("missing")
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err == nil {
		merges := make([]Merge, len(lines))
		for i, l := range lines {
			if merges[i], err = parseMerge(l); err != nil {
				return nil, fmt.Errorf("%d: %w", i, err)
			}
		}
		return merges, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, errors.New("neither a list of strings nor a list of pairs")
	}
	merges := make([]Merge, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("%d: %d tokens, want 2", i, len(p))
		}
		merges[i] = Merge{p[0], p[1]}
	}
	return merges, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("textenc: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxVocabFileBytes))
	if err != nil {
		return nil, fmt.Errorf("textenc: %s: %w", path, err)
	}
	return data, nil
}
