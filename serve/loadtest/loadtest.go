package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a bounded load test of a server on this machine:
// Sources senders (streams, or frozen clients), each sending Requests
// images with up to Concurrency of them in flight, until all are sent or
// Duration has passed: no request is sent, nor sent again, after it
// (requests in flight then still finish).
type Config struct {
	// URL is the server's base URL; its host must be a loopback address.
	URL         string
	Sources     int
	Requests    int
	Concurrency int
	Duration    time.Duration
	// Frozen sends requests without a stream; otherwise source i sends to
	// stream StreamPrefix+i (default prefix "loadtest-").
	Frozen       bool
	StreamPrefix string
	// Shared says that other clients send to the same streams (another
	// load test, perhaps through another server on the same state
	// directory): the check that each stream's image count grew by this
	// test's answers is then left to the caller, with
	// Report.OKByStream.
	Shared bool
	// Images are encoded images, sent in turn.
	Images [][]byte
	// Retries is how many times a request is sent again, with the same
	// Idempotency-Key, after its connection failed or it got 429, 502,
	// 503 or 504 (default 40; negative: never), waiting 100 ms, then
	// twice as long each time up to 2 s, and never after Duration has
	// passed (the request then counts as an error, in OutOfTime too):
	// a server that cannot be reached ends the test at Duration, not
	// after every request's retries. Every request carries a key
	// unique to this test, so that a request the server adapted on but
	// could not answer (it died after saving) is answered from its saved
	// answer rather than stepped again.
	Retries int
	// Client is the HTTP client (default: one with a 5-minute timeout).
	Client *http.Client
	// TLS, when not nil, configures the default client's TLS (the roots
	// that an https:// URL's certificate is checked against).
	TLS *tls.Config
	// Key, when set, is sent with every request (Authorization: Bearer),
	// the streams' GET and /metrics included.
	Key string
}

// Report is a load test's outcome.
type Report struct {
	Sent   int `json:"sent"`
	Unsent int `json:"unsent"` // not sent before the time limit
	OK     int `json:"ok"`
	Errors int `json:"errors"` // non-200 answers and transport errors, after the retries
	// Retried counts the requests sent more than once; Replayed, the
	// stream answers that were the saved answer of an earlier send
	// (StreamAnswer.Replayed).
	Retried  int `json:"retried"`
	Replayed int `json:"replayed"`
	// OutOfTime counts the errors that would have been sent again but
	// for the time limit (Config.Duration).
	OutOfTime int `json:"out_of_time"`
	// ByStatus counts the requests sent by the status of their last
	// answer: 0 for those without one (a transport error).
	ByStatus map[int]int `json:"by_status"`
	// FirstErrors holds, by status as ByStatus (0: no answer), the first
	// error of the requests that ended with it: the server's error
	// message, or the transport error.
	FirstErrors map[int]string `json:"first_errors,omitempty"`

	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"requests_per_second"` // answered with 200, per second
	P50     float64 `json:"p50_seconds"`
	P99     float64 `json:"p99_seconds"`
	Max     float64 `json:"max_seconds"`
	// ExactlyOnce holds when every request sent was answered with 200,
	// exactly once, with its own X-Request-Id, and (for streams not
	// Shared) every stream's image count, read before and after the
	// test, grew by exactly its number of 200 answers. It is false when
	// a request failed (Errors), when the answers broke it (Problems),
	// and when the image counts could not be read (Unchecked).
	ExactlyOnce bool     `json:"exactly_once"`
	Problems    []string `json:"problems,omitempty"`
	// Unchecked says why the streams' image counts could not be compared
	// with their answers ("" when they were, or need not be).
	Unchecked string `json:"unchecked,omitempty"`
	// OKByStream and FailedByStream count, by stream id, the requests
	// answered with 200 and those sent but not (another status, or no
	// answer); nil with Frozen.
	OKByStream     map[string]int `json:"ok_by_stream,omitempty"`
	FailedByStream map[string]int `json:"failed_by_stream,omitempty"`
	// PeakRSS is the server's peak resident set size after the test, from
	// its /metrics (0 when it does not report one).
	PeakRSS int64 `json:"server_peak_rss_bytes"`
	// CPUSeconds is the CPU time the server used during the test (from
	// process_cpu_seconds_total), which depends less than requests/s on
	// what else the machine runs.
	CPUSeconds float64 `json:"server_cpu_seconds"`
}

// Run runs the load test.
func (lt Config) Run(ctx context.Context) (*Report, error) {
	base, err := url.Parse(lt.URL)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	if err := loopbackOnly(base.Hostname()); err != nil {
		return nil, err
	}
	if lt.Sources < 1 || lt.Requests < 1 || lt.Concurrency < 1 || len(lt.Images) == 0 {
		return nil, errors.New("loadtest: Sources, Requests, Concurrency and Images must be positive")
	}
	if lt.Duration <= 0 {
		lt.Duration = time.Minute
	}
	if lt.StreamPrefix == "" {
		lt.StreamPrefix = DefaultStreamPrefix
	}
	if lt.Retries == 0 {
		lt.Retries = DefaultRetries
	}
	run := fmt.Sprintf("%016x", rand.Uint64()) // this test's part of every Idempotency-Key
	c := lt.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: lt.Sources * lt.Concurrency,
			TLSClientConfig: lt.TLS}}
	}
	if lt.Key != "" {
		c = keyClient(c, lt.Key)
	}
	cpu0, _ := Metric(ctx, c, base, "process_cpu_seconds_total")
	counts := !lt.Frozen && !lt.Shared // the streams' image counts are checked
	var countErrs []error
	before := map[int]int64{}
	if counts {
		for i := range lt.Sources {
			n, err := lt.streamImages(ctx, c, base, i)
			if err != nil {
				countErrs = append(countErrs, fmt.Errorf("before the test: %w", err))
				continue
			}
			before[i] = n
		}
	}

	type outcome struct {
		status    int
		id        string // request_id of the answer
		seconds   float64
		err       error
		sends     int
		replayed  bool
		outOfTime bool      // not sent again for the time limit
		end       time.Time // when the last send ended
	}
	outcomes := make([][]outcome, lt.Sources)
	sent := make([][]bool, lt.Sources)
	for i := range outcomes {
		outcomes[i] = make([]outcome, lt.Requests)
		sent[i] = make([]bool, lt.Requests)
	}
	stop := time.Now().Add(lt.Duration)
	t0 := time.Now()
	var wg sync.WaitGroup
	for src := range lt.Sources {
		next := make(chan int)
		for range lt.Concurrency {
			wg.Go(func() {
				for k := range next {
					id := fmt.Sprintf("%d-%d", src, k)
					img := lt.Images[(src*lt.Requests+k)%len(lt.Images)]
					u := *base
					u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/classify"
					if !lt.Frozen {
						u.RawQuery = url.Values{"stream": {lt.StreamPrefix + strconv.Itoa(src)}}.Encode()
					}
					start := time.Now()
					var o outcome
					for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
						o = outcome{sends: o.sends + 1}
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(img))
						req.Header.Set("Content-Type", "image/jpeg")
						req.Header.Set("X-Request-Id", id)
						req.Header.Set("Idempotency-Key", run+"-"+id)
						o.status, o.id, o.replayed, o.err = send(c, req)
						o.end = time.Now()
						if !retryable(o.status, o.err) || o.sends > lt.Retries || ctx.Err() != nil {
							break
						}
						if o.end.Add(wait).After(stop) {
							o.outOfTime = true
							break
						}
						select {
						case <-time.After(wait):
						case <-ctx.Done():
						}
					}
					o.seconds = time.Since(start).Seconds()
					outcomes[src][k] = o
				}
			})
		}
		wg.Go(func() {
			defer close(next)
			for k := range lt.Requests {
				if time.Now().After(stop) || ctx.Err() != nil {
					return
				}
				sent[src][k] = true
				next <- k
			}
		})
	}
	wg.Wait()
	rep := &Report{ByStatus: map[int]int{}, Seconds: time.Since(t0).Seconds()}
	if !lt.Frozen {
		rep.OKByStream, rep.FailedByStream = map[string]int{}, map[string]int{}
	}
	var lat []float64
	okBySource := make([]int, lt.Sources)
	seen := map[string]int{}
	firstAt := map[int]time.Time{} // when FirstErrors' errors ended
	for src := range lt.Sources {
		for k, o := range outcomes[src] {
			if !sent[src][k] {
				rep.Unsent++
				continue
			}
			rep.Sent++
			rep.ByStatus[o.status]++
			if o.sends > 1 {
				rep.Retried++
			}
			if o.replayed {
				rep.Replayed++
			}
			stream := lt.StreamPrefix + strconv.Itoa(src)
			if o.err != nil || o.status != http.StatusOK {
				rep.Errors++
				if o.outOfTime {
					rep.OutOfTime++
				}
				if !lt.Frozen {
					rep.FailedByStream[stream]++
				}
				if at, ok := firstAt[o.status]; !ok || o.end.Before(at) {
					if rep.FirstErrors == nil {
						rep.FirstErrors = map[int]string{}
					}
					firstAt[o.status], rep.FirstErrors[o.status] = o.end, o.err.Error()
					if se := (*statusError)(nil); errors.As(o.err, &se) {
						rep.FirstErrors[o.status] = se.message()
					}
				}
				continue
			}
			rep.OK++
			okBySource[src]++
			if !lt.Frozen {
				rep.OKByStream[stream]++
			}
			lat = append(lat, o.seconds)
			want := fmt.Sprintf("%d-%d", src, k)
			if o.id != want {
				rep.Problems = append(rep.Problems, fmt.Sprintf("request %s answered with request_id %q", want, o.id))
			}
			seen[o.id]++
		}
	}
	for id, n := range seen {
		if n > 1 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("request_id %s answered %d times", id, n))
		}
	}
	if counts {
		for src := range lt.Sources {
			after, err := lt.streamImages(ctx, c, base, src)
			if err != nil {
				countErrs = append(countErrs, fmt.Errorf("after the test: %w", err))
				continue
			}
			b, ok := before[src]
			if d := after - b; ok && d != int64(okBySource[src]) {
				rep.Problems = append(rep.Problems, fmt.Sprintf("stream %s%d adapted on %d images for %d answers", lt.StreamPrefix, src, d, okBySource[src]))
			}
		}
	}
	if len(countErrs) > 0 {
		rep.Unchecked = fmt.Sprintf("%d of %d reads of the streams' image counts failed; the first: %v", len(countErrs), 2*lt.Sources, countErrs[0])
	}
	rep.ExactlyOnce = rep.Sent > 0 && rep.Errors == 0 && len(rep.Problems) == 0 && rep.Unchecked == ""
	if rep.Seconds > 0 {
		rep.PerSec = float64(rep.OK) / rep.Seconds
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
		rep.P50, rep.P99, rep.Max = q(0.50), q(0.99), lat[len(lat)-1]
	}
	peak, _ := Metric(ctx, c, base, "subtta_process_peak_resident_memory_bytes")
	rep.PeakRSS = int64(peak)
	if cpu1, ok := Metric(ctx, c, base, "process_cpu_seconds_total"); ok {
		rep.CPUSeconds = cpu1 - cpu0
	}
	return rep, nil
}

// DefaultRetries is Config.Retries's default.
const DefaultRetries = 40

// DefaultStreamPrefix is Config.StreamPrefix's default.
const DefaultStreamPrefix = "loadtest-"

// send sends one request of the load test and reads its answer: the
// status (0 without an answer), the answer's request_id and whether the
// stream replayed it. Any answer but a 200 that reads as one is an error:
// a statusError for another status.
func send(c *http.Client, req *http.Request) (status int, id string, replayed bool, err error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", false, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return resp.StatusCode, "", false, fmt.Errorf("status %d, reading the answer: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, "", false, &statusError{status: resp.StatusCode, msg: errorMessage(b)}
	}
	var body classifyAnswer
	if err := json.Unmarshal(b, &body); err != nil {
		return resp.StatusCode, "", false, fmt.Errorf("status 200, an answer that is not a classify answer: %w", err)
	}
	return resp.StatusCode, body.RequestID, body.Stream != nil && body.Stream.Replayed, nil
}

// statusError is a request's answer other than 200: its status and the
// server's message.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.status, e.message()) }

// message is the server's message, or the status's text where the answer
// had none.
func (e *statusError) message() string {
	if e.msg == "" {
		return http.StatusText(e.status) + " (an answer without a message)"
	}
	return e.msg
}

// maxMessage bounds the characters of an answer's body kept in a
// statusError.
const maxMessage = 300

// errorMessage is the message of an error answer's body b: the "error" of
// subtta serve's JSON, else the body's text (a balancer's page, say) on one
// line, cut to maxMessage characters.
func errorMessage(b []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	msg := string(b)
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if r := []rune(msg); len(r) > maxMessage {
		msg = string(r[:maxMessage]) + "…"
	}
	return msg
}

// retryable says whether a request may have failed on its way (a lost
// connection, a server or proxy that could not answer) rather than for
// what it is: sent again with its Idempotency-Key, it is answered once.
// An error of TLS (a certificate not trusted, a server that does not speak
// TLS) is what it is.
func retryable(status int, err error) bool {
	switch status {
	case 0:
		return !tlsError(err)
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// tlsError says whether err is one of TLS: sending again changes nothing.
func tlsError(err error) bool {
	var (
		rh  tls.RecordHeaderError
		cv  *tls.CertificateVerificationError
		ua  x509.UnknownAuthorityError
		he  x509.HostnameError
		ci  x509.CertificateInvalidError
		alt tls.AlertError
	)
	switch {
	case errors.As(err, &rh), errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &he), errors.As(err, &ci), errors.As(err, &alt):
		return true
	}
	// net/http's error for a plain HTTP answer to a TLS handshake wraps
	// nothing.
	return strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// statusCounts is " (by status: 62 × 200, 2 × 503, 1 × no answer)" for
// Report.ByStatus (the statuses in order, no answer last), or "" where
// there is none.
func statusCounts(by map[int]int) string {
	var parts []string
	for _, status := range slices.Sorted(maps.Keys(by)) {
		if status != 0 {
			parts = append(parts, fmt.Sprintf("%d × %d", by[status], status))
		}
	}
	if n := by[0]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d × no answer", n))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (by status: " + strings.Join(parts, ", ") + ")"
}

// Write prints the report in a few lines.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "%d requests sent (%d not sent before the time limit) in %.1f s: %d OK, %d errors%s\n",
		r.Sent, r.Unsent, r.Seconds, r.OK, r.Errors, statusCounts(r.ByStatus))
	for _, status := range slices.Sorted(maps.Keys(r.FirstErrors)) {
		kind := fmt.Sprintf("status %d", status)
		if status == 0 {
			kind = "no answer"
		}
		n := r.ByStatus[status]
		if status == http.StatusOK {
			n -= r.OK // answers with 200 that did not read as one
		}
		fmt.Fprintf(w, "%s (%d requests), the first error: %s\n", kind, n, r.FirstErrors[status])
	}
	if r.Retried > 0 {
		fmt.Fprintf(w, "%d requests sent again after a failure, %d of them answered with the stream's saved answer\n", r.Retried, r.Replayed)
	}
	if r.OutOfTime > 0 {
		fmt.Fprintf(w, "%d failed requests not sent again: the time limit had passed\n", r.OutOfTime)
	}
	if r.OK > 0 {
		fmt.Fprintf(w, "%.2f requests/s; latency p50 %.3f s, p99 %.3f s, max %.3f s\n", r.PerSec, r.P50, r.P99, r.Max)
	}
	if r.CPUSeconds > 0 && r.OK > 0 {
		fmt.Fprintf(w, "server CPU %.1f s, %.1f ms per answer\n", r.CPUSeconds, 1000*r.CPUSeconds/float64(r.OK))
	}
	if r.PeakRSS > 0 {
		fmt.Fprintf(w, "server peak RSS %.1f MiB\n", float64(r.PeakRSS)/(1<<20))
	}
	if len(r.OKByStream)+len(r.FailedByStream) > 0 {
		ids := slices.Sorted(maps.Keys(r.OKByStream))
		for id := range r.FailedByStream {
			if _, ok := r.OKByStream[id]; !ok {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		var parts []string
		for _, id := range ids {
			parts = append(parts, fmt.Sprintf("%s %d OK, %d not", id, r.OKByStream[id], r.FailedByStream[id]))
		}
		fmt.Fprintf(w, "by stream: %s\n", strings.Join(parts, "; "))
	}
	// The claim only where it holds; else each reason it does not.
	if r.ExactlyOnce {
		fmt.Fprintln(w, "every request answered exactly once")
	}
	if r.Sent == 0 {
		fmt.Fprintln(w, "no request sent")
	}
	if r.Errors > 0 {
		fmt.Fprintf(w, "NOT every request answered: %d of %d failed\n", r.Errors, r.Sent)
	}
	if len(r.Problems) > 0 {
		fmt.Fprintf(w, "NOT exactly once: %s\n", strings.Join(r.Problems, "; "))
	}
	if r.Unchecked != "" {
		fmt.Fprintf(w, "the streams' image counts NOT checked against their answers: %s\n", r.Unchecked)
	}
}

// keyClient is c sending key with every request.
func keyClient(c *http.Client, key string) *http.Client {
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	kc := *c
	kc.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+key)
		return next.RoundTrip(r)
	})
	return &kc
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// loopbackOnly refuses a host that is not this machine.
func loopbackOnly(host string) error {
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("loadtest: %q is not a loopback address; the load test only runs against this machine", host)
}

// streamImages is a stream's image count (0 when it does not exist yet:
// 404), or an error naming the stream when it cannot be read.
func (lt Config) streamImages(ctx context.Context, c *http.Client, base *url.URL, src int) (int64, error) {
	id := lt.StreamPrefix + strconv.Itoa(src)
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/streams/" + id
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("GET stream %s: %w", id, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET stream %s: %w", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return 0, fmt.Errorf("GET stream %s: %w", id, err)
	case resp.StatusCode == http.StatusNotFound:
		return 0, nil
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("GET stream %s: %w", id, &statusError{status: resp.StatusCode, msg: errorMessage(b)})
	}
	var st streamImages
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("GET stream %s: %w", id, err)
	}
	return st.Images, nil
}

// Metric reads an unlabelled metric from the server's /metrics.
func Metric(ctx context.Context, c *http.Client, base *url.URL, name string) (float64, bool) {
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/metrics"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// classifyAnswer is what the load test reads of an answer of POST
// /v1/classify (serve.ClassifyResponse on the wire).
type classifyAnswer struct {
	RequestID string `json:"request_id"`
	Stream    *struct {
		Replayed bool `json:"replayed"`
	} `json:"stream"`
}

// streamImages is what the load test reads of GET /v1/streams/{id}
// (serve.StreamStatus on the wire): the images adapted on.
type streamImages struct {
	Images int64 `json:"images"`
}
