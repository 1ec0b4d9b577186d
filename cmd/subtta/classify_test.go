package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/serve"
)

// TestClassifyEqualsServe: subtta classify and a frozen POST /v1/classify
// answer a photo with the same probabilities, bit for bit, for the
// built-in defaults and for labels and a template of the request's: both
// build the head with clip.Model.ZeroShotHead and score with
// clip.ZeroShotLogits.
func TestClassifyEqualsServe(t *testing.T) {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(serve.Config{Model: m, Tokenizer: builtin.Tokenizer(), ModelVersion: "test",
		Labels: data.CIFAR10Classes, Templates: data.CIFAR10Templates})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(t.Context())
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	jpegs, err := builtin.JPEGs(3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		labels   []string // none: CIFAR-10's
		template string   // none: CIFAR-10's 18
	}{
		{name: "built-in defaults"},
		{name: "labels and template", labels: []string{"cat", "dog", "truck"}, template: "a photo of a {}."},
		{name: "labels alone", labels: []string{"ship", "airplane", "frog", "horse"}, template: "{}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, img := range jpegs {
				path := filepath.Join(dir, "img.jpg")
				if err := os.WriteFile(path, img, 0o644); err != nil {
					t.Fatal(err)
				}
				args := []string{"classify", "--json"}
				q := url.Values{}
				if tc.labels != nil {
					args = append(args, "--labels", strings.Join(tc.labels, ","))
					q.Set("labels", strings.Join(tc.labels, ","))
				}
				if tc.template != "" {
					args = append(args, "--template", tc.template)
					q.Set("template", tc.template)
				}
				var out, errb bytes.Buffer
				if st := run(append(args, path), &out, &errb); st != 0 {
					t.Fatalf("classify: status %d: %s", st, errb.String())
				}
				var cli []struct {
					Probs []struct {
						Label string
						Prob  float64
					}
				}
				if err := json.Unmarshal(out.Bytes(), &cli); err != nil || len(cli) != 1 {
					t.Fatalf("classify output %q: %v", out.String(), err)
				}
				resp, err := http.Post(ts.URL+"/v1/classify?"+q.Encode(), "image/jpeg", bytes.NewReader(img))
				if err != nil {
					t.Fatal(err)
				}
				var got serve.ClassifyResponse
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("serve: status %d: %v", resp.StatusCode, err)
				}
				var labels []string
				var probs []float64
				for _, p := range cli[0].Probs {
					labels, probs = append(labels, p.Label), append(probs, p.Prob)
				}
				if !slices.Equal(labels, got.Labels) || !slices.Equal(probs, got.Probs) {
					t.Errorf("image %d: classify %v %v, serve %v %v", i, labels, probs, got.Labels, got.Probs)
				}
			}
		})
	}
}
