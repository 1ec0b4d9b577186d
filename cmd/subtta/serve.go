package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/serve"
	"github.com/subtta/subtta/tta"
)

func runServe(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	return serveMain(ctx, args, stderr, nil)
}

// datasetAliases let --dataset name the clean set the -C benchmark is made
// from.
var datasetAliases = map[string]string{"cifar10": "cifar10-c", "cifar100": "cifar100-c", "imagenet": "imagenet-c"}

// serveMain runs the server until ctx ends, then drains it: the batches
// waiting are stepped, the requests in flight answered, every stream saved.
// ready, when not nil, is called with the address listened on.
func serveMain(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) error {
	fs := newFlags("serve", "", stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	model := fs.String("model", "", modelFlagHelp)
	modelConfig := fs.String("model-config", "", modelConfigHelp)
	arch := fs.String("arch", "", archHelp)
	vocab := fs.String("vocab", "", "CLIP vocabulary (see subtta tokenize -h)")
	labels := fs.String("labels", "", `comma-separated labels when a request gives none (default with the built-in model or --dataset cifar10: CIFAR-10's classes)`)
	var templates stringList
	fs.Var(&templates, "template", `prompt template when a request gives none, "{}" for the label (repeatable; default: the method's preset, "a photo of a {}.")`)
	dataset := fs.String("dataset", "cifar10", "whose preset hyperparameters streams adapt with: cifar10, cifar100 or imagenet (or "+strings.Join(tta.PresetDatasets, ", ")+")")
	method := fs.String("method", "subtta-m", "adaptation method of streams: "+strings.Join(tta.Methods(), ", "))
	batch := fs.Int("batch-size", 0, "images per adaptation step (0: the preset's, 200 on CIFAR)")
	maxWait := fs.Duration("max-wait", serve.DefaultMaxWait, "how long a stream's oldest request waits for its batch to fill")
	maxStreams := fs.Int("max-streams", serve.DefaultMaxStreams, "streams kept in memory; beyond, the least recently used is evicted to --state-dir")
	stateDir := fs.String("state-dir", "", "folder where streams are saved after every step and read back after an eviction or restart (none: streams live in memory only)")
	stateStore := fs.String("state-store", "", "where streams are saved, instead of --state-dir: a folder, or a Redis database redis://[user:password@]host:port/db that several servers share")
	recent := fs.Int("recent-answers", 0, fmt.Sprintf("answers to a stream's latest requests with an Idempotency-Key kept in its saved state, to answer such a request sent again without adapting twice (0: %d, or twice the batch size if more)", serve.DefaultRecentAnswers))
	maxBody := fs.Int64("max-body", serve.DefaultMaxBodyBytes, "largest request body, bytes")
	maxPixels := fs.Int("max-pixels", serve.DefaultMaxPixels, "largest image, width×height")
	maxLabels := fs.Int("max-labels", serve.DefaultMaxLabels, "most labels (or texts) in one request")
	maxConc := fs.Int("max-concurrent", serve.DefaultMaxConcurrent, "requests served at once; beyond, 429 with Retry-After (a stream's batch fills only with its requests waiting at once)")
	timeout := fs.Duration("timeout", serve.DefaultTimeout, "longest time a request may wait for its batch (504 beyond); a request whose batch is being stepped gets its answer")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (all inputs are flags)", fs.Arg(0))
	}
	ds := *dataset
	if a, ok := datasetAliases[ds]; ok {
		ds = a
	}
	preset, err := tta.Lookup(ds, *method)
	if err != nil {
		return usagef("--dataset %s --method %s: %v", *dataset, *method, err)
	}
	for _, l := range []struct {
		flag     string
		v, least int64
	}{
		{"--batch-size", int64(*batch), 0}, {"--max-streams", int64(*maxStreams), 1}, {"--max-body", *maxBody, 1},
		{"--max-pixels", int64(*maxPixels), 1}, {"--max-labels", int64(*maxLabels), 2}, {"--max-concurrent", int64(*maxConc), 1},
		{"--recent-answers", int64(*recent), 0},
	} {
		if l.v < l.least {
			return usagef("%s %d: want %d or more", l.flag, l.v, l.least)
		}
	}
	if *stateDir != "" && *stateStore != "" {
		return usagef("--state-dir %s and --state-store %s: give one", *stateDir, *stateStore)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--max-wait", *maxWait}, {"--timeout", *timeout}} {
		if d.v <= 0 {
			return usagef("%s %v: want a positive duration", d.flag, d.v)
		}
	}
	batchSize, batchFrom := *batch, "--batch-size"
	if batchSize == 0 {
		batchSize, batchFrom = preset.BatchSize, fmt.Sprintf("the batch size of --method %s on --dataset %s", *method, *dataset)
	}
	if *maxConc < batchSize {
		return usagef("--max-concurrent %d is less than %s, %d: a stream's batch could never fill; give --max-concurrent %d or more, or a smaller --batch-size",
			*maxConc, batchFrom, batchSize, batchSize)
	}
	classes := splitList(*labels)
	if len(classes) == 0 {
		if !isBuiltin(*model) && ds != "cifar10-c" {
			return usagef("give --labels (CIFAR-10's classes are the default only with the built-in model or --dataset cifar10)")
		}
		classes = data.CIFAR10Classes
	}
	b, err := openModel(*model, *modelConfig, *arch, *vocab, stderr)
	if err != nil {
		return err
	}
	version := "built-in, sha256 " + builtin.ModelSHA256()[:16] // as eval names it
	if !isBuiltin(*model) {
		fp, err := eval.ModelFingerprint(*model)
		if err != nil {
			return err
		}
		version = filepath.Base(filepath.Clean(*model)) + " " + fp
	}
	tok, err := b.Tokenizer()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := serve.New(serve.Config{
		Model: b.Model, Tokenizer: tok, ModelVersion: version,
		Dataset: ds, Method: *method, BatchSize: *batch, Labels: classes, Templates: templates,
		MaxWait: *maxWait, MaxStreams: *maxStreams, StateDir: *stateDir, StateStore: *stateStore, RecentAnswers: *recent,
		MaxBodyBytes: *maxBody, MaxPixels: *maxPixels, MaxLabels: *maxLabels, MaxConcurrent: *maxConc,
		Timeout: *timeout, Logger: logger,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       *timeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stderr, "subtta serve: %s, %s with batches of %d (max wait %v), %d labels; listening on http://%s\n",
		version, *method, s.BatchSize(), *maxWait, len(classes), ln.Addr())
	if ready != nil {
		ready(ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(stderr, "subtta serve: draining: stepping the waiting batches and saving every stream")
	dctx, cancel := context.WithTimeout(context.Background(), *timeout+*maxWait+10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() { serr = s.Shutdown(dctx) })
	herr := hs.Shutdown(dctx)
	wg.Wait()
	if err := errors.Join(serr, herr); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(stderr, "subtta serve: stopped")
	return nil
}

func runLoadtest(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("loadtest", "", stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address of a subtta serve on this machine (loopback only)")
	streams := fs.Int("streams", 4, "number of streams (with --frozen: of clients)")
	requests := fs.Int("requests", 50, "requests per stream")
	conc := fs.Int("concurrency", 8, "requests in flight per stream; a batch fills only up to it")
	duration := fs.Duration("duration", 2*time.Minute, "time limit: no request is sent after it (those in flight finish)")
	frozen := fs.Bool("frozen", false, "requests without a stream: the frozen model answers")
	prefix := fs.String("prefix", "loadtest-", "stream ids are PREFIX0, PREFIX1, ...")
	shared := fs.Bool("shared", false, "other clients send to the same streams (another loadtest, through another server on the same state store): skip the check that each stream's image count grew by this test's answers, and print the answers by stream for the caller's own check")
	retries := fs.Int("retries", serve.DefaultLoadTestRetries, "times a request is sent again, with the same Idempotency-Key, after its connection failed or it got 429, 502, 503 or 504 (0: never)")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *retries < 0 {
		return usagef("--retries %d: want 0 or more", *retries)
	}
	if *retries == 0 {
		*retries = -1 // LoadTest's "never"
	}
	if *streams < 1 || *requests < 1 || *conc < 1 {
		return usagef("--streams, --requests and --concurrency must be positive")
	}
	imgs, err := builtin.JPEGs(*streams * *requests)
	if err != nil {
		return err
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := serve.LoadTest{URL: base, Sources: *streams, Requests: *requests, Concurrency: *conc,
		Duration: *duration, Frozen: *frozen, StreamPrefix: *prefix, Shared: *shared, Images: imgs, Retries: *retries}.Run(ctx)
	if err != nil {
		return err
	}
	if *jsonOut {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		rep.Write(stdout)
	}
	if !rep.ExactlyOnce {
		return errors.New("some requests were not answered exactly once")
	}
	return nil
}
