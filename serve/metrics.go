package serve

import (
	"bufio"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, in a registry of its own (so
// that several servers can live in one process, as in tests).
type metrics struct {
	reg            *prometheus.Registry
	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	inflight       prometheus.Gauge
	rejected       prometheus.Counter
	batchSize      prometheus.Histogram
	stepSeconds    prometheus.Histogram
	batches        prometheus.Counter
	optimizerSteps prometheus.Counter
	streams        prometheus.Gauge
	evictions      prometheus.Counter
	restores       prometheus.Counter
	saveErrors     prometheus.Counter
	saveConflicts  prometheus.Counter
	replays        prometheus.Counter
	authFailures   prometheus.Counter
	keyLimited     *prometheus.CounterVec
	guardResets    *prometheus.CounterVec
	unsaved        prometheus.Gauge
	damaged        prometheus.Counter
	storeErrors    prometheus.Counter
	lostStates     prometheus.Counter
	degraded       *prometheus.CounterVec
	tlsFailures    prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "subtta_requests_total",
		Help: "HTTP requests by endpoint and status code (499: the client went away)."}, []string{"endpoint", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "subtta_request_duration_seconds",
		Help:    "Time from a request's arrival to its answer, by endpoint.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"endpoint"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "subtta_requests_in_flight",
		Help: "Requests being served (the concurrency limit counts these)."})
	m.rejected = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_requests_rejected_total",
		Help: "Requests refused with 429 beyond the concurrency limit."})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "subtta_batch_size",
		Help: "Images per adaptation step.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
	m.stepSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "subtta_step_duration_seconds",
		Help: "Time of one adaptation step (waiting for the model included).", Buckets: prometheus.ExponentialBuckets(0.005, 2, 16)})
	m.batches = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_adaptation_batches_total",
		Help: "Batches a stream's method has stepped on."})
	m.optimizerSteps = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_adaptation_optimizer_steps_total",
		Help: "Optimizer steps taken by the streams' methods (SubTTA takes two per batch)."})
	m.streams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "subtta_streams",
		Help: "Streams in memory."})
	m.evictions = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_stream_evictions_total",
		Help: "Streams dropped from memory (their state is on disk) to stay within the limit."})
	m.restores = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_stream_restores_total",
		Help: "Streams read back from the state store."})
	m.saveErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_state_save_errors_total",
		Help: "Failures to save a stream's state after a step."})
	m.saveConflicts = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_state_save_conflicts_total",
		Help: "Saves refused because another server saved the stream since this one read it; the batch was stepped again on the stream reloaded."})
	m.replays = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_stream_replays_total",
		Help: "Stream requests answered with the saved answer of an earlier request with the same Idempotency-Key, without a step."})
	m.authFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_auth_failures_total",
		Help: "Requests refused with 401: no API key, or one the server does not hold."})
	m.keyLimited = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "subtta_key_limited_total",
		Help: "Requests refused with 429 beyond their key's limit: in_flight (requests at once) or rate (images per second)."}, []string{"limit"})
	m.guardResets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "subtta_stream_guard_resets_total",
		Help: "Streams reset to the source weights by the collapse guard, by reason (loss, entropy, class_share)."}, []string{"reason"})
	m.unsaved = prometheus.NewGauge(prometheus.GaugeOpts{Name: "subtta_streams_unsaved",
		Help: "Streams whose last save failed: their answered adaptations are in memory only, saved again in the background."})
	m.damaged = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_state_damaged_total",
		Help: "Reads of a saved state found damaged (a checksum that fails, a number not finite); the state is set aside and the stream refused."})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_state_read_errors_total",
		Help: "Failures to read the state store (unreachable, I/O errors): the request got 503; or 500 where a stream's state file is not a regular file."})
	m.lostStates = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_state_lost_total",
		Help: "Streams saved before, not deleted through the API, whose state the store no longer holds."})
	m.degraded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "subtta_stream_unconfirmed_total",
		Help: "Stream requests not adapted on because the server could not confirm it holds the stream's latest state, by answer: refused (503) or frozen (the frozen model's answer, adapted false)."}, []string{"answer"})
	m.tlsFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "subtta_tls_handshake_errors_total",
		Help: "TLS handshakes that failed (logged at DEBUG)."})
	for _, c := range []prometheus.Collector{m.unsaved, m.damaged, m.storeErrors, m.lostStates, m.degraded, m.tlsFailures} {
		f(c)
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.inflight, m.rejected, m.batchSize, m.stepSeconds,
		m.batches, m.optimizerSteps, m.streams, m.evictions, m.restores, m.saveErrors, m.saveConflicts, m.replays,
		m.authFailures, m.keyLimited, m.guardResets} {
		f(c)
	}
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "subtta_stream_batch_size_limit",
		Help: "The most images one adaptation step takes."}, func() float64 { return float64(s.preset.BatchSize) }))
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, ok := peakRSS(); ok {
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "subtta_process_peak_resident_memory_bytes",
			Help: "The largest resident set size of the process so far (VmHWM)."}, func() float64 {
			v, _ := peakRSS()
			return float64(v)
		}))
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) observe(endpoint string, code int, d time.Duration) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(endpoint).Observe(d.Seconds())
}

// peakRSS reads the process's peak resident set size from
// /proc/self/status (Linux).
func peakRSS() (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
