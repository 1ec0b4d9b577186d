package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
