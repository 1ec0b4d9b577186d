package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/subtta/subtta/autograd/kernel"
	"io"
	"log/slog"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/tta"
)

// Config configures a Server. Model, Tokenizer and Labels are required;
// every other zero value means the default given.
type Config struct {
	Model     *clip.Model
	Tokenizer textenc.Tokenizer
	// ModelVersion names the model in answers and in saved states: a state
	// saved with another version is not restored.
	ModelVersion string
	// Dataset picks the preset's hyperparameters (tta.Lookup): "cifar10-c"
	// (default), "cifar100-c" or "imagenet-c".
	Dataset string
	// Method is the adaptation method of streams (default "subtta-m"): one
	// of Methods; a multi-view method is refused (ErrMultiView).
	Method string
	// BatchSize overrides the preset's batch size when positive.
	BatchSize int
	// FrozenPrecision is the arithmetic of the linear layers of frozen
	// requests' images and texts (clip.Model.SetPrecision): kernel.FP32
	// (the default), kernel.BF16 or kernel.Int8. Streams adapt in float32,
	// and the zero-shot heads, which streams share, are built in float32.
	FrozenPrecision kernel.Precision
	// Labels are the classes when a request names none: at least as many
	// as the method needs (tta.Preset.MinClasses), else New refuses them,
	// since every stream request without labels would be refused.
	Labels []string
	// Templates are the prompt templates when a request gives none
	// (default: the preset's).
	Templates []string
	// MaxWait is how long a stream's oldest request waits for its batch to
	// fill before the batch is stepped as it is (default 1s).
	MaxWait time.Duration
	// MaxStreams is the number of streams kept in memory (default 100).
	MaxStreams int
	// StateDir, when set, is the folder where streams' states are saved
	// after every step, and read back after an eviction or a restart.
	StateDir string
	// StateStore, when set, is where streams' states are saved instead:
	// a folder (as StateDir), or a Redis database,
	// redis://[user:password@]host:port/db (rediss:// for TLS), that
	// several servers may share. Give StateDir or StateStore, not both.
	StateStore string
	// RecentAnswers is how many answers to a stream's most recent requests
	// with an Idempotency-Key its saved state keeps, to answer such a
	// request sent again without stepping on its image again (default:
	// 256, or twice the batch size when that is more).
	RecentAnswers int
	// MaxBodyBytes limits a request body (default 16 MiB).
	MaxBodyBytes int64
	// MaxPixels limits an image's width×height (default 4096×4096).
	MaxPixels int
	// MaxLabels limits the labels of a request (default 1000), MaxTemplates
	// its templates (default 32), and MaxLabelBytes the length of one label
	// or template (default 256).
	MaxLabels, MaxTemplates, MaxLabelBytes int
	// MaxConcurrent limits the requests being served at once (default 256);
	// beyond it requests get 429 with Retry-After. A stream's batch only
	// fills up to the number of its requests waiting at once.
	MaxConcurrent int
	// Timeout limits the time a request may take (default 60s) to read,
	// decode, and wait for its stream's batch. A request whose batch is
	// being stepped gets that step's answer, however long it takes: the
	// stream has adapted on its image. A Timeout not beyond MaxWait times
	// out every request whose batch does not fill (subtta serve refuses
	// such flags; tests use it to reach the 504).
	Timeout time.Duration
	// Logger receives errors and evictions (default: slog.Default()).
	Logger *slog.Logger

	// AuthKeysFile, when set, is a file of the API keys that may use the
	// server: one a line, "KEY [NAME]" or "sha256:HEX [NAME]" (the key's
	// SHA-256 digest), # for comments. A request then needs the header
	// Authorization: Bearer KEY (401 without), and a stream belongs to the
	// key that created it: another key gets 404 for it. /healthz stays
	// open. Reload reads the file again.
	AuthKeysFile string
	// MetricsKeysFile, when set, is a file of keys (as AuthKeysFile) that
	// may read /metrics, and the only ones. Without it /metrics takes a
	// client key when there is an AuthKeysFile, and is open otherwise.
	MetricsKeysFile string
	// TLSCertFile and TLSKeyFile, when set, are a PEM certificate (chain)
	// and its key, for TLSConfig. Reload reads them again.
	TLSCertFile, TLSKeyFile string
	// KeyMaxInFlight limits the requests of one key being served at once
	// (0: no limit); beyond it 429 with Retry-After. Without keys, every
	// request counts as one client's.
	KeyMaxInFlight int
	// KeyImagesPerSecond limits the images (classify and embed requests)
	// one key sends per second, on average (0: no limit), with bursts of
	// up to KeyBurst (default: the batch size, or the rate if larger);
	// beyond it 429 with Retry-After.
	KeyImagesPerSecond float64
	KeyBurst           int
	// Guard resets a stream whose adaptation degenerates (off by default).
	Guard GuardConfig

	// AdminKeysFile, when set, is a file of keys (as AuthKeysFile) that
	// may GET and DELETE any stream, whoever owns it, and the only ones
	// that may DELETE a stream whose saved state is damaged so that its
	// owner cannot be read (others get 409). Reload reads it again.
	AdminKeysFile string
	// AllowLostState starts afresh a stream that was saved and whose
	// state the store no longer holds, without a tombstone of a DELETE
	// (a Redis restarted without persistence, a file removed by hand):
	// logged and counted. Without it, such a stream is refused (500)
	// until it is deleted or its state restored.
	AllowLostState bool
	// Degraded is what a stream request gets when the server cannot
	// confirm it holds the stream's latest state (the store unreachable):
	// DegradedRefuse (the default), 503 with Retry-After; or
	// DegradedFrozen, the frozen model's answer, marked adapted: false.
	// Either way the stream does not adapt on the image.
	Degraded string
	// SaveRetry is the first wait before a failed save is tried again,
	// doubled at each failure up to SaveRetryMax (defaults 250ms, 10s).
	SaveRetry, SaveRetryMax time.Duration
}

// Config.Degraded's values.
const (
	DegradedRefuse = "refuse"
	DegradedFrozen = "frozen"
)

// Defaults of Config.
const (
	DefaultMaxWait       = time.Second
	DefaultMaxStreams    = 100
	DefaultMaxBodyBytes  = 16 << 20
	DefaultMaxPixels     = 4096 * 4096
	DefaultMaxLabels     = 1000
	DefaultMaxTemplates  = 32
	DefaultMaxLabelBytes = 256
	DefaultMaxConcurrent = 256
	DefaultTimeout       = 60 * time.Second
	DefaultSaveRetry     = 250 * time.Millisecond
	DefaultSaveRetryMax  = 10 * time.Second
)

func (c *Config) defaults() error {
	if c.Model == nil || c.Tokenizer == nil {
		return errors.New("serve: Config needs Model and Tokenizer")
	}
	if c.Model.Text == nil {
		return errors.New("serve: the model has no text tower")
	}
	if len(c.Labels) < 2 {
		return fmt.Errorf("serve: Config.Labels: %d labels, need at least 2", len(c.Labels))
	}
	if c.Dataset == "" {
		c.Dataset = "cifar10-c"
	}
	if c.Method == "" {
		c.Method = "subtta-m"
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.MaxStreams, DefaultMaxStreams)
	set(&c.MaxPixels, DefaultMaxPixels)
	set(&c.MaxLabels, DefaultMaxLabels)
	set(&c.MaxTemplates, DefaultMaxTemplates)
	set(&c.MaxLabelBytes, DefaultMaxLabelBytes)
	set(&c.MaxConcurrent, DefaultMaxConcurrent)
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch c.Degraded {
	case "":
		c.Degraded = DegradedRefuse
	case DegradedRefuse, DegradedFrozen:
	default:
		return fmt.Errorf("serve: Config.Degraded %s: want %q or %q", quote(c.Degraded, maxEcho), DegradedRefuse, DegradedFrozen)
	}
	if c.SaveRetry == 0 {
		c.SaveRetry = DefaultSaveRetry
	}
	if c.SaveRetryMax == 0 {
		c.SaveRetryMax = DefaultSaveRetryMax
	}
	if c.SaveRetry < 0 || c.SaveRetryMax < c.SaveRetry {
		return fmt.Errorf("serve: Config.SaveRetry %v, SaveRetryMax %v: want 0 < SaveRetry <= SaveRetryMax", c.SaveRetry, c.SaveRetryMax)
	}
	for _, l := range []struct {
		name     string
		v, least int64
	}{
		{"BatchSize", int64(c.BatchSize), 0}, {"MaxStreams", int64(c.MaxStreams), 1}, {"MaxPixels", int64(c.MaxPixels), 1},
		{"MaxLabels", int64(c.MaxLabels), 2}, {"MaxTemplates", int64(c.MaxTemplates), 1}, {"MaxLabelBytes", int64(c.MaxLabelBytes), 1},
		{"MaxConcurrent", int64(c.MaxConcurrent), 1}, {"MaxBodyBytes", c.MaxBodyBytes, 1},
	} {
		if l.v < l.least {
			return fmt.Errorf("serve: Config.%s %d: want %d or more", l.name, l.v, l.least)
		}
	}
	if c.MaxWait < 0 {
		return fmt.Errorf("serve: Config.MaxWait %v: want a positive duration (0: the default)", c.MaxWait)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("serve: Config.Timeout %v: want a positive duration (0: the default)", c.Timeout)
	}
	if c.RecentAnswers < 0 {
		return fmt.Errorf("serve: Config.RecentAnswers %d: want 0 (the default) or more", c.RecentAnswers)
	}
	if c.KeyMaxInFlight < 0 || c.KeyBurst < 0 || !(c.KeyImagesPerSecond >= 0) || math.IsInf(c.KeyImagesPerSecond, 0) {
		return fmt.Errorf("serve: Config.KeyMaxInFlight %d, KeyImagesPerSecond %v, KeyBurst %d: want 0 (no limit, the default) or more", c.KeyMaxInFlight, c.KeyImagesPerSecond, c.KeyBurst)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("serve: Config.TLSCertFile and TLSKeyFile go together: give both or neither")
	}
	return nil
}

// DefaultRecentAnswers is Config.RecentAnswers's default, for batches of up
// to half of it.
const DefaultRecentAnswers = 256

// Server serves one model to many streams. Build it with New, serve its
// Handler, and call Shutdown before exiting.
type Server struct {
	cfg    Config
	preset tta.Preset
	pre    *data.Preprocessor
	log    *slog.Logger
	m      *metrics
	heads  *headCache

	// model guards the LayerNorm values of the shared model's vision tower,
	// which hold the source values at rest: an adaptation step swaps a
	// stream's values in and out under it. frozen shares every weight but
	// has LayerNorms of its own, at the source values, so frozen requests
	// need no lock.
	model  sync.Mutex
	params *paramView
	// noAhead: a step did not read its batch's copy uploaded ahead
	// (uploadAhead); no more are made.
	noAhead atomic.Bool
	source  []float64 // the source LayerNorm values
	frozen  *clip.Model

	slots    chan struct{} // MaxConcurrent request slots
	decoding chan struct{} // images being decoded at once (GOMAXPROCS)

	// store keeps the streams' states (nil: streams live in memory only).
	store     stateStore
	closeOnce sync.Once

	// beforeStep, when set (by tests), runs before every adaptation step;
	// afterSave, after every save of a stream, before its batch is
	// answered.
	beforeStep, afterSave func()

	// clientKeys and metricsKeys are the key files (nil: none), cert the
	// TLS certificate (nil: none), limits the per-key limits (nil: none).
	clientKeys, metricsKeys, adminKeys *keyring
	cert                               *certificate
	limits                             *keyLimits

	mu       sync.Mutex
	streams  map[string]*stream
	clock    int64 // bumped on every use of a stream, for LRU order
	draining bool
	drain    chan struct{} // closed by Shutdown: batches go without waiting
	abandon  chan struct{} // closed when Shutdown's time is up: unsaved streams stop retrying
	workers  sync.WaitGroup
	// known are the stamps of the streams this server has saved or read
	// and no longer holds in memory: a stream among them whose state is
	// missing from the store, without a tombstone, was lost, not deleted.
	known map[string]stamp
	// unsaved are the streams whose last save failed.
	unsaved map[*stream]bool
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	p, err := tta.Lookup(cfg.Dataset, cfg.Method)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if p.Views > 0 {
		return nil, fmt.Errorf("serve: %s sees %d views of each image, which a request does not carry: serve a method that sees the image alone: %w", p.Method, p.Views, ErrMultiView)
	}
	if cfg.BatchSize > 0 {
		p.BatchSize = cfg.BatchSize
	}
	if cfg.MaxConcurrent < p.BatchSize {
		return nil, fmt.Errorf("serve: Config.MaxConcurrent %d is less than the batch size %d: a stream's batch could never fill", cfg.MaxConcurrent, p.BatchSize)
	}
	if cfg.Templates == nil {
		cfg.Templates = p.Templates
	}
	if cfg.RecentAnswers == 0 {
		cfg.RecentAnswers = max(DefaultRecentAnswers, 2*p.BatchSize)
	}
	if cfg.KeyImagesPerSecond > 0 && cfg.KeyBurst == 0 {
		cfg.KeyBurst = max(p.BatchSize, int(math.Ceil(cfg.KeyImagesPerSecond)))
	}
	if err := cfg.Guard.defaults(p.BatchSize); err != nil {
		return nil, err
	}
	if err := checkLabels(cfg.Labels, len(cfg.Labels), cfg.MaxLabelBytes); err != nil {
		return nil, fmt.Errorf("serve: Config.Labels: %w", err)
	}
	// Labels are a stream's when its first request gives none: too few for
	// the method would refuse every such request (400), blaming the client
	// for the server's setting.
	if n, why := minLabels(p); len(cfg.Labels) < n {
		return nil, fmt.Errorf("serve: Config.Labels: %d labels, and %s needs at least %d%s: every stream request without labels of its own would be refused", len(cfg.Labels), p.Method, n, why)
	}
	if err := checkTemplates(cfg.Templates, cfg.MaxTemplates, cfg.MaxLabelBytes); err != nil {
		return nil, fmt.Errorf("serve: Config.Templates: %w", err)
	}
	pv, err := newParamView(cfg.Model)
	if err != nil {
		return nil, err
	}
	cfg.Model.SetVisionTrainable(false)
	frozen, err := frozenCopy(cfg.Model)
	if err != nil {
		return nil, err
	}
	if err := frozen.SetPrecision(cfg.FrozenPrecision); err != nil {
		return nil, fmt.Errorf("serve: Config.FrozenPrecision: %w", err)
	}
	pre, err := cfg.Model.Preprocessor()
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s := &Server{frozen: frozen,
		cfg: cfg, preset: p, log: cfg.Logger,
		pre:      pre,
		params:   pv,
		source:   pv.read(nil),
		slots:    make(chan struct{}, cfg.MaxConcurrent),
		decoding: make(chan struct{}, runtime.GOMAXPROCS(0)),
		streams:  map[string]*stream{},
		drain:    make(chan struct{}),
		abandon:  make(chan struct{}),
		known:    map[string]stamp{},
		unsaved:  map[*stream]bool{},
	}
	if cfg.AuthKeysFile != "" {
		if s.clientKeys, err = newKeyring(cfg.AuthKeysFile); err != nil {
			return nil, err
		}
	}
	if cfg.MetricsKeysFile != "" {
		if s.metricsKeys, err = newKeyring(cfg.MetricsKeysFile); err != nil {
			return nil, err
		}
	}
	if cfg.AdminKeysFile != "" {
		if s.adminKeys, err = newKeyring(cfg.AdminKeysFile); err != nil {
			return nil, err
		}
	}
	if cfg.TLSCertFile != "" {
		if s.cert, err = newCertificate(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, err
		}
	}
	s.limits = newKeyLimits(&cfg)
	s.heads = newHeadCache(s, 32)
	s.m = newMetrics(s)
	// The default heads, made now rather than by the first requests.
	if _, err := s.heads.get(cfg.Labels, cfg.Templates, false); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if p.PerTemplateHeads {
		if _, err := s.heads.get(cfg.Labels, cfg.Templates, true); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	if s.store, err = openStore(context.Background(), &s.cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// ErrMultiView: the method sees several views of each image (tta.MultiView);
// the server adapts on the requests' images alone.
var ErrMultiView = errors.New("serve: multi-view methods are not served")

// Methods lists the adaptation methods a Server serves (Config.Method), in
// the registry's order (tta.Methods): every registered method but those
// that see several views of each image (ErrMultiView), which a request, one
// image, does not carry. It is read from the registry, so that help texts
// list what New accepts. A method listed may still have no setting for a
// dataset (tta.Lookup says so).
func Methods() []string {
	var out []string
	for _, m := range tta.Methods() {
		for _, d := range tta.PresetDatasets {
			if p, err := tta.Lookup(d, m); err == nil && p.Views == 0 {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// minLabels is the fewest labels the preset's method adapts with, and why
// (to tell a client): tta.Preset.MinClasses.
func minLabels(p tta.Preset) (int, string) {
	n, why := p.MinClasses()
	if why != "" {
		why = " (" + why + ")"
	}
	return n, why
}

// Streams is the number of streams the server holds in memory now: without
// a state store, the streams whose adaptation is lost when it stops.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// BatchSize is the number of requests a stream's step takes at most.
func (s *Server) BatchSize() int { return s.preset.BatchSize }

// Handler returns the HTTP handler of every endpoint.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern, name string, limited bool, h map[string]handlerFunc) {
		mux.Handle(pattern, s.wrap(name, limited, h))
	}
	route("/v1/classify", "classify", true, map[string]handlerFunc{http.MethodPost: s.handleClassify})
	route("/v1/embed", "embed", true, map[string]handlerFunc{http.MethodPost: s.handleEmbed})
	route("/v1/streams/{id}", "streams", false, map[string]handlerFunc{
		http.MethodGet: s.handleStreamGet, http.MethodDelete: s.handleStreamDelete})
	// HEAD too: a balancer's or an orchestrator's check may send it (net/http
	// writes HEAD's headers and status, without the body).
	route("/healthz", "healthz", false, map[string]handlerFunc{http.MethodGet: s.handleHealth, http.MethodHead: s.handleHealth})
	metrics := s.m.handler()
	route("/metrics", "metrics", false, map[string]handlerFunc{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
		metrics.ServeHTTP(w, r)
		return nil
	}})
	route("/", "other", false, map[string]handlerFunc{})
	return mux
}

// handlerFunc is an endpoint: it writes a successful answer itself and
// returns an error (an *httpError for a client's mistake) for wrap to write.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// httpError is an error with its HTTP status.
type httpError struct {
	status int
	msg    string
	header map[string]string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, a ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, a...)}
}

// statusClientClosed is the status logged for a client that went away
// before its answer (nginx's 499); the client never sees it.
const statusClientClosed = 499

// errTimeout is the cause of a request's context when Timeout passed.
var errTimeout = errors.New("request timed out")

// classify turns an endpoint's error into an HTTP error: a client's
// mistake keeps its status, a done context becomes 504 or 499, anything
// else is a 500 (and is logged).
func (s *Server) classify(r *http.Request, err error) *httpError {
	var he *httpError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &mb):
		return errorf(http.StatusRequestEntityTooLarge, "request body larger than %d bytes", mb.Limit)
	case r.Context().Err() != nil && errors.Is(context.Cause(r.Context()), errTimeout):
		return errorf(http.StatusGatewayTimeout, "not answered within %v", s.cfg.Timeout)
	case r.Context().Err() != nil:
		return errorf(statusClientClosed, "client closed the request")
	}
	s.log.Error("serve: request failed", "path", r.URL.Path, "client", clientOf(r.Context()).name, "err", err)
	return errorf(http.StatusInternalServerError, "%v", err)
}

// statusWriter records the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// maxMessage limits an error message's length, in characters.
const maxMessage = 1000

func writeError(w http.ResponseWriter, e *httpError) {
	for k, v := range e.header {
		w.Header().Set(k, v)
	}
	if sw, ok := w.(*statusWriter); ok && e.status == statusClientClosed {
		sw.status = statusClientClosed // nobody reads it; only the metrics do
		return
	}
	// A client's string that reached a message uncut (in an error of
	// another package) goes back no longer than maxMessage.
	writeJSON(w, e.status, map[string]string{"error": shorten(e.msg, maxMessage)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	s.mu.Lock()
	n, draining := len(s.streams), s.draining
	s.mu.Unlock()
	status, state := http.StatusOK, "ok"
	if draining {
		status, state = http.StatusServiceUnavailable, "draining"
	}
	writeJSON(w, status, map[string]any{"status": state, "model": s.cfg.ModelVersion, "method": s.preset.Method, "streams": n})
	return nil
}

// ErrUnsaved is (errors.Is) Shutdown's error when streams whose saves
// failed could not be saved before its context ended: their answered
// adaptations are lost. The message names them.
var ErrUnsaved = errors.New("serve: streams left unsaved")

// Shutdown stops taking stream requests (they get 503), steps the batches
// waiting without waiting for them to fill, waits for every stream's worker
// to finish (or ctx), and saves every stream: a stream whose save failed
// is tried again, with backoff, until it is saved or ctx ends; then
// Shutdown returns ErrUnsaved naming the streams left unsaved. Call it
// after http.Server.Shutdown has answered the requests in flight, or
// before, to hurry their batches along.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		close(s.drain)
	}
	all := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		all = append(all, st)
	}
	s.mu.Unlock()
	var errs []error
	for _, st := range all {
		if err := st.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Time is up: the unsaved streams stop trying, and are named.
		s.mu.Lock()
		if !isClosed(s.abandon) {
			close(s.abandon)
		}
		var ids []string
		for st := range s.unsaved {
			ids = append(ids, st.id)
		}
		s.mu.Unlock()
		if len(ids) > 0 {
			slices.Sort(ids)
			s.log.Error("serve: shutting down with unsaved streams: their answered adaptations since their last save are lost", "streams", strings.Join(ids, ","))
			return fmt.Errorf("%w: %d (%s): their answered adaptations since their last save are lost", ErrUnsaved, len(ids), strings.Join(ids, ", "))
		}
	}
	if len(errs) == 0 && s.store != nil {
		// Every stream is saved: the store's connections can go.
		s.closeOnce.Do(func() { errs = append(errs, s.store.Close()) })
	}
	return errors.Join(errs...)
}

// discard drains and closes a body that was not fully read, so that the
// connection can be reused.
func discard(r io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(r, 1<<16))
	r.Close()
}
