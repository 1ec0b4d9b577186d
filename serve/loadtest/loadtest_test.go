package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
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

// A load test whose requests fail says so: every request is an error, the
// first error of each kind is kept (the server's message with its
// status, or the transport error), ExactlyOnce does not hold, and the
// report does not claim that every request was answered exactly once.
// Retries stop at the time limit, and a TLS error is not retried.
func TestFailuresReported(t *testing.T) {
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close() // nothing listens there now
	badRequest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintln(w, `{"error": "stream \"bad prefix0\": want 1 to 64 letters"}`)
	}))
	defer badRequest.Close()
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>\n  no replica\n</html>", http.StatusServiceUnavailable)
	}))
	defer unavailable.Close()
	plain := httptest.NewServer(http.NotFoundHandler()) // asked for HTTPS
	defer plain.Close()
	for _, tc := range []struct {
		name, url string
		status    int
		message   string
		retried   bool
	}{
		{"refused", refusedURL, 0, "connection refused", true},
		{"400", badRequest.URL, http.StatusBadRequest, `stream "bad prefix0": want 1 to 64 letters`, false},
		{"503 from a balancer", unavailable.URL, http.StatusServiceUnavailable, "<html> no replica </html>", true},
		{"HTTPS to a plain server", strings.Replace(plain.URL, "http:", "https:", 1), 0, "HTTP response to HTTPS client", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const limit = time.Second
			start := time.Now()
			rep, err := Config{URL: tc.url, Sources: 2, Requests: 2, Concurrency: 2, Images: [][]byte{{0}}, Duration: limit}.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			rep.Write(&out)
			if took := time.Since(start); took > limit+5*time.Second {
				t.Errorf("took %v with a time limit of %v", took, limit)
			}
			if rep.Sent != 4 || rep.OK != 0 || rep.Errors != 4 || rep.ByStatus[tc.status] != 4 || rep.ExactlyOnce {
				t.Errorf("%+v; want 4 errors with status %d, not exactly once", rep, tc.status)
			}
			if got := rep.FirstErrors[tc.status]; !strings.Contains(got, tc.message) {
				t.Errorf("first error %q; want it to hold %q", got, tc.message)
			}
			if retried := rep.Retried > 0; retried != tc.retried || retried && rep.OutOfTime != 4 {
				t.Errorf("%d retried, %d out of time; want retried %v, up to the time limit", rep.Retried, rep.OutOfTime, tc.retried)
			}
			if rep.Unchecked == "" {
				t.Error("the streams' image counts, which could not be read, are not said to be unchecked")
			}
			kind := fmt.Sprintf("status %d", tc.status)
			if tc.status == 0 {
				kind = "no answer"
			}
			if s := out.String(); strings.Contains(s, "every request answered exactly once") || !strings.Contains(s, kind+" (4 requests), the first error: ") ||
				!strings.Contains(s, tc.message) || !strings.Contains(s, "NOT every request answered: 4 of 4 failed") {
				t.Errorf("report:\n%s", s)
			}
		})
	}
}

// errorMessage keeps subtta serve's message, or a body's text on one line,
// cut.
func TestErrorMessage(t *testing.T) {
	long := strings.Repeat("é", 2*maxMessage)
	for _, tc := range []struct{ body, want string }{
		{`{"error": "stream x: damaged"}` + "\n", "stream x: damaged"},
		{"Client sent an HTTP request to an HTTPS server.\n", "Client sent an HTTP request to an HTTPS server."},
		{"", ""},
		{long, strings.Repeat("é", maxMessage) + "…"},
	} {
		if got := errorMessage([]byte(tc.body)); got != tc.want {
			t.Errorf("errorMessage(%.40q) = %.40q; want %.40q", tc.body, got, tc.want)
		}
	}
}

// TestReportStatuses: the report's first line counts the requests by
// status readably, in order of status, those without an answer last.
func TestReportStatuses(t *testing.T) {
	for _, tc := range []struct {
		by   map[int]int
		want string
	}{
		{map[int]int{200: 64}, ": 64 OK, 0 errors (by status: 64 × 200)\n"},
		{map[int]int{0: 1, 503: 2, 200: 61}, ": 61 OK, 3 errors (by status: 61 × 200, 2 × 503, 1 × no answer)\n"},
		{map[int]int{}, ": 0 OK, 0 errors\n"},
	} {
		rep := Report{ByStatus: tc.by}
		for status, n := range tc.by {
			rep.Sent += n
			if status == http.StatusOK {
				rep.OK += n
			} else {
				rep.Errors += n
			}
		}
		var out strings.Builder
		rep.Write(&out)
		first, _, _ := strings.Cut(out.String(), "\n")
		if !strings.HasSuffix(first+"\n", tc.want) || strings.Contains(first, "map[") {
			t.Errorf("%v: %q; want it to end %q", tc.by, first, tc.want)
		}
	}
}
