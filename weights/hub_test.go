package weights

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// hubServer imitates the Hub on loopback: plain files with their git ETag,
// LFS files redirected to a "CDN" path with the SHA-256 in X-Linked-Etag,
// a file whose stated SHA-256 is wrong, and a file whose first response is
// cut short. Ranges are served (http.ServeContent).
type hubServer struct {
	*httptest.Server
	mu       sync.Mutex
	files    map[string][]byte
	requests []string // "path range"
	cutOnce  bool
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func newHubServer(t *testing.T) *hubServer {
	h := &hubServer{files: map[string][]byte{
		"config.json":       []byte(`{"model_type": "clip"}`),
		"model.safetensors": bytes.Repeat([]byte("weights!"), 40000),
		"bad.bin":           []byte("these bytes do not hash to the stated sum"),
		"lfsbad.bin":        []byte("an LFS file whose redirect states another sum"),
		"cut.bin":           bytes.Repeat([]byte{1, 2, 3, 4, 5}, 30000),
		"sub/dir/file.txt":  []byte("nested"),
	}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.requests = append(h.requests, r.URL.Path+" "+r.Header.Get("Range"))
		h.mu.Unlock()
		if name, ok := strings.CutPrefix(r.URL.Path, "/cdn/"); ok {
			http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(h.files[name]))
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/org/tiny/resolve/main/")
		data, found := h.files[name]
		if !ok || !found {
			http.NotFound(w, r)
			return
		}
		switch name {
		case "model.safetensors": // LFS: redirect carrying the checksum
			w.Header().Set("X-Linked-Etag", `"`+sha(data)+`"`)
			w.Header().Set("X-Linked-Size", "320000")
			http.Redirect(w, r, "/cdn/"+name, http.StatusFound)
			return
		case "lfsbad.bin":
			w.Header().Set("X-Linked-Etag", `"`+sha([]byte("other"))+`"`)
			http.Redirect(w, r, "/cdn/"+name, http.StatusFound)
			return
		case "bad.bin":
			w.Header().Set("ETag", `"`+sha([]byte("something else"))+`"`)
		case "cut.bin":
			w.Header().Set("ETag", `"`+sha(data)+`"`)
			h.mu.Lock()
			cut := !h.cutOnce
			h.cutOnce = true
			h.mu.Unlock()
			if cut && r.Header.Get("Range") == "" {
				// Promise the whole file, send a third, drop the connection.
				w.Header().Set("Content-Length", "150000")
				w.WriteHeader(http.StatusOK)
				w.Write(data[:50000])
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}
		default: // a small git file: the ETag is a git blob id, not a sha256
			w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef01234567"`)
		}
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hubServer) log() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.requests...)
}

func TestPull(t *testing.T) {
	srv := newHubServer(t)
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client()}
	cache := t.TempDir()
	ctx := context.Background()
	var last Progress
	calls := 0
	progress := func(p Progress) { last = p; calls++ }

	files := []RemoteFile{{Name: "config.json"}, {Name: "model.safetensors"}, {Name: "sub/dir/file.txt", SHA256: sha(srv.files["sub/dir/file.txt"])}}
	paths, err := hub.Pull(ctx, "org/tiny", files, cache, progress)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, srv.files[files[i].Name]) {
			t.Errorf("%s: content differs (%v)", p, err)
		}
		if want := filepath.Join(cache, "org", "tiny", filepath.FromSlash(files[i].Name)); p != want {
			t.Errorf("path %s, want %s", p, want)
		}
	}
	if calls < 3 || last.Done != last.Total || last.Total != int64(len(srv.files["sub/dir/file.txt"])) {
		t.Errorf("progress: %d calls, last %+v", calls, last)
	}
	// Everything is cached now: a second pull makes no request.
	n := len(srv.log())
	if _, err := hub.Pull(ctx, "org/tiny", files, cache, progress); err != nil {
		t.Fatal(err)
	}
	if got := len(srv.log()); got != n || !last.Skipped {
		t.Errorf("second pull made %d requests (last progress %+v)", got-n, last)
	}
	// A corrupted cached file with a known checksum is fetched again.
	os.WriteFile(paths[2], []byte("tampered"), 0o644)
	if _, err := hub.Pull(ctx, "org/tiny", files[2:], cache, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(paths[2]); !bytes.Equal(b, srv.files["sub/dir/file.txt"]) {
		t.Error("tampered cache file was not replaced")
	}
}

func TestPullChecksum(t *testing.T) {
	srv := newHubServer(t)
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client()}
	cache := t.TempDir()
	for _, f := range []RemoteFile{
		{Name: "bad.bin"},    // the server's ETag is wrong
		{Name: "lfsbad.bin"}, // the X-Linked-Etag on the redirect is wrong
		{Name: "config.json", SHA256: sha([]byte("not the config"))}, // the caller's is
	} {
		_, err := hub.Pull(context.Background(), "org/tiny", []RemoteFile{f}, cache, nil)
		if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), f.Name) {
			t.Errorf("%s: error %v, want a checksum error naming the file", f.Name, err)
		}
		dst := filepath.Join(cache, "org", "tiny", f.Name)
		for _, p := range []string{dst, dst + ".part"} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s left behind after a checksum failure", p)
			}
		}
	}
}

func TestPullResume(t *testing.T) {
	srv := newHubServer(t)
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client()}
	cache := t.TempDir()
	dst := filepath.Join(cache, "org", "tiny", "cut.bin")
	_, err := hub.Pull(context.Background(), "org/tiny", []RemoteFile{{Name: "cut.bin"}}, cache, nil)
	if err == nil {
		t.Fatal("truncated download succeeded")
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("a truncated file reached the cache")
	}
	st, err := os.Stat(dst + ".part")
	if err != nil || st.Size() == 0 || st.Size() >= int64(len(srv.files["cut.bin"])) {
		t.Fatalf("partial file: %v, %v", st, err)
	}
	// The next pull resumes where the first stopped, and the whole file's
	// SHA-256 (from the ETag) is checked.
	var first Progress
	progress := func(p Progress) {
		if first.File == "" {
			first = p
		}
	}
	if _, err := hub.Pull(context.Background(), "org/tiny", []RemoteFile{{Name: "cut.bin"}}, cache, progress); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, srv.files["cut.bin"]) {
		t.Error("resumed file differs")
	}
	log := srv.log()
	if want := "/org/tiny/resolve/main/cut.bin bytes=" + strconv.FormatInt(st.Size(), 10) + "-"; log[len(log)-1] != want {
		t.Errorf("last request %q, want %q", log[len(log)-1], want)
	}
	if first.Done != st.Size() {
		t.Errorf("progress started at %d, want %d", first.Done, st.Size())
	}
}

func TestPullRejects(t *testing.T) {
	srv := newHubServer(t)
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client()}
	cache := t.TempDir()
	for _, c := range []struct{ repo, file string }{
		{"org/tiny", "../escape"}, {"org/tiny", "/abs"}, {"../org", "x"}, {"org/tiny", "a//b"}, {"a/b/c", "x"},
	} {
		if _, err := hub.Pull(context.Background(), c.repo, []RemoteFile{{Name: c.file}}, cache, nil); err == nil {
			t.Errorf("%s %s accepted", c.repo, c.file)
		}
	}
	_, err := hub.Pull(context.Background(), "org/tiny", []RemoteFile{{Name: "missing.bin"}}, cache, nil)
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "missing.bin") {
		t.Errorf("missing file: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := hub.Pull(ctx, "org/tiny", []RemoteFile{{Name: "config.json"}}, cache, nil); err == nil {
		t.Error("cancelled context: no error")
	}
}
