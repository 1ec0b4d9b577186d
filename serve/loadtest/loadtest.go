package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
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
// Duration has passed (requests in flight then still finish).
type Config struct {
	// URL is the server's base URL; its host must be a loopback address.
	URL         string
	Sources     int
	Requests    int
	Concurrency int
	Duration    time.Duration
	// Frozen sends requests without a stream; otherwise source i sends to
	// stream StreamPrefix+i.
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
	// twice as long each time up to 2 s. Every request carries a key
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
	Retried  int         `json:"retried"`
	Replayed int         `json:"replayed"`
	ByStatus map[int]int `json:"by_status"`
	Seconds  float64     `json:"seconds"`
	PerSec   float64     `json:"requests_per_second"` // answered with 200, per second
	P50      float64     `json:"p50_seconds"`
	P99      float64     `json:"p99_seconds"`
	Max      float64     `json:"max_seconds"`
	// ExactlyOnce holds when every request sent got exactly one answer
	// carrying its own X-Request-Id, and (for streams not Shared) every
	// stream's image count grew by exactly its number of 200 answers.
	ExactlyOnce bool     `json:"exactly_once"`
	Problems    []string `json:"problems,omitempty"`
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
		lt.StreamPrefix = "loadtest-"
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
	before := map[int]int64{}
	if !lt.Frozen && !lt.Shared {
		for i := range lt.Sources {
			before[i] = lt.streamImages(ctx, c, base, i)
		}
	}

	type outcome struct {
		status   int
		id       string // request_id of the answer
		seconds  float64
		err      error
		sends    int
		replayed bool
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
						if !retryable(o.status, o.err) || o.sends > lt.Retries || ctx.Err() != nil {
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
	rep := &Report{ByStatus: map[int]int{}, Seconds: time.Since(t0).Seconds(), ExactlyOnce: true}
	if !lt.Frozen {
		rep.OKByStream, rep.FailedByStream = map[string]int{}, map[string]int{}
	}
	var lat []float64
	okBySource := make([]int, lt.Sources)
	seen := map[string]int{}
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
				if !lt.Frozen {
					rep.FailedByStream[stream]++
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
	if !lt.Frozen && !lt.Shared {
		for src := range lt.Sources {
			after := lt.streamImages(ctx, c, base, src)
			if d := after - before[src]; d != int64(okBySource[src]) {
				rep.Problems = append(rep.Problems, fmt.Sprintf("stream %s%d adapted on %d images for %d answers", lt.StreamPrefix, src, d, okBySource[src]))
			}
		}
	}
	rep.ExactlyOnce = len(rep.Problems) == 0
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

// send sends one request of the load test and reads its answer: the
// status, the answer's request_id and whether the stream replayed it.
func send(c *http.Client, req *http.Request) (status int, id string, replayed bool, err error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", false, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return resp.StatusCode, "", false, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, "", false, nil
	}
	var body classifyAnswer
	if err := json.Unmarshal(b, &body); err != nil {
		return resp.StatusCode, "", false, err
	}
	return resp.StatusCode, body.RequestID, body.Stream != nil && body.Stream.Replayed, nil
}

// retryable says whether a request may have failed on its way (a lost
// connection, a server or proxy that could not answer) rather than for
// what it is: sent again with its Idempotency-Key, it is answered once.
func retryable(status int, err error) bool {
	if err != nil {
		return true
	}
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// Write prints the report in a few lines.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "%d requests sent (%d not sent before the time limit) in %.1f s: %d OK, %d errors %v\n",
		r.Sent, r.Unsent, r.Seconds, r.OK, r.Errors, r.ByStatus)
	if r.Retried > 0 {
		fmt.Fprintf(w, "%d requests sent again after a failure, %d of them answered with the stream's saved answer\n", r.Retried, r.Replayed)
	}
	fmt.Fprintf(w, "%.2f requests/s; latency p50 %.3f s, p99 %.3f s, max %.3f s\n", r.PerSec, r.P50, r.P99, r.Max)
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
	if r.ExactlyOnce {
		fmt.Fprintln(w, "every request answered exactly once")
	} else {
		fmt.Fprintf(w, "NOT exactly once: %s\n", strings.Join(r.Problems, "; "))
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

// streamImages is a stream's image count (0 when it does not exist yet).
func (lt Config) streamImages(ctx context.Context, c *http.Client, base *url.URL, src int) int64 {
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/streams/" + lt.StreamPrefix + strconv.Itoa(src)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	resp, err := c.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var st streamImages
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return 0
	}
	return st.Images
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
