package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/subtta/subtta/internal/servicetest"
)

// The tests of this file are the faults of the state store: damaged
// states, deleting them, failed saves, an unreachable store and a lost
// state.

// One byte changed near the end of a saved state, or 8 bytes of 0xFF in
// its body, make it damaged (errBadState): no such state is read as one.
func TestStateChecksum(t *testing.T) {
	sv := bigSaved("cam", stamp{Birth: 5, Generation: 9}, 12, 4096)
	good := mustEncode(t, sv)
	if _, err := decodeState(good, "cam", "cam.stream"); err != nil {
		t.Fatal(err)
	}
	_, headEnd, _ := encodeState(sv)
	for _, tc := range []struct {
		what   string
		damage func(b []byte)
	}{
		{"one byte near the end", func(b []byte) { b[len(b)-10] ^= 0x01 }},
		{"8 bytes of 0xFF in the body", func(b []byte) { copy(b[(headEnd+len(b))/2:], bytes.Repeat([]byte{0xff}, 8)) }},
		{"one byte in the head", func(b []byte) { b[headEnd-3] ^= 0x40 }},
	} {
		b := bytes.Clone(good)
		tc.damage(b)
		if _, err := decodeState(b, "cam", "cam.stream"); !errors.Is(err, errBadState) {
			t.Errorf("%s: %v; want errBadState", tc.what, err)
		}
	}
}

// A saved state damaged on disk is refused, never adapted on: the client
// gets a 500 naming the stream (not the server's path), the state is set
// aside as ID.stream.damaged, and the stream stays refused until it is
// deleted; then it starts afresh, the copy set aside kept for the
// operator.
func TestDamagedStateRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir = 1, dir
	_, tsA := startServer(t, cfg)
	img := images(t, 1)[0]
	path := filepath.Join(dir, "cam.stream")
	for _, damage := range []string{"one byte near the end", "8 bytes of 0xFF in the body"} {
		t.Run(damage, func(t *testing.T) {
			// Server A, holding the stream, saves a step (after the
			// previous case's DELETE, on a fresh stream).
			if _, r := classify(t, tsA, "?stream=cam", img); r.status != http.StatusOK {
				t.Fatalf("%d %s", r.status, r.body)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if damage == "one byte near the end" {
				b[len(b)-10] ^= 0x01
			} else {
				copy(b[len(b)/2:], bytes.Repeat([]byte{0xff}, 8))
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, tsB := startServer(t, cfg) // a server without the stream in memory
			for i := range 2 {
				_, r := classify(t, tsB, "?stream=cam", img)
				if r.status != http.StatusInternalServerError || !strings.Contains(string(r.body), "stream cam") || strings.Contains(string(r.body), dir) {
					t.Fatalf("request %d on the damaged state: %d %s; want 500 naming the stream, not the path", i, r.status, r.body)
				}
			}
			if _, err := os.Stat(path + ".damaged"); err != nil {
				t.Fatalf("the damaged state was not set aside: %v", err)
			}
			if r := do(t, http.MethodDelete, tsB.URL+"/v1/streams/cam", "", nil); r.status != http.StatusOK {
				t.Fatalf("DELETE: %d %s", r.status, r.body)
			}
			if aside, err := os.ReadFile(path + ".damaged"); err != nil || !bytes.Equal(aside, b) {
				t.Fatalf("after DELETE, the copy set aside: %v; want the damaged bytes kept", err)
			}
			out, r := classify(t, tsB, "?stream=cam", img)
			if r.status != http.StatusOK || out.Stream.Batch != 0 {
				t.Fatalf("after DELETE: %d %s; want a fresh stream", r.status, r.body)
			}
			if r := do(t, http.MethodDelete, tsB.URL+"/v1/streams/cam", "", nil); r.status != http.StatusOK {
				t.Fatalf("DELETE: %d %s", r.status, r.body)
			}
		})
	}
}

// With API keys, a stream whose saved head is damaged (its owner cannot be
// read) is deleted only by an admin key: any other key, its owner's too,
// gets 409 saying so, and the state stays. A state that cannot be read for
// another reason (an I/O error) is not deleted, not even by an admin. The
// admin's DELETE sets the damaged state aside, for the operator.
func TestDeleteDamagedNeedsAdmin(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	const keyAdmin = "d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f"
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir = 1, state
	cfg.AuthKeysFile = writeFile(t, dir, "keys", keyA+" a\n"+keyB+" b\n")
	withAdminKeys(&cfg, writeFile(t, dir, "admin", keyAdmin+" ops\n"))
	_, ts := startServer(t, cfg)
	a := keyed{t, ts.URL, keyA}
	img := images(t, 1)[0]
	for _, id := range []string{"cam", "cam2"} {
		if r := a.classify("?stream="+id, img); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	_, ts2 := startServer(t, cfg) // holds neither stream
	a, b, admin := keyed{t, ts2.URL, keyA}, keyed{t, ts2.URL, keyB}, keyed{t, ts2.URL, keyAdmin}
	path := filepath.Join(state, "cam.stream")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(stateMagic)+12] ^= 0x55 // within the head
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]keyed{"another key": b, "the owner's key": a} {
		if r := k.delete("/v1/streams/cam"); r.status != http.StatusConflict || !strings.Contains(string(r.body), "admin") {
			t.Errorf("DELETE of a damaged head by %s: %d %s; want 409 naming the admin key", name, r.status, r.body)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("after DELETE by %s: %v; want the state kept", name, err)
		}
	}
	// An I/O error proves nothing: cam2's state is a folder.
	path2 := filepath.Join(state, "cam2.stream")
	if err := os.Rename(path2, path2+".saved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path2, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]keyed{"another key": b, "the admin key": admin} {
		if r := k.delete("/v1/streams/cam2"); r.status == http.StatusOK {
			t.Errorf("DELETE by %s of a state that cannot be read: %d %s; want it refused", name, r.status, r.body)
		}
		if fi, err := os.Stat(path2); err != nil || !fi.IsDir() {
			t.Fatalf("after DELETE by %s: %v; want it kept", name, err)
		}
	}
	if r := admin.delete("/v1/streams/cam"); r.status != http.StatusOK {
		t.Fatalf("DELETE by the admin key: %d %s", r.status, r.body)
	}
	// The damaged state, which no request had set aside, is set aside
	// rather than written over: the operator can look at it.
	if aside, err := os.ReadFile(path + ".damaged"); err != nil || !bytes.Equal(aside, raw) {
		t.Fatalf("after the admin's DELETE, the copy set aside: %v; want the damaged bytes", err)
	}
	if r := a.classify("?stream=cam", img); r.status != 200 {
		t.Fatalf("after the admin's DELETE: %d %s", r.status, r.body)
	}
}

// flakyStore is a store whose saves fail while fail is set, as on a full
// disk.
type flakyStore struct {
	stateStore
	fail atomic.Bool
}

var errDiskFull = errors.New("no space left on device (test)")

func (f *flakyStore) Save(ctx context.Context, sv *savedStream, prev *stamp) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.stateStore.Save(ctx, sv, prev)
}

func failSaves(s *Server) *flakyStore {
	f := &flakyStore{stateStore: s.store}
	s.store = f
	return f
}

// scrape reads one metric (without labels) from /metrics.
func scrape(t *testing.T, url, name string) string {
	t.Helper()
	r := do(t, http.MethodGet, url+"/metrics", "", nil)
	for _, line := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// A stream whose save failed (a full disk) after its step is answered,
// counted in subtta_streams_unsaved, and saved in the background once the
// store takes saves again, without another request; a shutdown with the
// store still failing says which streams it could not save.
func TestUnsavedStreamSavedInBackground(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir, cfg.MaxStreams = 1, dir, 1
	withFastRetry(&cfg)
	s, ts := startServer(t, cfg)
	f := failSaves(s)
	f.fail.Store(true)
	imgs := images(t, 3)
	if _, r := classify(t, ts, "?stream=cam", imgs[0]); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if v := scrape(t, ts.URL, "subtta_streams_unsaved"); v != "1" {
		t.Errorf("subtta_streams_unsaved %q while the save fails; want 1", v)
	}
	f.fail.Store(false)
	// The next stream needs cam evicted, which needs it saved: by the
	// background retry, not by a request of cam.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, r := classify(t, ts, "?stream=other", imgs[1])
		if r.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new stream after the store took saves again: %d %s", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if sv, ok := readSaved(t, dir, "cam"); !ok || sv.Stats.Images != 1 {
		t.Fatalf("cam saved: %v, %+v; want its 1 image", ok, sv)
	}
	if v := scrape(t, ts.URL, "subtta_streams_unsaved"); v != "0" {
		t.Errorf("subtta_streams_unsaved %q after the save; want 0", v)
	}

	// A shutdown while saves fail gives up at its deadline, naming the
	// stream it could not save.
	f.fail.Store(true)
	if _, r := classify(t, ts, "?stream=other", imgs[2]); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := s.Shutdown(ctx)
	if !errors.Is(err, errUnsavedStreams) || !strings.Contains(fmt.Sprint(err), "other") {
		t.Fatalf("Shutdown with an unsaved stream: %v; want it named", err)
	}
}

// A shutdown saves a stream whose save failed, once the store takes saves
// again within its time: no answered adaptation is lost.
func TestShutdownSavesUnsaved(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir = 1, dir
	withSlowRetry(&cfg) // no background save before the shutdown
	s, ts := startServer(t, cfg)
	f := failSaves(s)
	f.fail.Store(true)
	for _, img := range images(t, 2) {
		if _, r := classify(t, ts, "?stream=cam", img); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	f.fail.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if sv, ok := readSaved(t, dir, "cam"); !ok || sv.Stats.Images != 2 {
		t.Fatalf("after the shutdown: saved %v, %+v; want the stream's 2 answered images", ok, sv)
	}
}

// A server that cannot reach its Redis cannot confirm it holds a
// stream's latest state: it does not step. Its requests get 503 with
// Retry-After, or with Degraded frozen the frozen model's answer marked
// adapted: false; once Redis is back, the stream goes on from its last
// save, and its saved images are its adapted answers.
func TestUnreachableStoreDoesNotStep(t *testing.T) {
	for _, frozen := range []bool{false, true} {
		t.Run(fmt.Sprintf("frozen=%v", frozen), func(t *testing.T) {
			dir := t.TempDir()
			url, addr, redis := redisIn(t, dir)
			cfg := testConfig(t)
			cfg.BatchSize, cfg.StateStore = 1, url
			if frozen {
				withDegradedFrozen(&cfg)
			}
			s, ts := startServer(t, cfg)
			imgs := images(t, 4)
			if out, r := classify(t, ts, "?stream=cam", imgs[0]); r.status != http.StatusOK || !adapted(out.Stream) {
				t.Fatalf("%d %s", r.status, r.body)
			}
			redis.Stop(10 * time.Second)
			out, r := classify(t, ts, "?stream=cam", imgs[1])
			switch {
			case !frozen && (r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == ""):
				t.Fatalf("with Redis down: %d %s; want 503 with Retry-After", r.status, r.body)
			case frozen && (r.status != http.StatusOK || adapted(out.Stream)):
				t.Fatalf("with Redis down and Degraded frozen: %d %s; want 200, adapted false", r.status, r.body)
			}
			redisAt(t, dir, addr)
			out, r = classify(t, ts, "?stream=cam", imgs[2])
			if r.status != http.StatusOK || out.Stream.Batch != 1 || !adapted(out.Stream) {
				t.Fatalf("with Redis back: %d %s; want batch 1, adapted", r.status, r.body)
			}
			sv, err := s.readState("cam")
			if err != nil || sv == nil || sv.Stats.Images != 2 {
				t.Fatalf("saved: %+v, %v; want the 2 adapted images", sv, err)
			}
		})
	}
}

// A stream whose state file is a directory is refused with a 500 that
// says so, every time (not a 503 to retry: it does not pass), by GET and
// DELETE too, whether the server held the stream or not; the directory
// stays. Once the operator removes it, the stream is served again.
func TestStateFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir = 1, dir
	_, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	// cam was never saved; cam2 is in memory, saved, when its file turns
	// into a directory.
	if err := os.Mkdir(filepath.Join(dir, "cam.stream"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, r := classify(t, ts, "?stream=cam2", img); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	path2 := filepath.Join(dir, "cam2.stream")
	if err := os.Rename(path2, path2+".saved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path2, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"cam", "cam2"} {
		for _, req := range []struct{ method, path string }{
			{"POST", "/v1/classify?stream=" + id}, {"POST", "/v1/classify?stream=" + id},
			{"GET", "/v1/streams/" + id}, {"DELETE", "/v1/streams/" + id},
		} {
			r := do(t, req.method, ts.URL+req.path, "image/jpeg", img)
			if r.status != http.StatusInternalServerError || r.header.Get("Retry-After") != "" ||
				!strings.Contains(string(r.body), "stream "+id+": its state file in the state store is a directory, not a regular file") || strings.Contains(string(r.body), dir) {
				t.Errorf("%s %s: %d (Retry-After %q) %s; want 500 saying the state file is a directory, without the path", req.method, req.path, r.status, r.header.Get("Retry-After"), r.body)
			}
		}
		if fi, err := os.Stat(filepath.Join(dir, id+".stream")); err != nil || !fi.IsDir() {
			t.Fatalf("stream %s: %v; want the directory left in place", id, err)
		}
	}
	if err := os.Remove(filepath.Join(dir, "cam.stream")); err != nil {
		t.Fatal(err)
	}
	if _, r := classify(t, ts, "?stream=cam", img); r.status != http.StatusOK {
		t.Fatalf("with the directory removed: %d %s", r.status, r.body)
	}
}

// A stream saved once whose state has gone from the store without a
// DELETE (a Redis restarted without persistence, a file removed) is an
// error naming the stream, not a new stream; a DELETE through the API, or
// AllowLostState, starts it afresh.
func TestLostStateIsAnError(t *testing.T) {
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow=%v", allow), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(t)
			cfg.BatchSize, cfg.StateDir = 1, dir
			if allow {
				withAllowLostState(&cfg)
			}
			_, ts := startServer(t, cfg)
			imgs := images(t, 3)
			for _, img := range imgs[:2] {
				if _, r := classify(t, ts, "?stream=cam", img); r.status != http.StatusOK {
					t.Fatalf("%d %s", r.status, r.body)
				}
			}
			if err := os.Remove(filepath.Join(dir, "cam.stream")); err != nil {
				t.Fatal(err)
			}
			out, r := classify(t, ts, "?stream=cam", imgs[2])
			if allow {
				if r.status != http.StatusOK || out.Stream.Batch != 0 {
					t.Fatalf("AllowLostState: %d %s; want the stream afresh", r.status, r.body)
				}
				return
			}
			if r.status != http.StatusInternalServerError || !strings.Contains(string(r.body), "stream cam") || strings.Contains(string(r.body), dir) {
				t.Fatalf("a lost state: %d %s; want 500 naming the stream", r.status, r.body)
			}
			if v := scrape(t, ts.URL, "subtta_state_lost_total"); v == "" || v == "0" {
				t.Errorf("subtta_state_lost_total %q", v)
			}
			if _, r := classify(t, ts, "?stream=cam", imgs[2]); r.status != http.StatusInternalServerError {
				t.Fatalf("a lost state, asked again: %d %s; want 500 again", r.status, r.body)
			}
			if r := do(t, http.MethodDelete, ts.URL+"/v1/streams/cam", "", nil); r.status != http.StatusOK {
				t.Fatalf("DELETE of a lost stream: %d %s", r.status, r.body)
			}
			if out, r := classify(t, ts, "?stream=cam", imgs[2]); r.status != http.StatusOK || out.Stream.Batch != 0 {
				t.Fatalf("after DELETE: %d %s; want the stream afresh", r.status, r.body)
			}
		})
	}
}

// redisIn starts a redis-server keeping its data in dir (AOF, fsync every
// second), and returns its URL and address.
func redisIn(t *testing.T, dir string) (url, addr string, p *servicetest.Process) {
	t.Helper()
	addr = servicetest.FreeAddr(t)
	p = redisAt(t, dir, addr)
	return "redis://" + addr + "/0", addr, p
}

// redisAt starts a redis-server on addr keeping its data in dir.
func redisAt(t *testing.T, dir, addr string) *servicetest.Process {
	t.Helper()
	return servicetest.RedisAt(t, addr, dir, "everysec")
}

// fakeFormat is an image format other packages could register (as
// golang.org/x/image registers TIFF, BMP and WebP): it decodes.
func init() {
	image.RegisterFormat("fakefmt", "FAKEFMT", func(r io.Reader) (image.Image, error) {
		return image.NewRGBA(image.Rect(0, 0, 8, 8)), nil
	}, func(r io.Reader) (image.Config, error) {
		return image.Config{ColorModel: color.RGBAModel, Width: 8, Height: 8}, nil
	})
}

// The formats accepted are those documented (PNG, JPEG, GIF): an image of
// another registered format is refused with 415, naming it.
func TestOnlyDocumentedFormats(t *testing.T) {
	_, ts := startServer(t, testConfig(t))
	r := do(t, http.MethodPost, ts.URL+"/v1/classify", "image/tiff", []byte("FAKEFMT and some bytes"))
	if r.status != http.StatusUnsupportedMediaType || !strings.Contains(string(r.body), "fakefmt") {
		t.Fatalf("an image of another format: %d %s; want 415 naming it", r.status, r.body)
	}
}

// A failed TLS handshake, which anyone who reaches the port can cause, is
// logged at DEBUG and counted; another net/http error at WARN.
func TestTLSHandshakeErrorsQuiet(t *testing.T) {
	var buf lockedBuffer
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, ts := startServer(t, cfg)
	l := s.ErrorLog()
	l.Print("http: TLS handshake error from 192.0.2.1:5555: EOF")
	l.Print("http: Accept error: too many open files")
	out := buf.String()
	if !strings.Contains(out, "level=DEBUG msg=\"serve: http: TLS handshake error") || !strings.Contains(out, "level=WARN msg=\"serve: http: Accept error") {
		t.Errorf("log:\n%s\nwant the handshake at DEBUG, the other at WARN", out)
	}
	if v := scrape(t, ts.URL, "subtta_tls_handshake_errors_total"); v != "1" {
		t.Errorf("subtta_tls_handshake_errors_total %q; want 1", v)
	}
}

// A tombstone saved where a store lost the state (a DELETE of a lost
// stream) lets a new stream be saved over it, in every store.
func TestTombstoneSavedThenNewStream(t *testing.T) {
	for _, tc := range stores {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := tc.open(t)
			if err := s.Save(ctx, tombstone("cam", stamp{Birth: 4, Generation: 7}, ""), nil); err != nil {
				t.Fatal(err)
			}
			if h, err := s.Head(ctx, "cam"); err != nil || h == nil || !h.Deleted {
				t.Fatalf("Head: %+v, %v; want the tombstone", h, err)
			}
			if err := s.Save(ctx, saved("cam", stamp{Birth: 9, Generation: 1}, 1), nil); err != nil {
				t.Fatalf("a new stream over the tombstone: %v", err)
			}
		})
	}
}
