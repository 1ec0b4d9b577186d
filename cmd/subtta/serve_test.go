package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/serve"
	"github.com/subtta/subtta/tta"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs serveMain until the returned stop is called, which
// returns serveMain's error.
func startServe(t *testing.T, args ...string) (addr string, stop func() error, log *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log = &syncBuffer{}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveMain(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), new(bytes.Buffer), log, func(a string) { ready <- a })
	}()
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v\n%s", err, log)
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { stop() })
	return addr, stop, log
}

// The serve command answers the load test's requests exactly once, drains
// on a signal (here its context) leaving every stream saved, and serves the
// saved streams again after a restart.
func TestServeCommand(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--batch-size", "2", "--max-wait", "100ms", "--state-dir", dir}
	addr, stop, log := startServe(t, args...)
	var out, errb bytes.Buffer
	if st := run([]string{"loadtest", "--addr", addr, "--streams", "2", "--requests", "4", "--concurrency", "2", "--prefix", "cam"}, &out, &errb); st != 0 {
		t.Fatalf("loadtest: status %d: %s%s", st, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "every request answered exactly once") || !strings.Contains(out.String(), "8 OK, 0 errors") {
		t.Errorf("loadtest output:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "by stream: cam0 4 OK, 0 not; cam1 4 OK, 0 not") {
		t.Errorf("loadtest output without answers by stream:\n%s", out.String())
	}
	// --shared leaves the image-count check to the caller, who has the
	// answers by stream.
	out.Reset()
	if st := run([]string{"loadtest", "--addr", addr, "--streams", "1", "--requests", "2", "--concurrency", "2", "--prefix", "cam", "--shared", "--json"}, &out, &errb); st != 0 {
		t.Fatalf("shared loadtest: status %d: %s", st, errb.String())
	}
	var shared struct {
		OKByStream map[string]int `json:"ok_by_stream"`
	}
	if err := json.Unmarshal(out.Bytes(), &shared); err != nil || shared.OKByStream["cam0"] != 2 {
		t.Errorf("shared loadtest JSON %s: %v", out.String(), err)
	}
	out.Reset()
	if st := run([]string{"loadtest", "--addr", addr, "--frozen", "--streams", "1", "--requests", "2", "--json"}, &out, &errb); st != 0 {
		t.Fatalf("frozen loadtest: status %d: %s", st, errb.String())
	}
	var rep struct {
		OK          int  `json:"ok"`
		ExactlyOnce bool `json:"exactly_once"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.OK != 2 || !rep.ExactlyOnce {
		t.Errorf("frozen loadtest JSON %s: %v", out.String(), err)
	}
	// Requests the server refuses fail the load test, with the server's
	// message.
	out.Reset()
	errb.Reset()
	if st := run([]string{"loadtest", "--addr", addr, "--streams", "1", "--requests", "2", "--prefix", "bad prefix"}, &out, &errb); st != 1 ||
		!strings.Contains(out.String(), `status 400 (2 requests), the first error: stream "bad prefix0": want 1 to 64 letters`) ||
		strings.Contains(out.String(), "exactly once") || !strings.Contains(errb.String(), "2 of 2 requests sent failed") {
		t.Errorf("loadtest with a bad prefix: status %d\n%s%s", st, out.String(), errb.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("drain: %v\n%s", err, log)
	}
	if !strings.Contains(log.String(), "stopped") {
		t.Errorf("serve log:\n%s", log)
	}
	for _, f := range []string{"cam0.stream", "cam1.stream"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("after the drain: %v", err)
		}
	}

	addr, _, _ = startServe(t, args...)
	resp, err := http.Get("http://" + addr + "/v1/streams/cam0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct{ Images int }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 || st.Images != 6 {
		t.Errorf("cam0 after a restart: status %d, %+v, %v", resp.StatusCode, st, err)
	}
}

func TestServeBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"serve", "--method", "nope"}, `unknown method "nope"`},
		{[]string{"serve", "--method", "dmn"}, "--method dmn sees 32 views of each image"},
		{[]string{"serve", "--state-store", "foo://x"}, `--state-store "foo://x": want a folder`},
		{[]string{"serve", "--precision", "fp16"}, "--precision fp16 is an arithmetic of the GPU"},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "--batch-size", "-1"}, "--batch-size -1: want 0 or more"},
		{[]string{"serve", "--max-streams", "0"}, "--max-streams 0: want 1 or more"},
		{[]string{"serve", "--timeout", "-1s"}, "--timeout -1s: want a positive duration"},
		{[]string{"serve", "--batch-size", "16", "--max-concurrent", "8"}, "--max-concurrent 8 is less than --batch-size, 16"},
		{[]string{"serve", "--max-concurrent", "100"}, "--max-concurrent 100 is less than the batch size of --method subtta-m on --dataset cifar10, 200"},
		{[]string{"loadtest", "--streams", "0"}, "must be positive"},
		// The store is not echoed: its URL may hold a password.
		{[]string{"serve", "--state-dir", "a", "--state-store", "redis://127.0.0.1:6379/0"}, "--state-dir a and --state-store (or --state-store-file): give one"},
		{[]string{"serve", "--state-store", "a", "--state-store-file", "f"}, "--state-store and --state-store-file: give one"},
		{[]string{"serve", "--state-store-file", "/nonexistent/store"}, "--state-store-file: open /nonexistent/store"},
		{[]string{"serve", "--degraded", "stale"}, "--degraded stale: want refuse or frozen"},
		{[]string{"serve", "--shutdown-timeout", "-1s"}, "--shutdown-timeout -1s"},
		{[]string{"serve", "--recent-answers", "-1"}, "--recent-answers -1: want 0 or more"},
		{[]string{"loadtest", "--retries", "-1"}, "--retries -1: want 0 or more"},
		{[]string{"serve", "--addr", "0.0.0.0:0"}, "--addr 0.0.0.0:0 listens beyond this machine, and there is no --auth-keys"},
		{[]string{"serve", "--addr", ":0"}, "give --insecure to serve without keys"},
		{[]string{"serve", "--addr", "[::]:0", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "there is no --auth-keys"},
		{[]string{"serve", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"serve", "--guard-max-class-share", "1.5"}, "--guard-max-class-share 1.5: want 0 (off) up to 1"},
		{[]string{"serve", "--key-images-per-second", "-2"}, "--key-images-per-second -2"},
		{[]string{"serve", "--guard-patience", "0"}, "--guard-patience 0: want 1 or more"},
		// Labels given are checked naming the flag; given empty, they
		// are an error, not the default.
		{[]string{"serve", "--labels", ""}, `--labels "": no label`},
		{[]string{"serve", "--labels", " , "}, `--labels " , ": no label`},
		{[]string{"serve", "--labels", "cat"}, `--labels "cat": 1 label; a classifier needs at least 2`},
		{[]string{"serve", "--labels", "a,b,a"}, `--labels: "a" is given twice`},
		{[]string{"serve", "--template", ""}, `--template "": no {} for the label`},
		{[]string{"serve", "--template", "a photo"}, `--template "a photo": no {} for the label`},
		{[]string{"serve", "--template", "a {}", "--template", "a {}"}, `--template "a {}" is given twice`},
		{[]string{"loadtest", "--prefix", ""}, `--prefix "": want the start of the stream ids`},
		{[]string{"loadtest", "--duration", "0s"}, "--duration 0s: want a positive duration"},
	} {
		var out, errb bytes.Buffer
		if got := run(tc.args, &out, &errb); got != 2 || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and %q", tc.args, got, errb.String(), tc.stderr)
		}
	}
	var out, errb bytes.Buffer
	if got := run([]string{"loadtest", "--addr", "192.0.2.1:8080", "--requests", "1"}, &out, &errb); got != 1 || !strings.Contains(errb.String(), "not a loopback address") {
		t.Errorf("loadtest elsewhere: %d %q", got, errb.String())
	}
}

// A load test of an address where nothing listens fails (status 1) at its
// time limit, not after every request's retries, naming the transport
// error, and claims nothing of exactly once.
func TestLoadtestNothingListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out, errb bytes.Buffer
	start := time.Now()
	st := run([]string{"loadtest", "--addr", addr, "--streams", "2", "--requests", "2", "--duration", "2s"}, &out, &errb)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v with --duration 2s", took)
	}
	if st != 1 || !strings.Contains(out.String(), "no answer (4 requests), the first error: ") || !strings.Contains(out.String(), "connection refused") ||
		strings.Contains(out.String(), "every request answered exactly once") || !strings.Contains(errb.String(), "4 of 4 requests sent failed") {
		t.Errorf("status %d\n%s%s", st, out.String(), errb.String())
	}
}

// Without keys, an address beyond this machine needs --insecure; with keys
// it needs nothing more.
func TestServeExposedAddress(t *testing.T) {
	_, stop, log := startServe(t, "--addr", "0.0.0.0:0", "--insecure")
	if !strings.Contains(log.String(), "no API keys") {
		t.Errorf("serve log:\n%s", log)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("a7c1f0e39b2d48e5a6f7c8d9e0f1a2b3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stop, _ = startServe(t, "--addr", "0.0.0.0:0", "--auth-keys", keys)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// serveStart runs serve with args on a free loopback port, stopping it at
// once if it starts, and returns whether it started and its error.
func serveStart(t *testing.T, args ...string) (started bool, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = serveMain(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), io.Discard, io.Discard, func(string) {
		started = true
		cancel()
	})
	return started, err
}

// Settings under which serve could not do what it is asked are refused at
// start as usage errors (exit status 2), naming the flags, and never with
// a password a store's URL holds: default labels too few for the method or
// with an empty entry, a --timeout that a lone stream request always
// exceeds, a method or a store that serve cannot serve, a precision of the
// GPU (serve has no --device). Their neighbours that work start.
func TestServeRefusesAtStart(t *testing.T) {
	storeFile := filepath.Join(t.TempDir(), "store")
	if err := os.WriteFile(storeFile, []byte("gopher://u:secret@x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args      []string
		env       string // $SUBTTA_STATE_STORE
		want, not string
	}{
		{args: []string{"--labels", "cat,dog"}, want: `--labels "cat,dog": 2 labels, and --method subtta-m needs at least 3 (its text subspace`},
		{args: []string{"--labels", "a,,b"}, want: `--labels "a,,b": entry 2 is empty`},
		{args: []string{"--labels", "a,b,c,"}, want: `--labels "a,b,c,": entry 4 is empty`},
		{args: []string{"--batch-size", "4", "--max-wait", "5s", "--timeout", "1s"}, want: "--timeout 1s is not longer than --max-wait 5s: a stream request whose batch does not fill (fewer than --batch-size, 4"},
		{args: []string{"--max-wait", "2m"}, want: "--timeout 1m0s is not longer than --max-wait 2m0s"},
		{args: []string{"--method", "dmn"}, want: "--method dmn sees 32 views of each image, which a request (one image) does not carry: serve one of source, tent,"},
		{args: []string{"--method", "nope"}, want: `--method nope: unknown method "nope" (want one of source, tent,`, not: "dmn"},
		{args: []string{"--state-store", "foo://x"}, want: `--state-store "foo://x": want a folder, or redis://host:port/db`},
		{args: []string{"--state-store", "redis://u:secret%zz@127.0.0.1/0"}, want: `--state-store "redis://…": invalid URL escape`, not: "secret"},
		{args: []string{"--state-store-file", storeFile}, want: "--state-store-file " + storeFile + `: its first line "gopher://u:xxxxx@x": want a folder`, not: "secret"},
		{env: "ftp://u:secret@x", want: `$SUBTTA_STATE_STORE "ftp://u:xxxxx@x": want a folder`, not: "secret"},
		{args: []string{"--precision", "fp16"}, want: "--precision fp16 is an arithmetic of the GPU, and this command runs on the CPU only: want fp32, bf16 or int8", not: "--device"},
		{args: []string{"--precision", "tf32"}, want: "--precision tf32 is an arithmetic of the GPU", not: "--device"},
		{args: []string{"--precision", "fp64"}, want: `--precision "fp64": want fp32, bf16 or int8`, not: "--device"},
		// These work.
		{args: []string{"--labels", "cat,dog", "--method", "tent"}},
		{args: []string{"--batch-size", "1", "--max-wait", "5s", "--timeout", "1s"}},
		{args: []string{"--batch-size", "4", "--max-wait", "1s", "--timeout", "2s"}},
	} {
		t.Run(strings.Join(tc.args, " ")+tc.env, func(t *testing.T) {
			t.Setenv(stateStoreEnv, tc.env)
			started, err := serveStart(t, tc.args...)
			if tc.want == "" {
				if !started {
					t.Fatalf("not started: %v", err)
				}
				return
			}
			var ue usageError
			if started || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) || tc.not != "" && strings.Contains(err.Error(), tc.not) {
				t.Errorf("started %v, %v; want a usage error saying %q, without %q", started, err, tc.want, tc.not)
			}
		})
	}
}

// serve --help lists the methods it serves, from the registry, and says
// what its --precision takes on the CPU, naming no --device; eval keeps
// the help of --precision with --device.
func TestServeHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if st := run([]string{"serve", "--help"}, &out, &errb); st != 0 {
		t.Fatalf("serve --help: %d %s", st, errb.String())
	}
	help := strings.Join(strings.Fields(out.String()), " ")
	if !strings.Contains(help, "adaptation method of streams: "+strings.Join(serve.Methods(), ", ")+" (") {
		t.Errorf("serve --help does not list %v:\n%s", serve.Methods(), out.String())
	}
	for _, m := range tta.Methods() {
		named := regexp.MustCompile(`(^|[^a-z0-9-])` + m + `([^a-z0-9-]|$)`).MatchString(help)
		if !slices.Contains(serve.Methods(), m) && named {
			t.Errorf("serve --help names %s, which serve refuses", m)
		}
	}
	if !strings.Contains(help, "frozen requests' passes") || !strings.Contains(help, "fp32, bf16 (AVX512_BF16") ||
		strings.Contains(help, "--device") || strings.Contains(help, "fp16") || strings.Contains(help, "tf32") {
		t.Errorf("serve --help's --precision:\n%s", out.String())
	}
	out.Reset()
	if st := run([]string{"eval", "--help"}, &out, &errb); st != 0 || !strings.Contains(strings.Join(strings.Fields(out.String()), " "), precisionHelp) {
		t.Errorf("eval --help: %d, without %q", st, precisionHelp)
	}
}

// Without a state store, serve says at start that streams live in memory
// only, and at the drain how many streams' adaptation it drops, rather
// than that it saves them.
func TestServeInMemorySaysSo(t *testing.T) {
	addr, stop, log := startServe(t, "--batch-size", "1")
	jpegs, err := builtin.JPEGs(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"cam1", "cam2"} {
		resp, err := http.Post("http://"+addr+"/v1/classify?stream="+id, "image/jpeg", bytes.NewReader(jpegs[0]))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %s: %d", id, resp.StatusCode)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	text := log.String()
	for _, want := range []string{
		"no --state-dir or --state-store: streams live in memory only, their adaptation lost when the server stops",
		"draining: stepping the waiting batches; the adaptation of every stream is dropped at exit (2 streams in memory;",
		"stopped",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("serve log lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "saving") {
		t.Errorf("serve log says it saves, without a store:\n%s", text)
	}
}
