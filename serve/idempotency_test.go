package serve

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// classifyKey posts an image to a stream with an Idempotency-Key header.
func classifyKey(t *testing.T, ts *httptest.Server, stream, key string, img []byte) (ClassifyResponse, reply) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/classify?stream="+stream, bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "image/jpeg")
	req.Header["Idempotency-Key"] = []string{key}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	r := reply{resp.StatusCode, resp.Header, b.Bytes()}
	var out ClassifyResponse
	if r.status == http.StatusOK {
		r.decode(t, &out)
	}
	return out, r
}

// A request sent again with its Idempotency-Key gets its first answer,
// without a step, from this server or from one started later on the same
// state; the key with another image is refused; a key that has left the
// window of recent answers is stepped again.
func TestIdempotencyKey(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir, cfg.RecentAnswers = 1, dir, 3
	_, ts := startServer(t, cfg)
	imgs := images(t, 6)
	first, r := classifyKey(t, ts, "cam", "a", imgs[0])
	if r.status != http.StatusOK || first.Stream.Replayed {
		t.Fatalf("first send: %d %s", r.status, r.body)
	}
	check := func(what string, got ClassifyResponse, r reply, replayed bool, batch int64, images int64) {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", what, r.status, r.body)
		}
		if got.Stream.Replayed != replayed || got.Stream.Batch != batch {
			t.Errorf("%s: replayed %v, batch %d; want %v, %d", what, got.Stream.Replayed, got.Stream.Batch, replayed, batch)
		}
		if st, _ := streamStatus(t, ts, "cam"); st.Images != images {
			t.Errorf("%s: the stream has adapted on %d images; want %d", what, st.Images, images)
		}
	}
	again, r := classifyKey(t, ts, "cam", "a", imgs[0])
	check("sent again", again, r, true, 0, 1)
	if !slices.Equal(again.Logits, first.Logits) || again.Label != first.Label {
		t.Errorf("sent again: logits %v; first %v", again.Logits, first.Logits)
	}
	_, r = classifyKey(t, ts, "cam", "a", imgs[1])
	checkError(t, r, http.StatusUnprocessableEntity)
	got, r := classifyKey(t, ts, "cam", "b", imgs[1])
	check("a new key", got, r, false, 1, 2)

	// A server started later on the same state answers from it.
	_, ts2 := startServer(t, cfg)
	got, r = classifyKey(t, ts2, "cam", "a", imgs[0])
	if r.status != http.StatusOK || !got.Stream.Replayed || !slices.Equal(got.Logits, first.Logits) {
		t.Fatalf("another server: %d, replayed %v, logits %v; first %v", r.status, got.Stream.Replayed, got.Logits, first.Logits)
	}
	// The window keeps the 3 latest answers: after c and d, a is gone.
	for i, k := range []string{"c", "d"} {
		if _, r := classifyKey(t, ts2, "cam", k, imgs[2+i]); r.status != http.StatusOK {
			t.Fatalf("key %s: %d %s", k, r.status, r.body)
		}
	}
	got, r = classifyKey(t, ts2, "cam", "b", imgs[1])
	if r.status != http.StatusOK || !got.Stream.Replayed || got.Stream.Batch != 1 {
		t.Errorf("b, within the window: %d, replayed %v, batch %d", r.status, got.Stream.Replayed, got.Stream.Batch)
	}
	got, r = classifyKey(t, ts2, "cam", "a", imgs[0])
	if r.status != http.StatusOK || got.Stream.Replayed || got.Stream.Batch != 4 {
		t.Errorf("a, out of the window: %d, replayed %v, batch %d; want a step, batch 4", r.status, got.Stream.Replayed, got.Stream.Batch)
	}

	for _, bad := range []string{"", "two words", strings.Repeat("k", maxKeyBytes+1), "é"} {
		_, r := classifyKey(t, ts, "cam", bad, imgs[0])
		if checkError(t, r, http.StatusBadRequest); !strings.Contains(string(r.body), "Idempotency-Key") {
			t.Errorf("key %q: %s", bad, r.body)
		}
	}
}

// Two requests with one key in one batch: the image is stepped once, and
// both get its answer.
func TestIdempotencyKeyTwiceInABatch(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize = 3
	_, ts := startServer(t, cfg)
	imgs := images(t, 2)
	type result struct {
		resp ClassifyResponse
		r    reply
	}
	out := make(chan result, 3)
	for i, k := range []string{"x", "x", "y"} {
		img := imgs[0]
		if k == "y" {
			img = imgs[1]
		}
		go func() {
			got, r := classifyKey(t, ts, "cam", k, img)
			out <- result{got, r}
		}()
		if i < 2 {
			waitPending(t, ts, "cam", i+1)
		}
	}
	replayed := 0
	var x [][]float64
	for range 3 {
		res := <-out
		if res.r.status != http.StatusOK {
			t.Fatalf("%d %s", res.r.status, res.r.body)
		}
		if res.resp.Stream.BatchSize != 2 {
			t.Errorf("a batch of %d images; want 2 (x once, y)", res.resp.Stream.BatchSize)
		}
		if res.resp.Stream.Replayed {
			replayed++
			x = append(x, res.resp.Logits)
		} else if res.resp.Stream.Position == 0 {
			x = append(x, res.resp.Logits)
		}
	}
	if st, _ := streamStatus(t, ts, "cam"); st.Images != 2 || replayed != 1 || len(x) != 2 || !slices.Equal(x[0], x[1]) {
		t.Errorf("the stream adapted on %d images (want 2); %d answers replayed (want 1); x's answers %v", st.Images, replayed, x)
	}
}
