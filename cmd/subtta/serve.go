package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/serve"
	"github.com/subtta/subtta/serve/loadtest"
	"github.com/subtta/subtta/tta"
)

// serveMain runs the server with the command line args until ctx ends,
// then drains it: the batches waiting are stepped, the requests in flight
// answered, every stream saved (without a state store, every stream's
// adaptation is dropped, and the log says so). ready, when not nil, is called with the
// address listened on.
func serveMain(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) error {
	o := &serveOptions{stdout: stdout, stderr: stderr}
	c := o.command()
	rest, err := parseCommandLine(c, args)
	if err != nil {
		return err
	}
	return o.run(ctx, rest, ready)
}

// apiKeyEnv names the environment variable loadtest takes its key from
// when --key is not given (a key on the command line is visible to every
// user of the machine, in ps).
const apiKeyEnv = "SUBTTA_API_KEY"

// stateStoreEnv names the environment variable serve takes its state store
// from when neither --state-store nor --state-store-file is given: a Redis
// URL may hold a password, which ps shows on the command line.
const stateStoreEnv = "SUBTTA_STATE_STORE"

// datasetAliases let --dataset name the clean set the -C benchmark is made
// from.
var datasetAliases = map[string]string{"cifar10": "cifar10-c", "cifar100": "cifar100-c", "imagenet": "imagenet-c"}

// serveOptions are the flags of serve.
type serveOptions struct {
	addr            string
	model           modelOptions
	labels          string
	templates       stringList
	dataset         string
	method          string
	batch           int
	maxWait         time.Duration
	maxStreams      int
	stateDir        string
	stateStore      string
	stateStoreFile  string
	adminKeys       string
	allowLost       bool
	degraded        string
	shutdownTimeout time.Duration
	recent          int
	maxBody         int64
	maxPixels       int
	maxLabels       int
	maxConc         int
	timeout         time.Duration
	precision       precisionFlag
	authKeys        string
	metricsKey      string
	tlsCert         string
	tlsKey          string
	insecure        bool
	keyInFlight     int
	keyRate         float64
	keyBurst        int
	guard           serve.GuardConfig

	flags          *pflag.FlagSet // the command's, to tell a flag given empty from one left out
	stdout, stderr io.Writer
}

// newServeCmd is `subtta serve`.
func newServeCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &serveOptions{stdout: stdout, stderr: stderr}
	c := o.command()
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		go func() {
			<-ctx.Done()
			stop() // a second signal ends the process at once
		}()
		return o.run(ctx, args, nil)
	}
	return c
}

// command is the serve command with its flags bound to o, without RunE.
func (o *serveOptions) command() *cobra.Command {
	const summary = "HTTP classifier that adapts to each client's image stream (subtta-m)"
	c := &cobra.Command{
		Use:   "serve",
		Short: summary,
		Long:  summary,
	}
	f := c.Flags()
	o.flags = f
	configFlags(f, o.stdout)
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	addModelFlags(f, &o.model, "", true)
	f.StringVar(&o.labels, "labels", "", `comma-separated labels when a request gives none: none empty, at least 2, and as many as --method needs (3 for subtta-s, -t, -b, -m) (default: those the model records, as train's models do; else with the built-in model or --dataset cifar10, CIFAR-10's classes)`)
	f.Var(&o.templates, "template", `prompt template when a request gives none, "{}" for the label (repeatable; default: those the model records, else the method's preset, "a photo of a {}.")`)
	f.StringVar(&o.dataset, "dataset", "cifar10", "whose preset hyperparameters streams adapt with: cifar10, cifar100 or imagenet (or "+strings.Join(tta.PresetDatasets, ", ")+")")
	f.StringVar(&o.method, "method", "subtta-m", "adaptation method of streams: "+strings.Join(serve.Methods(), ", ")+" (eval's multi-view methods are not served: a request carries one image, not their views)")
	f.IntVar(&o.batch, "batch-size", 0, "images per adaptation step (0: the preset's, 200 on CIFAR)")
	f.DurationVar(&o.maxWait, "max-wait", serve.DefaultMaxWait, "how long a stream's oldest request waits for its batch to fill")
	f.IntVar(&o.maxStreams, "max-streams", serve.DefaultMaxStreams, "streams kept in memory; beyond, the least recently used is evicted to --state-dir")
	f.StringVar(&o.stateDir, "state-dir", "", "folder where streams are saved after every step and read back after an eviction or restart (none: streams live in memory only)")
	f.StringVar(&o.stateStore, "state-store", "", "where streams are saved, instead of --state-dir: a folder, or a Redis database redis://[user:password@]host:port/db that several servers share (a password here is visible in ps: use --state-store-file or $"+stateStoreEnv+")")
	f.StringVar(&o.stateStoreFile, "state-store-file", "", "file holding --state-store's value on its first line (keep a Redis password out of ps)")
	f.StringVar(&o.adminKeys, "admin-keys", "", "file of the keys (as --auth-keys) that may GET and DELETE any stream, and the only ones that may DELETE a stream whose saved state is damaged so that its owner cannot be read; reloaded on SIGHUP")
	f.BoolVar(&o.allowLost, "allow-lost-state", false, "start afresh a stream that was saved and whose state the store no longer holds without a DELETE (a Redis restarted without persistence); without it such a stream gets 500 until it is deleted")
	f.StringVar(&o.degraded, "degraded", serve.DegradedRefuse, "what a stream request gets when the server cannot confirm it holds the stream's latest state (the store unreachable): refuse (503 with Retry-After) or frozen (the frozen model's answer, marked \"adapted\": false); the stream does not adapt either way")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 0, "on SIGTERM, how long to answer the requests in flight and save every stream, retrying failed saves; the process then exits non-zero naming the streams left unsaved (0: --timeout + --max-wait + 10s)")
	f.IntVar(&o.recent, "recent-answers", 0, fmt.Sprintf("answers to a stream's latest requests with an Idempotency-Key kept in its saved state, to answer such a request sent again without adapting twice (0: %d, or twice the batch size if more)", serve.DefaultRecentAnswers))
	f.Int64Var(&o.maxBody, "max-body", serve.DefaultMaxBodyBytes, "largest request body, bytes")
	f.IntVar(&o.maxPixels, "max-pixels", serve.DefaultMaxPixels, "largest image, width×height")
	f.IntVar(&o.maxLabels, "max-labels", serve.DefaultMaxLabels, "most labels (or texts) in one request")
	f.IntVar(&o.maxConc, "max-concurrent", serve.DefaultMaxConcurrent, "requests served at once; beyond, 429 with Retry-After (a stream's batch fills only with its requests waiting at once)")
	f.DurationVar(&o.timeout, "timeout", serve.DefaultTimeout, "longest time a request may wait for its batch (504 beyond); a request whose batch is being stepped gets its answer")
	o.precision = addCPUPrecisionFlag(f, "arithmetic of the linear layers in frozen requests' passes, classify's and embed's (streams adapt, and heads are built, in fp32; serve runs on the CPU)")
	f.StringVar(&o.authKeys, "auth-keys", "", "file of the API keys that may use the server, one a line: KEY [NAME], or sha256:HEX [NAME] (the key's SHA-256 digest); requests then need Authorization: Bearer KEY, and a stream answers only the key that created it; reloaded on SIGHUP")
	f.StringVar(&o.metricsKey, "metrics-key", "", "file of the keys (as --auth-keys) that may read /metrics, and the only ones (default: a key of --auth-keys, or none without it); reloaded on SIGHUP")
	f.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with (TLS 1.2 or later), with --tls-key; both reloaded on SIGHUP")
	f.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.BoolVar(&o.insecure, "insecure", false, "serve on an address beyond this machine without --auth-keys: anyone who reaches the port may then use, steer, read and delete every stream")
	f.IntVar(&o.keyInFlight, "key-max-in-flight", 0, "requests of one key served at once (0: no limit); beyond, 429 with Retry-After")
	f.Float64Var(&o.keyRate, "key-images-per-second", 0, "images (classify and embed requests) one key may send per second on average (0: no limit); beyond, 429 with Retry-After")
	f.IntVar(&o.keyBurst, "key-burst", 0, "images one key may send at once within --key-images-per-second (0: the batch size, or the rate if larger)")
	f.Float64Var(&o.guard.MaxLoss, "guard-max-loss", 0, "collapse guard: a batch whose method reports a loss beyond this is bad (0: not checked)")
	f.Float64Var(&o.guard.MaxEntropy, "guard-max-entropy", 0, "collapse guard: a batch whose mean prediction entropy, as a share of a uniform prediction's (0 to 1), is beyond this is bad (0: not checked)")
	f.IntVar(&o.guard.Patience, "guard-patience", serve.DefaultGuardPatience, "collapse guard: bad batches in a row that reset a stream to the source weights")
	f.Float64Var(&o.guard.MaxClassShare, "guard-max-class-share", 0, "collapse guard: reset a stream when one label takes more than this share (0 to 1) of its last --guard-window predictions (0: not checked)")
	f.IntVar(&o.guard.Window, "guard-window", 0, "collapse guard: predictions --guard-max-class-share is taken over (0: five batches)")
	c.RegisterFlagCompletionFunc("method", completeChoices(serve.Methods()...))
	c.RegisterFlagCompletionFunc("dataset", completeChoices(append([]string{"cifar10", "cifar100", "imagenet"}, tta.PresetDatasets...)...))
	c.RegisterFlagCompletionFunc("degraded", completeChoices(serve.DegradedRefuse, serve.DegradedFrozen))
	return c
}

// run runs the command with the positional arguments args.
func (o *serveOptions) run(ctx context.Context, args []string, ready func(addr string)) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q (all inputs are flags)", args[0])
	}
	prec, _, err := o.precision.choose("cpu") // serve runs on the CPU
	if err != nil {
		return err
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together: give both or neither")
	}
	if o.authKeys == "" && !o.insecure {
		open, err := exposed(o.addr)
		if err != nil {
			return err
		}
		if open {
			return usagef("--addr %s listens beyond this machine, and there is no --auth-keys: anyone who reaches the port could send images into any stream (steering its adaptation), read its state or delete it. Give --auth-keys FILE (docs/serving.md, Access), listen on 127.0.0.1, or give --insecure to serve without keys all the same", o.addr)
		}
	}
	ds := o.dataset
	if a, ok := datasetAliases[ds]; ok {
		ds = a
	}
	preset, err := tta.Lookup(ds, o.method)
	switch {
	case errors.Is(err, tta.ErrUnknownMethod):
		return usagef("--method %s: unknown method %q (want one of %s)", o.method, o.method, strings.Join(serve.Methods(), ", "))
	case err != nil:
		return usagef("--dataset %s --method %s: %v", o.dataset, o.method, err)
	case preset.Views > 0:
		// serve.New refuses it too (ErrMultiView), after the model is
		// loaded and as a failure rather than a usage error.
		return usagef("--method %s sees %d views of each image, which a request (one image) does not carry: serve one of %s", o.method, preset.Views, strings.Join(serve.Methods(), ", "))
	}
	for _, l := range []struct {
		flag     string
		v, least int64
	}{
		{"--batch-size", int64(o.batch), 0}, {"--max-streams", int64(o.maxStreams), 1}, {"--max-body", o.maxBody, 1},
		{"--max-pixels", int64(o.maxPixels), 1}, {"--max-labels", int64(o.maxLabels), 2}, {"--max-concurrent", int64(o.maxConc), 1},
		{"--recent-answers", int64(o.recent), 0},
		{"--key-max-in-flight", int64(o.keyInFlight), 0}, {"--key-burst", int64(o.keyBurst), 0},
		{"--guard-patience", int64(o.guard.Patience), 1}, {"--guard-window", int64(o.guard.Window), 0},
	} {
		if l.v < l.least {
			return usagef("%s %d: want %d or more", l.flag, l.v, l.least)
		}
	}
	if o.stateStore != "" && o.stateStoreFile != "" {
		return usagef("--state-store and --state-store-file: give one")
	}
	if o.stateStoreFile != "" {
		b, err := os.ReadFile(o.stateStoreFile)
		if err != nil {
			return usagef("--state-store-file: %v", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if o.stateStore = strings.TrimSpace(line); o.stateStore == "" {
			return usagef("--state-store-file %s: its first line is empty; want a folder or redis://…", o.stateStoreFile)
		}
	} else if o.stateStore == "" && o.stateDir == "" {
		o.stateStore = os.Getenv(stateStoreEnv)
	}
	if o.stateDir != "" && o.stateStore != "" {
		return usagef("--state-dir %s and --state-store (or --state-store-file): give one", o.stateDir)
	}
	// A store that names none serve can open is the value's fault: checked
	// here, before the model is loaded, naming where the value came from
	// (never the value itself in full: a Redis URL may hold a password).
	storeFrom := "--state-store"
	switch {
	case o.stateStoreFile != "":
		storeFrom = "--state-store-file " + o.stateStoreFile + ": its first line"
	case !o.flags.Changed("state-store"):
		storeFrom = "$" + stateStoreEnv
	}
	if err := serve.CheckStateStore(o.stateDir); err != nil {
		return usagef("--state-dir %v", err)
	}
	if err := serve.CheckStateStore(o.stateStore); err != nil {
		return usagef("%s %v", storeFrom, err)
	}
	if o.degraded != serve.DegradedRefuse && o.degraded != serve.DegradedFrozen {
		return usagef("--degraded %s: want %s or %s", o.degraded, serve.DegradedRefuse, serve.DegradedFrozen)
	}
	if o.shutdownTimeout < 0 {
		return usagef("--shutdown-timeout %v: want 0 (the default) or a positive duration", o.shutdownTimeout)
	}
	for _, f := range []struct {
		flag    string
		v, most float64
	}{
		{"--key-images-per-second", o.keyRate, math.Inf(1)}, {"--guard-max-loss", o.guard.MaxLoss, math.Inf(1)},
		{"--guard-max-entropy", o.guard.MaxEntropy, 1}, {"--guard-max-class-share", o.guard.MaxClassShare, 1},
	} {
		if !(f.v >= 0 && f.v <= f.most) || math.IsInf(f.v, 0) {
			return usagef("%s %v: want 0 (off) up to %v", f.flag, f.v, f.most)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--max-wait", o.maxWait}, {"--timeout", o.timeout}} {
		if d.v <= 0 {
			return usagef("%s %v: want a positive duration", d.flag, d.v)
		}
	}
	batchSize, batchFrom := o.batch, "--batch-size"
	if batchSize == 0 {
		batchSize, batchFrom = preset.BatchSize, fmt.Sprintf("the batch size of --method %s on --dataset %s", o.method, o.dataset)
	}
	if o.maxConc < batchSize {
		return usagef("--max-concurrent %d is less than %s, %d: a stream's batch could never fill; give --max-concurrent %d or more, or a smaller --batch-size",
			o.maxConc, batchFrom, batchSize, batchSize)
	}
	// A batch that does not fill goes after --max-wait: a request that
	// must be answered sooner never is (504), whatever its client does.
	if batchSize > 1 && o.timeout <= o.maxWait {
		return usagef("--timeout %v is not longer than --max-wait %v: a stream request whose batch does not fill (fewer than %s, %d, requests of its stream waiting at once, as from a client sending one at a time) would always time out (504) before its batch is stepped; give a --timeout longer than --max-wait, or a shorter --max-wait",
			o.timeout, o.maxWait, batchFrom, batchSize)
	}
	classes := splitList(o.labels)
	if o.flags.Changed("labels") {
		// Given, the labels are checked here, naming the flag, not by
		// serve.New, which would name its Config.
		switch len(classes) {
		case 0:
			return usagef("--labels %q: no label (leave the flag out for the default: the model's own classes, or CIFAR-10's)", o.labels)
		case 1:
			return usagef("--labels %q: 1 label; a classifier needs at least 2", o.labels)
		}
		// An empty entry is refused, as eval refuses one in --methods,
		// rather than dropped: "a,,b" is not the two labels meant.
		for i, l := range strings.Split(o.labels, ",") {
			if strings.TrimSpace(l) == "" {
				return usagef("--labels %q: entry %d is empty", o.labels, i+1)
			}
		}
		for i, l := range classes {
			if slices.Contains(classes[:i], l) {
				return usagef("--labels: %q is given twice", l)
			}
		}
	}
	// Likewise the templates given.
	for i, t := range o.templates {
		switch {
		case !strings.Contains(t, "{}"):
			return usagef("--template %q: no {} for the label (e.g. \"a photo of a {}.\")", t)
		case slices.Contains(o.templates[:i], t):
			return usagef("--template %q is given twice", t)
		}
	}
	b, err := o.model.open(kernel.FP32, o.stderr)
	if err != nil {
		return err
	}
	// Given, else the model's, else CIFAR-10's classes (with the built-in
	// model or --dataset cifar10); no templates leaves serve the preset's.
	var fallback clip.Labels
	if isBuiltin(o.model.model) || ds == "cifar10-c" {
		fallback.Classes = data.CIFAR10Classes
	}
	chosen := b.Model.ChooseLabels(clip.Labels{Classes: classes, Templates: o.templates}, fallback)
	if len(chosen.Classes) == 0 {
		return usagef("give --labels (CIFAR-10's classes are the default only with the built-in model or --dataset cifar10; a model of train has its own)")
	}
	classes, o.templates = chosen.Classes, chosen.Templates
	// Too few labels for the method would refuse every stream request
	// without labels of its own (400, blaming the client): refused here,
	// naming the flags, as serve.New would refuse its Config.
	if n, why := preset.MinClasses(); len(classes) < n {
		if why != "" {
			why = " (" + why + ")"
		}
		if o.flags.Changed("labels") {
			return usagef("--labels %q: %d labels, and --method %s needs at least %d%s: every stream request without labels of its own would be refused; give %d or more labels, or another --method",
				o.labels, len(classes), o.method, n, why, n)
		}
		return usagef("the model's own labels are %d (%s), and --method %s needs at least %d%s: every stream request without labels of its own would be refused; give --labels with %d or more, or another --method",
			len(classes), strings.Join(classes, ","), o.method, n, why, n)
	}
	version, err := modelIdentity(o.model.model) // as eval names it
	if err != nil {
		return err
	}
	tok, err := b.Tokenizer()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(o.stderr, nil))
	s, err := serve.New(serve.Config{
		Model: b.Model, Tokenizer: tok, ModelVersion: version,
		Dataset: ds, Method: o.method, BatchSize: o.batch, Labels: classes, Templates: o.templates,
		MaxWait: o.maxWait, MaxStreams: o.maxStreams, StateDir: o.stateDir, StateStore: o.stateStore, RecentAnswers: o.recent,
		MaxBodyBytes: o.maxBody, MaxPixels: o.maxPixels, MaxLabels: o.maxLabels, MaxConcurrent: o.maxConc,
		Timeout: o.timeout, Logger: logger, FrozenPrecision: prec.Precision,
		AuthKeysFile: o.authKeys, MetricsKeysFile: o.metricsKey, TLSCertFile: o.tlsCert, TLSKeyFile: o.tlsKey,
		KeyMaxInFlight: o.keyInFlight, KeyImagesPerSecond: o.keyRate, KeyBurst: o.keyBurst, Guard: o.guard,
		AdminKeysFile: o.adminKeys, AllowLostState: o.allowLost, Degraded: o.degraded,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	// SIGHUP reads the key files and the certificate again.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnHangup(ctx, hup, s.Reload)
	hs := &http.Server{
		TLSConfig:         s.TLSConfig(),
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       o.timeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          s.ErrorLog(),
	}
	scheme, access := "http", "no API keys: anyone who reaches the address may use every stream"
	if hs.TLSConfig != nil {
		scheme = "https"
	}
	if o.authKeys != "" {
		access = "API keys from " + o.authKeys
	}
	if o.guard.On() {
		access += "; collapse guard on"
	}
	fmt.Fprintf(o.stderr, "subtta serve: %s, %s with batches of %d (max wait %v), %d labels; %s; listening on %s://%s\n",
		version, o.method, s.BatchSize(), o.maxWait, len(classes), access, scheme, ln.Addr())
	inMemory := o.stateDir == "" && o.stateStore == ""
	if inMemory {
		fmt.Fprintf(o.stderr, "subtta serve: no --state-dir or --state-store: streams live in memory only, their adaptation lost when the server stops; beyond --max-streams (%d) new streams get 503\n", o.maxStreams)
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() {
		if hs.TLSConfig != nil {
			served <- hs.ServeTLS(ln, "", "")
			return
		}
		served <- hs.Serve(ln)
	}()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	if inMemory {
		n := s.Streams()
		fmt.Fprintf(o.stderr, "subtta serve: draining: stepping the waiting batches; the adaptation of every stream is dropped at exit (%s in memory; no --state-dir or --state-store to save them in)\n", nStreams(n))
	} else {
		fmt.Fprintln(o.stderr, "subtta serve: draining: stepping the waiting batches and saving every stream")
	}
	wait := o.shutdownTimeout
	if wait == 0 {
		wait = o.timeout + o.maxWait + 10*time.Second
	}
	dctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() { serr = s.Shutdown(dctx) })
	herr := hs.Shutdown(dctx)
	wg.Wait()
	if err := errors.Join(serr, herr); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(o.stderr, "subtta serve: stopped")
	return nil
}

// nStreams is "1 stream", "2 streams", "0 streams".
func nStreams(n int) string {
	if n == 1 {
		return "1 stream"
	}
	return fmt.Sprintf("%d streams", n)
}

// reloadOnHangup calls reload on every signal from hup until ctx ends;
// reload logs what it read and what failed (what failed keeps what it had).
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, reload func() error) {
	for {
		select {
		case <-hup:
			reload()
		case <-ctx.Done():
			return
		}
	}
}

// exposed says whether addr listens beyond this machine: on every
// interface (no host, 0.0.0.0, ::) or on an address that is not loopback.
func exposed(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, usagef("--addr %s: %v", addr, err)
	}
	if host == "" {
		return true, nil
	}
	if host == "localhost" {
		return false, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return !ip.IsLoopback(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false, fmt.Errorf("--addr %s: %w", addr, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return true, nil
		}
	}
	return false, nil
}

// loadtestOptions are the flags of loadtest.
type loadtestOptions struct {
	addr     string
	streams  int
	requests int
	conc     int
	duration time.Duration
	frozen   bool
	prefix   string
	shared   bool
	retries  int
	jsonOut  bool
	key      string
	cacert   string

	stdout, stderr io.Writer
}

// newLoadtestCmd is `subtta loadtest`.
func newLoadtestCmd(stdout, stderr io.Writer) *cobra.Command {
	const summary = "requests/s and latency of a subtta serve on this machine"
	o := &loadtestOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "loadtest",
		Short: summary,
		Long: summary + `

It prints the report (--json: as JSON), with the first error of each kind
(the status and the server's message, or why there was no answer), and
exits 1 when any request sent failed (after its retries), or when its
answers were not each given exactly once or could not be checked to be
(every stream's image count grown by its answers); requests not sent
before --duration are not failures.`,
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(args) },
	}
	f := c.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address of a subtta serve on this machine (loopback only)")
	f.IntVar(&o.streams, "streams", 4, "number of streams (with --frozen: of clients)")
	f.IntVar(&o.requests, "requests", 50, "requests per stream")
	f.IntVar(&o.conc, "concurrency", 8, "requests in flight per stream; a batch fills only up to it")
	f.DurationVar(&o.duration, "duration", 2*time.Minute, "time limit: no request is sent, nor sent again, after it (those in flight finish)")
	f.BoolVar(&o.frozen, "frozen", false, "requests without a stream: the frozen model answers")
	f.StringVar(&o.prefix, "prefix", loadtest.DefaultStreamPrefix, "stream ids are PREFIX0, PREFIX1, ... (not empty)")
	f.BoolVar(&o.shared, "shared", false, "other clients send to the same streams (another loadtest, through another server on the same state store): skip the check that each stream's image count grew by this test's answers, and print the answers by stream for the caller's own check")
	f.IntVar(&o.retries, "retries", loadtest.DefaultRetries, "times a request is sent again, with the same Idempotency-Key, after its connection failed or it got 429, 502, 503 or 504, waiting 100 ms doubling up to 2 s, within --duration (0: never)")
	f.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	f.StringVar(&o.key, "key", "", "API key to send (Authorization: Bearer); default $"+apiKeyEnv)
	f.StringVar(&o.cacert, "cacert", "", "PEM certificates to trust for an https:// --addr (a server's self-signed certificate)")
	return c
}

// run runs the command with the positional arguments args.
func (o *loadtestOptions) run(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	if o.retries < 0 {
		return usagef("--retries %d: want 0 or more", o.retries)
	}
	if o.retries == 0 {
		o.retries = -1 // LoadTest's "never"
	}
	if o.streams < 1 || o.requests < 1 || o.conc < 1 {
		return usagef("--streams, --requests and --concurrency must be positive")
	}
	if o.prefix == "" {
		return usagef(`--prefix "": want the start of the stream ids (leave the flag out for %s)`, loadtest.DefaultStreamPrefix)
	}
	if o.duration <= 0 {
		return usagef("--duration %v: want a positive duration", o.duration)
	}
	imgs, err := builtin.JPEGs(o.streams * o.requests)
	if err != nil {
		return err
	}
	base := o.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	if o.key == "" {
		o.key = os.Getenv(apiKeyEnv)
	}
	var tlsConfig *tls.Config
	if o.cacert != "" {
		pem, err := os.ReadFile(o.cacert)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--cacert %s: no PEM certificate in it", o.cacert)
		}
		tlsConfig = &tls.Config{RootCAs: pool}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := loadtest.Config{URL: base, Sources: o.streams, Requests: o.requests, Concurrency: o.conc,
		Duration: o.duration, Frozen: o.frozen, StreamPrefix: o.prefix, Shared: o.shared, Images: imgs, Retries: o.retries,
		Key: o.key, TLS: tlsConfig}.Run(ctx)
	if err != nil {
		return err
	}
	if o.jsonOut {
		if err := writeJSON(o.stdout, rep); err != nil {
			return err
		}
	} else {
		rep.Write(o.stdout)
	}
	if rep.ByStatus[http.StatusUnauthorized] > 0 {
		fmt.Fprintf(o.stderr, "loadtest: %d requests were refused with 401: give the server's API key with --key or $%s\n", rep.ByStatus[http.StatusUnauthorized], apiKeyEnv)
	}
	switch {
	case rep.Errors > 0:
		return fmt.Errorf("%d of %d requests sent failed (the report names the first error of each kind)", rep.Errors, rep.Sent)
	case len(rep.Problems) > 0:
		return errors.New("some requests were not answered exactly once")
	case rep.Unchecked != "":
		return errors.New("the streams' image counts could not be checked against their answers")
	case !rep.ExactlyOnce:
		return errors.New("no request was answered")
	}
	return nil
}
