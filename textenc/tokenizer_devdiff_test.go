package textenc

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

func TestDevDiff(t *testing.T) {
	var texts []string
	var ids [][]int
	b, _ := os.ReadFile("/tmp/tokdev/corpus.json")
	json.Unmarshal(b, &texts)
	b, _ = os.ReadFile("/tmp/tokdev/corpus_ids.json")
	json.Unmarshal(b, &ids)
	tok := clipTokenizer(t)
	bad := 0
	for i, s := range texts {
		got := tok.Encode(s)
		if !slices.Equal(got, ids[i]) {
			bad++
			if bad < 15 {
				t.Errorf("%q: got %v want %v", s, got, ids[i])
			}
		}
	}
	t.Logf("%d of %d differ", bad, len(texts))
}

func TestDevDecode(t *testing.T) {
	var rows []struct {
		IDs  []int
		Text string
	}
	b, _ := os.ReadFile("/tmp/tokdev/dec.json")
	var raw [][2]json.RawMessage
	json.Unmarshal(b, &raw)
	for _, r := range raw {
		var x struct {
			IDs  []int
			Text string
		}
		json.Unmarshal(r[0], &x.IDs)
		json.Unmarshal(r[1], &x.Text)
		rows = append(rows, x)
	}
	tok := clipTokenizer(t)
	bad := 0
	for _, r := range rows {
		got, err := tok.Decode(r.IDs)
		if err != nil || got != r.Text {
			bad++
			if bad < 10 {
				t.Errorf("%v: %q want %q", r.IDs, got, r.Text)
			}
		}
	}
	t.Logf("decode: %d of %d differ", bad, len(rows))
}

func TestDevSigma(t *testing.T) {
	var rows [][2]string
	b, _ := os.ReadFile("/tmp/tokdev/sig.json")
	json.Unmarshal(b, &rows)
	bad := 0
	for _, r := range rows {
		// cleanText strips/collapses; skip inputs with spaces at ends
		sp := false
		for _, c := range r[0] {
			sp = sp || isPySpace(c)
		}
		if sp {
			continue
		}
		if got := string(cleanUnicode(nil, r[0])); got != r[1] {
			bad++
			if bad < 20 {
				t.Errorf("%q: %q want %q", r[0], got, r[1])
			}
		}
	}
	t.Logf("sigma: %d of %d differ", bad, len(rows))
}

func TestDevHTML(t *testing.T) {
	var rows [][2]string
	b, _ := os.ReadFile("/tmp/tokdev/html.json")
	json.Unmarshal(b, &rows)
	bad := 0
	for _, r := range rows {
		if got := unescapeHTML(r[0]); got != r[1] {
			bad++
			if bad < 20 {
				t.Errorf("%q: %q want %q", r[0], got, r[1])
			}
		}
	}
	t.Logf("html: %d of %d differ", bad, len(rows))
}
