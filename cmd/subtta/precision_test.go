package main

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/serve"
)

// TestPrecisionClassify: subtta classify --precision P, and a frozen
// request to a server with FrozenPrecision P (whose heads stay float32),
// give probabilities near fp32's (within 0.05) but not fp32's bits (the
// reduced precision ran).
func TestPrecisionClassify(t *testing.T) {
	jpegs, err := builtin.JPEGs(2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var paths []string
	for i, img := range jpegs {
		p := filepath.Join(dir, string(rune('a'+i))+".jpg")
		if err := os.WriteFile(p, img, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	classify := func(prec string) [][]float64 {
		t.Helper()
		var out, errb bytes.Buffer
		if st := run(append([]string{"classify", "--json", "--precision", prec}, paths...), &out, &errb); st != 0 {
			t.Fatalf("classify --precision %s: status %d: %s", prec, st, errb.String())
		}
		var res []struct{ Probs []struct{ Prob float64 } }
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		var probs [][]float64
		for _, r := range res {
			var p []float64
			for _, x := range r.Probs {
				p = append(p, x.Prob)
			}
			probs = append(probs, p)
		}
		return probs
	}
	fp32 := classify("fp32")
	for _, prec := range []kernel.Precision{kernel.BF16, kernel.Int8} {
		t.Run(prec.String(), func(t *testing.T) {
			if err := kernel.CheckPrecision(prec); err != nil {
				var out, errb bytes.Buffer
				if st := run(append([]string{"classify", "--precision", prec.String()}, paths...), &out, &errb); st != 2 {
					t.Errorf("classify --precision %s on a CPU without its kernel: status %d, want 2 (%s)", prec, st, errb.String())
				}
				t.Skipf("%v", err)
			}
			low := classify(prec.String())
			m, err := builtin.Model(clip.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := serve.New(serve.Config{Model: m, Tokenizer: builtin.Tokenizer(), ModelVersion: "test",
				Labels: data.CIFAR10Classes, Templates: data.CIFAR10Templates, FrozenPrecision: prec})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Shutdown(t.Context())
			if m.Vision.Precision() != kernel.FP32 || m.Text.Precision() != kernel.FP32 {
				t.Fatalf("serve.New with FrozenPrecision %s changed the streams' model to %s, %s", prec, m.Vision.Precision(), m.Text.Precision())
			}
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			for i, img := range jpegs {
				resp, err := http.Post(ts.URL+"/v1/classify", "image/jpeg", bytes.NewReader(img))
				if err != nil {
					t.Fatal(err)
				}
				var got serve.ClassifyResponse
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("serve: status %d: %v", resp.StatusCode, err)
				}
				for what, p := range map[string][]float64{"classify": low[i], "serve": got.Probs} {
					if slices.Equal(p, fp32[i]) {
						t.Errorf("image %d: %s's %s probabilities equal fp32's bit for bit", i, what, prec)
					}
					for j := range p {
						if d := math.Abs(p[j] - fp32[i][j]); d > 0.05 {
							t.Errorf("image %d class %d: %s in %s %v, fp32 %v", i, j, what, prec, p[j], fp32[i][j])
						}
					}
				}
			}
		})
	}
}

// TestBenchPairsPrecision: bench --precision times the fp32 forward pass
// and its reduced-precision twin in pairs, and prints both rates and the
// median of the pairs' ratios, which is near the ratio of the two rates (a
// loose check that it is a ratio of these passes).
func TestBenchPairsPrecision(t *testing.T) {
	prec := kernel.Int8
	if err := kernel.CheckPrecision(prec); err != nil {
		t.Skip(err)
	}
	var out, errb bytes.Buffer
	if st := run([]string{"bench", "--model", "default", "--batch", "2", "--reps", "3", "--precision", "int8", "--only", "forward"}, &out, &errb); st != 0 {
		t.Fatalf("exit %d: %s", st, errb.String())
	}
	text := out.String()
	re := regexp.MustCompile(`(?m)^forward +([0-9.]+) images/s.*\n.*\n^forward, int8 \([a-z0-9]+\) +([0-9.]+) images/s.*\n += ([0-9.]+)× the fp32 forward pass above \(median of 3 ratios`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("bench output lacks the paired fp32 and int8 lines:\n%s", text)
	}
	fp32, _ := strconv.ParseFloat(m[1], 64)
	low, _ := strconv.ParseFloat(m[2], 64)
	ratio, _ := strconv.ParseFloat(m[3], 64)
	if fp32 <= 0 || low <= 0 || ratio <= 0 {
		t.Fatalf("non-positive figures in:\n%s", text)
	}
	// The median of ratios and the ratio of medians differ, but not by
	// more than the spread of three passes on a busy machine.
	if q := ratio / (low / fp32); q < 0.5 || q > 2 {
		t.Errorf("ratio %.2f far from the rates' %.2f:\n%s", ratio, low/fp32, text)
	}
}
