package weights

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
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
	// One try: the .part is left for the next Pull.
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client(), Retry: Retry{Tries: 1}}
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

// TestCheckRepoID: the Hub's repository names pass, names it would not
// have are refused before any request, saying what is wrong.
func TestCheckRepoID(t *testing.T) {
	for _, tc := range []struct{ repo, want string }{
		{"openai/clip-vit-base-patch32", ""},
		{"laion/CLIP-ViT-B-32-laion2B-s34B-b79K", ""},
		{"timm/vit_base_patch16_clip_224.openai", ""},
		{"gpt2", ""},
		{"not a repo!!", `holds ' '`},
		{"org/na$me", `holds '$'`},
		{"a/b/c", "NAME or OWNER/NAME"},
		{"/name", "NAME or OWNER/NAME"},
		{"org/", "NAME or OWNER/NAME"},
		{"", "NAME or OWNER/NAME"},
		{"org/a--b", `"--" or ".."`},
		{"../org", `"--" or ".."`},
		{"org/-name", "starts or ends"},
		{"org/name.", "starts or ends"},
		{"org/" + strings.Repeat("x", 97), "longer than 96"},
	} {
		err := checkRepoID(tc.repo)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkRepoID(%q) = %v, want %q", tc.repo, err, tc.want)
		}
	}
	// Pull refuses one with no request and nothing in the cache.
	srv := newHubServer(t)
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client()}
	cache := t.TempDir()
	if _, err := hub.Pull(context.Background(), "not a repo!!", []RemoteFile{{Name: "config.json"}}, cache, nil); err == nil || !strings.Contains(err.Error(), "bad repository name") {
		t.Errorf("Pull: %v, want a bad repository name", err)
	}
	if left, _ := os.ReadDir(cache); len(left) != 0 {
		t.Errorf("the cache holds %v after a refused name", left)
	}
}

// TestPullBadBaseURL: an address no request could reach ($HF_ENDPOINT
// mistyped) is refused before any request, naming it, not retried.
func TestPullBadBaseURL(t *testing.T) {
	for _, base := range []string{"not-a-url", "ftp://mirror.example/", "https://", "://x"} {
		hub := &Hub{BaseURL: base, Retry: fastRetry}
		_, err := hub.Pull(context.Background(), "org/tiny", []RemoteFile{{Name: "config.json"}}, t.TempDir(), nil)
		if !errors.Is(err, ErrHubURL) || !strings.Contains(err.Error(), "HF_ENDPOINT") {
			t.Errorf("BaseURL %q: %v, want ErrHubURL naming HF_ENDPOINT", base, err)
		}
	}
}

// fastRetry retries at once, for tests.
var fastRetry = Retry{Initial: time.Millisecond, Max: 2 * time.Millisecond}

// flakyServer serves one file, answering the first requests as a bad
// network would: drops the connection after some bytes (each time from
// where the Range asks), answers 429 with a Retry-After or 503, and
// requires a bearer token.
type flakyServer struct {
	*httptest.Server
	mu       sync.Mutex
	data     []byte
	token    string
	answers  []string // what the next requests get: "drop", "429", "503"; then the file
	requests []string // "Range Authorization"
}

func newFlakyServer(t *testing.T, token string, answers ...string) *flakyServer {
	f := &flakyServer{data: bytes.Repeat([]byte("0123456789abcdef"), 20000), token: token, answers: answers}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Header.Get("Range")+" "+r.Header.Get("Authorization"))
		answer := ""
		if len(f.answers) > 0 {
			answer, f.answers = f.answers[0], f.answers[1:]
		}
		f.mu.Unlock()
		if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
			http.Error(w, "gated", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/org/gated/resolve/main/model.safetensors" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("ETag", `"`+sha(f.data)+`"`)
		switch answer {
		case "429":
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		case "503":
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		case "drop": // promise the rest, send 40,000 bytes of it, hang up
			start := int64(0)
			if r.Header.Get("Range") != "" {
				start, _ = rangeStart("bytes " + strings.TrimPrefix(r.Header.Get("Range"), "bytes="))
				w.Header().Set("Content-Range", "bytes "+strconv.FormatInt(start, 10)+"-"+strconv.Itoa(len(f.data)-1)+"/"+strconv.Itoa(len(f.data)))
				w.Header().Set("Content-Length", strconv.FormatInt(int64(len(f.data))-start, 10))
				w.WriteHeader(http.StatusPartialContent)
			} else {
				w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
				w.WriteHeader(http.StatusOK)
			}
			w.Write(f.data[start : start+40000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		http.ServeContent(w, r, "model.safetensors", time.Time{}, bytes.NewReader(f.data))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *flakyServer) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

var gatedFile = []RemoteFile{{Name: "model.safetensors"}}

// TestPullSurvivesBadNetwork: connections dropped mid-file, a 429 with a
// Retry-After and a 503, all within one Pull, which resumes from where
// each drop left the file and verifies the whole.
func TestPullSurvivesBadNetwork(t *testing.T) {
	srv := newFlakyServer(t, "", "drop", "drop", "503", "drop", "429", "drop")
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client(), Retry: Retry{Tries: 3, Initial: time.Millisecond, Max: 2 * time.Millisecond}}
	start := time.Now()
	paths, err := hub.Pull(context.Background(), "org/gated", gatedFile, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(paths[0]); !bytes.Equal(b, srv.data) {
		t.Error("downloaded file differs")
	}
	want := []string{" ", "bytes=40000- ", "bytes=80000- ", "bytes=80000- ", "bytes=120000- ", "bytes=120000- ", "bytes=160000- "}
	if got := srv.log(); !slices.Equal(got, want) {
		t.Errorf("requests (Range, Authorization)\n%q\nwant\n%q", got, want)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("took %v: the 429's Retry-After of 1 s was not honoured", d)
	}
}

// TestPullGivesUp: an answer that stays 503 fails after Retry.Tries tries,
// saying so; a 404 is not retried.
func TestPullGivesUp(t *testing.T) {
	srv := newFlakyServer(t, "", "503", "503", "503", "503", "503")
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client(), Retry: Retry{Tries: 3, Initial: time.Millisecond, Max: 2 * time.Millisecond}}
	_, err := hub.Pull(context.Background(), "org/gated", gatedFile, t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "gave up after 3 tries") || len(srv.log()) != 3 {
		t.Errorf("error %v after %d requests; want a 503 and 3 tries", err, len(srv.log()))
	}
	n := len(srv.log())
	_, err = hub.Pull(context.Background(), "org/gated", []RemoteFile{{Name: "missing.bin"}}, t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "404") || len(srv.log()) != n+1 {
		t.Errorf("404: error %v after %d requests, want 1", err, len(srv.log())-n)
	}
}

// TestPullToken: a gated repository answers 401 without the token, at
// once and saying HF_TOKEN; with it (here from HF_TOKEN, through
// HubFromEnv, as the command line gets it) the file comes.
func TestPullToken(t *testing.T) {
	srv := newFlakyServer(t, "hf_secret")
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client(), Retry: fastRetry}
	_, err := hub.Pull(context.Background(), "org/gated", gatedFile, t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "HF_TOKEN") || len(srv.log()) != 1 {
		t.Errorf("no token: error %v after %d requests", err, len(srv.log()))
	}
	t.Setenv("HF_TOKEN", "hf_secret")
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	env := HubFromEnv()
	if env.BaseURL != srv.URL || env.Token != "hf_secret" {
		t.Fatalf("HubFromEnv: %+v", env)
	}
	env.Client = srv.Client()
	paths, err := env.Pull(context.Background(), "org/gated", gatedFile, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(paths[0]); !bytes.Equal(b, srv.data) {
		t.Error("downloaded file differs")
	}
	if log := srv.log(); log[len(log)-1] != " Bearer hf_secret" {
		t.Errorf("last request %q", log[len(log)-1])
	}
}

// TestPullUsesHFCache: a file Python's huggingface_hub downloaded (a
// snapshot entry linking to a blob, the branch's commit in refs/main) is
// used in place: no request, its path returned.
func TestPullUsesHFCache(t *testing.T) {
	srv := newFlakyServer(t, "")
	hf := t.TempDir()
	repo := filepath.Join(hf, "models--org--gated")
	const commit = "0123456789abcdef0123456789abcdef01234567"
	blob := filepath.Join(repo, "blobs", sha(srv.data))
	snap := filepath.Join(repo, "snapshots", commit, "model.safetensors")
	for _, d := range []string{filepath.Dir(blob), filepath.Dir(snap), filepath.Join(repo, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(blob, srv.data, 0o644)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644)
	if err := os.Symlink(filepath.Join("..", "..", "blobs", sha(srv.data)), snap); err != nil {
		t.Fatal(err)
	}
	hub := &Hub{BaseURL: srv.URL, Client: srv.Client(), HFCache: hf}
	for _, f := range []RemoteFile{{Name: "model.safetensors"}, {Name: "model.safetensors", SHA256: sha(srv.data)}} {
		paths, err := hub.Pull(context.Background(), "org/gated", []RemoteFile{f}, t.TempDir(), nil)
		if err != nil || paths[0] != snap {
			t.Errorf("%+v: %q, %v; want %s", f, paths, err, snap)
		}
	}
	if n := len(srv.log()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
	// A file the snapshot lacks, or another revision, is downloaded.
	hub.Revision = "v2"
	if _, err := hub.Pull(context.Background(), "org/gated", gatedFile, t.TempDir(), nil); err == nil || len(srv.log()) != 1 {
		t.Errorf("revision v2: %v after %d requests, want a download tried", err, len(srv.log()))
	}
}

// TestPullNoNetwork: with nothing listening, Pull gives up within 10 s
// under DefaultRetry, with a one-line error, after retrying: at least four
// tries, so at least the three shortest waits between them (0.5 s, 1 s and
// 2 s less the backoff's 50% jitter: 1.75 s). It may stop before the fifth
// try when the next wait would run past the 8 s stall limit.
func TestPullNoNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // now nothing listens there
	start := time.Now()
	_, err = (&Hub{BaseURL: "http://" + addr}).Pull(context.Background(), "org/gated", gatedFile, t.TempDir(), nil)
	d := time.Since(start)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "gave up after") || d > 10*time.Second || d < 1750*time.Millisecond {
		t.Errorf("after %v: %v; want one line giving up after retries, in 1.75 to 10 s", d, err)
	}
	var tries int
	if err != nil {
		fmt.Sscanf(err.Error()[strings.LastIndex(err.Error(), "gave up after"):], "gave up after %d tries", &tries)
	}
	if tries < 4 {
		t.Errorf("%v: want at least 4 tries", err)
	}
}
