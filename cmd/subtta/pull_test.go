package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestPullCommand fetches from a mirror (HF_ENDPOINT) that wants a token
// (HF_TOKEN) and drops the first connection mid-file.
func TestPullCommand(t *testing.T) {
	data := bytes.Repeat([]byte("weights."), 10000)
	dropped := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer hf_test" {
			http.Error(w, "gated", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/org/gated/resolve/main/model.safetensors" {
			http.NotFound(w, r)
			return
		}
		if !dropped {
			dropped = true
			w.Header().Set("Content-Length", "80000")
			w.Write(data[:30000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		http.ServeContent(w, r, "model.safetensors", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	cache := t.TempDir()
	var out, errb bytes.Buffer
	if st := run([]string{"pull", "--files", "model.safetensors", "--cache", cache, "org/gated"}, &out, &errb); st != 1 || !strings.Contains(errb.String(), "HF_TOKEN") {
		t.Errorf("without a token: status %d, stderr %q", st, errb.String())
	}
	t.Setenv("HF_TOKEN", "hf_test")
	out.Reset()
	errb.Reset()
	if st := run([]string{"pull", "--files", "model.safetensors", "--cache", cache, "org/gated"}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	want := filepath.Join(cache, "org", "gated", "model.safetensors")
	if got := strings.TrimSpace(out.String()); got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	if b, _ := os.ReadFile(want); !bytes.Equal(b, data) {
		t.Error("downloaded file differs")
	}
	if !strings.Contains(errb.String(), "retrying in") {
		t.Errorf("the retry is not reported: %q", errb.String())
	}
}

// TestPullOffline: with nothing to connect to, pull fails within 10 s,
// after its retries, with one line.
func TestPullOffline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("HF_ENDPOINT", "http://"+addr)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	var out, errb bytes.Buffer
	start := time.Now()
	st := run([]string{"pull", "--cache", t.TempDir(), "org/model"}, &out, &errb)
	d := time.Since(start)
	var last string
	if lines := strings.Split(strings.TrimSpace(errb.String()), "\n"); len(lines) > 0 {
		last = lines[len(lines)-1]
	}
	if st != 1 || d > 10*time.Second || !strings.HasPrefix(last, "subtta pull: ") || !strings.Contains(last, "gave up after") {
		t.Errorf("status %d after %v, stderr %q; want 1 within 10 s, ending in one line that gives up", st, d, errb.String())
	}
}

// TestPullInterrupted: SIGTERM mid-file stops pull with status 130, saying
// that what arrived is kept; the same command then resumes from it.
func TestPullInterrupted(t *testing.T) {
	data := bytes.Repeat([]byte("weights."), 10000)
	stall := make(chan struct{})
	var mu sync.Mutex
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/org/model/resolve/main/model.safetensors" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		ranges = append(ranges, r.Header.Get("Range"))
		first := len(ranges) == 1
		mu.Unlock()
		if first { // half the file, then nothing until the client leaves
			w.Header().Set("Content-Length", "80000")
			w.Write(data[:40000])
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-stall:
			}
			return
		}
		http.ServeContent(w, r, "model.safetensors", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	defer close(stall)
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	cache := t.TempDir()
	part := filepath.Join(cache, "org", "model", "model.safetensors.part")
	stop := signalWhen(t, syscall.SIGTERM, 10*time.Millisecond, func() bool {
		st, err := os.Stat(part)
		return err == nil && st.Size() >= 40000
	})
	defer stop()
	args := []string{"pull", "--files", "model.safetensors", "--cache", cache, "org/model"}
	var out, errb bytes.Buffer
	if st := run(args, &out, &errb); st != 130 || !strings.Contains(errb.String(), "interrupted: what arrived is kept") {
		t.Fatalf("status %d, stderr %q; want 130 and what is kept", st, errb.String())
	}
	out.Reset()
	errb.Reset()
	if st := run(args, &out, &errb); st != 0 {
		t.Fatalf("again: status %d: %s", st, errb.String())
	}
	if b, _ := os.ReadFile(filepath.Join(cache, "org", "model", "model.safetensors")); !bytes.Equal(b, data) {
		t.Error("downloaded file differs")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ranges) < 2 || !strings.HasPrefix(ranges[len(ranges)-1], "bytes=40000-") {
		t.Errorf("requests' ranges %q: want the last to resume at byte 40000", ranges)
	}
}
