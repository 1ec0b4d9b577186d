package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
)

// testImages are the first JPEGs of the built-in CIFAR-10 test images.
var testImages = sync.OnceValues(func() ([][]byte, error) { return builtin.JPEGs(64) })

func images(t testing.TB, n int) [][]byte {
	t.Helper()
	imgs, err := testImages()
	if err != nil {
		t.Fatal(err)
	}
	return imgs[:n]
}

func builtinModel(t testing.TB) *clip.Model {
	t.Helper()
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testConfig is a server of the built-in model with CIFAR-10's labels,
// batches of 4 and a long MaxWait, so that batches fill.
func testConfig(t testing.TB) Config {
	return Config{
		Model: builtinModel(t), Tokenizer: builtin.Tokenizer(), ModelVersion: "builtin-test",
		Labels: data.CIFAR10Classes, BatchSize: 4, MaxWait: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func startServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.Shutdown(ctx)
		ts.Close()
	})
	return s, ts
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d, body %q: %v", r.status, r.body, err)
	}
}

func do(t *testing.T, method, url, ctype string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// classify posts one image to /v1/classify with the query.
func classify(t *testing.T, ts *httptest.Server, query string, img []byte) (ClassifyResponse, reply) {
	t.Helper()
	r := do(t, http.MethodPost, ts.URL+"/v1/classify"+query, "image/jpeg", img)
	var out ClassifyResponse
	if r.status == http.StatusOK {
		r.decode(t, &out)
	}
	return out, r
}

func streamStatus(t *testing.T, ts *httptest.Server, id string) (StreamStatus, int) {
	t.Helper()
	r := do(t, http.MethodGet, ts.URL+"/v1/streams/"+id, "", nil)
	var st StreamStatus
	if r.status == http.StatusOK {
		r.decode(t, &st)
	}
	return st, r.status
}

// waitPending waits until n requests of the stream wait for their batch.
func waitPending(t *testing.T, ts *httptest.Server, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if st, code := streamStatus(t, ts, id); code == http.StatusOK && st.Pending == n {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("stream %s: %d requests never waited", id, n)
}

// streamBatch sends one batch's images to a stream in order: each request
// is sent once the previous one waits, so that rows come in this order.
func streamBatch(t *testing.T, ts *httptest.Server, id string, imgs [][]byte) []ClassifyResponse {
	t.Helper()
	out := make([]ClassifyResponse, len(imgs))
	errs := make([]string, len(imgs))
	var wg sync.WaitGroup
	for i, img := range imgs {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/classify?stream="+id, bytes.NewReader(img))
			req.Header.Set("Content-Type", "image/jpeg")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				errs[i] = string(b)
				return
			}
			if err := json.Unmarshal(b, &out[i]); err != nil {
				errs[i] = err.Error()
			}
		})
		if i < len(imgs)-1 {
			waitPending(t, ts, id, i+1)
		}
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Fatalf("stream %s image %d: %s", id, i, e)
		}
	}
	return out
}

// streamState is a stream's LayerNorm values, its method's saved state
// and its counters, read under the locks their writers hold.
func (s *Server) streamState(t *testing.T, id string) (params []float64, state []byte, stats streamStats) {
	t.Helper()
	s.mu.Lock()
	st := s.streams[id]
	s.mu.Unlock()
	if st == nil {
		t.Fatalf("stream %s is not in memory", id)
	}
	<-st.ready
	s.model.Lock()
	params, state = slices.Clone(st.params), slices.Clone(st.state)
	s.model.Unlock()
	st.mu.Lock()
	stats = st.stats
	st.mu.Unlock()
	return params, state, stats
}
