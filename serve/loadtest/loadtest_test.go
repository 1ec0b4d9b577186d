package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestOnlyLoopback: a load test is sent to this machine only.
func TestOnlyLoopback(t *testing.T) {
	for _, u := range []string{"http://192.0.2.1:8080", "http://example.com", "http://10.0.0.1"} {
		_, err := Config{URL: u, Sources: 1, Requests: 1, Concurrency: 1, Images: [][]byte{{0}}}.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s: %v; want a refusal naming loopback", u, err)
		}
	}
}

// TestMetric reads an unlabelled metric by its whole name, not by a
// prefix of another's.
func TestMetric(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "# HELP x\nsubtta_saves_total_extra 9\nsubtta_saves_total 3\nsubtta_other{a=\"b\"} 1\n")
	}))
	defer ts.Close()
	u, _ := url.Parse(ts.URL)
	if v, ok := Metric(context.Background(), ts.Client(), u, "subtta_saves_total"); !ok || v != 3 {
		t.Errorf("subtta_saves_total = %v, %v; want 3", v, ok)
	}
	if _, ok := Metric(context.Background(), ts.Client(), u, "subtta_missing"); ok {
		t.Error("a missing metric was found")
	}
}
