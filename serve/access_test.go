package serve

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta"
)

// Keys of the tests: random-looking secrets of 32 characters.
const (
	keyA = "a7c1f0e39b2d48e5a6f7c8d9e0f1a2b3"
	keyB = "b8d2e1f4ac3e59f6b7a8d9e0f1a2b3c4"
	keyM = "m9e3f2a5bd4f6a07c8b9e0f1a2b3c4d5"
)

func digestOf(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// writeFile writes text to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// doKey is do with an Authorization header (none when auth is "").
func doKey(t *testing.T, method, url, ctype string, body []byte, auth string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// keyed sends requests with one key (or none).
type keyed struct {
	t   *testing.T
	url string
	key string
}

func (k keyed) auth() string {
	if k.key == "" {
		return ""
	}
	return "Bearer " + k.key
}

func (k keyed) classify(query string, img []byte) reply {
	return doKey(k.t, http.MethodPost, k.url+"/v1/classify"+query, "image/jpeg", img, k.auth())
}

func (k keyed) get(path string) reply {
	return doKey(k.t, http.MethodGet, k.url+path, "", nil, k.auth())
}

func (k keyed) delete(path string) reply {
	return doKey(k.t, http.MethodDelete, k.url+path, "", nil, k.auth())
}

func (k keyed) status(id string) (StreamStatus, int) {
	r := k.get("/v1/streams/" + id)
	var st StreamStatus
	if r.status == http.StatusOK {
		r.decode(k.t, &st)
	}
	return st, r.status
}

// A request without a key the server holds gets 401 with WWW-Authenticate
// on every endpoint but /healthz; a key listed as itself or by its digest
// is accepted.
func TestAPIKeys(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.AuthKeysFile = writeFile(t, dir, "keys", "# clients\n"+keyA+" camera-a\n\n  sha256:"+digestOf(keyB)+"\tcamera b  \n")
	_, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	classifyURL := ts.URL + "/v1/classify"
	for _, tc := range []struct {
		name, method, url, auth string
		status                  int
		challenge               string
	}{
		{"no key", http.MethodPost, classifyURL, "", 401, `Bearer realm="subtta"`},
		{"wrong key", http.MethodPost, classifyURL, "Bearer wrong-key-0123456789abcdef", 401, `Bearer realm="subtta", error="invalid_token"`},
		{"empty bearer", http.MethodPost, classifyURL, "Bearer ", 401, `Bearer realm="subtta", error="invalid_token"`},
		{"basic scheme", http.MethodPost, classifyURL, "Basic " + keyA, 401, `Bearer realm="subtta", error="invalid_token"`},
		{"a key's prefix", http.MethodPost, classifyURL, "Bearer " + keyA[:20], 401, `Bearer realm="subtta", error="invalid_token"`},
		{"the digest as a key", http.MethodPost, classifyURL, "Bearer " + digestOf(keyB), 401, `Bearer realm="subtta", error="invalid_token"`},
		{"key", http.MethodPost, classifyURL, "Bearer " + keyA, 200, ""},
		{"key by digest, scheme in lower case", http.MethodPost, classifyURL, "bearer " + keyB, 200, ""},
		{"embed without key", http.MethodPost, ts.URL + "/v1/embed", "", 401, `Bearer realm="subtta"`},
		{"stream GET without key", http.MethodGet, ts.URL + "/v1/streams/cam", "", 401, `Bearer realm="subtta"`},
		{"stream DELETE without key", http.MethodDelete, ts.URL + "/v1/streams/cam", "", 401, `Bearer realm="subtta"`},
		{"unknown path without key", http.MethodGet, ts.URL + "/nope", "", 401, `Bearer realm="subtta"`},
		{"metrics without key", http.MethodGet, ts.URL + "/metrics", "", 401, `Bearer realm="subtta"`},
		{"metrics with a client key", http.MethodGet, ts.URL + "/metrics", "Bearer " + keyA, 200, ""},
		{"healthz without key", http.MethodGet, ts.URL + "/healthz", "", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := doKey(t, tc.method, tc.url, "image/jpeg", img, tc.auth)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if got := r.header.Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if tc.status == 401 {
				checkError(t, r, 401)
				if k := strings.TrimPrefix(strings.TrimPrefix(tc.auth, "Bearer "), "Basic "); k != "" && bytes.Contains(r.body, []byte(k)) {
					t.Errorf("the error echoes the key: %s", r.body)
				}
			}
		})
	}
}

// With a metrics key file, /metrics takes only its keys, and they are not
// client keys.
func TestMetricsKey(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.AuthKeysFile = writeFile(t, dir, "keys", keyA+"\n")
	cfg.MetricsKeysFile = writeFile(t, dir, "metrics-keys", keyM+" prometheus\n")
	_, ts := startServer(t, cfg)
	a, m := keyed{t, ts.URL, keyA}, keyed{t, ts.URL, keyM}
	if r := m.get("/metrics"); r.status != 200 || !strings.Contains(string(r.body), "subtta_auth_failures_total") {
		t.Errorf("metrics key: %d", r.status)
	}
	if r := a.get("/metrics"); r.status != 401 {
		t.Errorf("client key on /metrics: %d", r.status)
	}
	if r := m.classify("", images(t, 1)[0]); r.status != 401 {
		t.Errorf("metrics key on /v1/classify: %d", r.status)
	}
	// Without keys of its own /metrics is open when clients need none.
	cfg = testConfig(t)
	cfg.MetricsKeysFile = writeFile(t, dir, "metrics-keys", keyM+"\n")
	_, ts = startServer(t, cfg)
	if r := (keyed{t, ts.URL, ""}).get("/metrics"); r.status != 401 {
		t.Errorf("metrics without a key: %d", r.status)
	}
	if r := (keyed{t, ts.URL, ""}).classify("", images(t, 1)[0]); r.status != 200 {
		t.Errorf("classify without keys: %d", r.status)
	}
}

// A stream belongs to the key that created it: another key gets 404 for it
// on classify, GET and DELETE, as for a stream that does not exist, from
// memory and, after a restart, from the state directory; its state file
// names the owner by the key's digest.
func TestStreamOwnership(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir = 1, state
	cfg.AuthKeysFile = writeFile(t, dir, "keys", keyA+" a\n"+keyB+" b\n")
	s, ts := startServer(t, cfg)
	imgs := images(t, 3)
	a, b := keyed{t, ts.URL, keyA}, keyed{t, ts.URL, keyB}
	if r := a.classify("?stream=cam", imgs[0]); r.status != 200 {
		t.Fatalf("owner: %d %s", r.status, r.body)
	}
	checkOthers := func(where string) {
		t.Helper()
		var bodies [][]byte
		for name, r := range map[string]reply{
			"classify": b.classify("?stream=cam", imgs[1]), "classify CAM": b.classify("?stream=CAM", imgs[1]),
			"GET": b.get("/v1/streams/cam"), "DELETE": b.delete("/v1/streams/cam"),
			"GET of a stream that does not exist": b.get("/v1/streams/nothing"),
		} {
			if r.status != 404 {
				t.Errorf("%s: another key's %s: %d %s", where, name, r.status, r.body)
			}
			bodies = append(bodies, r.body)
		}
		for _, body := range bodies[1:] {
			if m := strings.ReplaceAll(string(body), "nothing", "cam"); m != strings.ReplaceAll(string(bodies[0]), "nothing", "cam") {
				t.Errorf("%s: 404s tell streams apart: %s and %s", where, bodies[0], body)
			}
		}
	}
	checkOthers("in memory")
	if st, code := a.status("cam"); code != 200 || st.Images != 1 {
		t.Fatalf("owner's GET after another key's tries: %d, %d images", code, st.Images)
	}

	sv, ok := readSaved(t, state, "cam")
	if !ok || sv.Owner != digestOf(keyA) {
		t.Fatalf("saved owner %q, want the digest of the key", sv.Owner)
	}
	if raw, _ := os.ReadFile(filepath.Join(state, "cam.stream")); bytes.Contains(raw, []byte(keyA)) {
		t.Error("the state file holds the key")
	}

	// A restart: the stream is read back only for its owner.
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, ts = startServer(t, cfg)
	a, b = keyed{t, ts.URL, keyA}, keyed{t, ts.URL, keyB}
	checkOthers("after a restart")
	r := a.classify("?stream=cam", imgs[2])
	var got ClassifyResponse
	if r.status == 200 {
		r.decode(t, &got)
	}
	if r.status != 200 || got.Stream.Batch != 1 {
		t.Fatalf("owner after a restart: %d %s", r.status, r.body)
	}
	if st, _ := a.status("cam"); st.Images != 2 || !st.Restored {
		t.Errorf("owner's stream after a restart: %d images, restored %v", st.Images, st.Restored)
	}
	// Once its owner deletes it, the id is free for another key.
	if r := a.delete("/v1/streams/cam"); r.status != 200 {
		t.Fatalf("owner's DELETE: %d %s", r.status, r.body)
	}
	if r := b.classify("?stream=cam", imgs[0]); r.status != 200 {
		t.Fatalf("another key after the delete: %d %s", r.status, r.body)
	}
	if _, code := a.status("cam"); code != 404 {
		t.Errorf("the first owner sees the new stream: %d", code)
	}
}

// Reload (what SIGHUP calls) drops a key taken out of the file, and keeps
// the keys it had when the file cannot be used.
func TestReloadRemovesKey(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t)
	path := writeFile(t, dir, "keys", keyA+"\n"+keyB+"\n")
	cfg.AuthKeysFile = path
	s, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	a, b := keyed{t, ts.URL, keyA}, keyed{t, ts.URL, keyB}
	if r := b.classify("", img); r.status != 200 {
		t.Fatalf("before the reload: %d", r.status)
	}
	writeFile(t, dir, "keys", keyA+"\n")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := b.classify("", img); r.status != 401 {
		t.Errorf("a removed key after the reload: %d", r.status)
	}
	if r := a.classify("", img); r.status != 200 {
		t.Errorf("a kept key after the reload: %d", r.status)
	}
	writeFile(t, dir, "keys", keyA+"\nshort-secret\n")
	err := s.Reload()
	if !errors.Is(err, ErrKeyFile) || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "short-secret") {
		t.Errorf("reloading a bad file: %v", err)
	}
	if r := a.classify("", img); r.status != 200 {
		t.Errorf("after a failed reload: %d", r.status)
	}
	os.Remove(path)
	if err := s.Reload(); !errors.Is(err, ErrKeyFile) {
		t.Errorf("reloading a missing file: %v", err)
	}
	if r := a.classify("", img); r.status != 200 {
		t.Errorf("after a failed reload: %d", r.status)
	}
}

// lockedBuffer is a bytes.Buffer safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// No key, accepted or refused, nor its digest, appears in the log, the
// metrics or an answer, whatever happens to the request.
func TestKeysNotInLogsOrMetrics(t *testing.T) {
	dir := t.TempDir()
	var log lockedBuffer
	const wrong = "wrong-key-not-to-be-logged-3f9a"
	const short = "short-secret-9"
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir = 1, t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	path := writeFile(t, dir, "keys", keyA+" a\n"+keyB+"\n")
	cfg.AuthKeysFile = path
	cfg.KeyImagesPerSecond, cfg.KeyBurst = 0.001, 1
	s, ts := startServer(t, cfg)
	img := images(t, 1)[0]
	a := keyed{t, ts.URL, keyA}
	var bodies []string
	keep := func(r reply) { bodies = append(bodies, string(r.body)) }
	keep(a.classify("?stream=cam", img))
	keep(a.classify("?stream=cam", img)) // 429: beyond the rate
	keep((keyed{t, ts.URL, wrong}).classify("", img))
	keep((keyed{t, ts.URL, keyB}).get("/v1/streams/cam"))
	s.beforeStep = func() { panic("boom") }
	keep((keyed{t, ts.URL, keyB}).classify("?stream=other", img)) // a 500, logged
	s.beforeStep = nil
	writeFile(t, dir, "keys", keyA+"\n"+short+"\n")
	s.Reload()
	writeFile(t, dir, "keys", "sha256:"+digestOf(keyA)+"\n")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	keep(a.get("/metrics"))
	text := log.String() + strings.Join(bodies, "\n")
	if !strings.Contains(text, "keys reloaded") || !strings.Contains(text, "boom") || !strings.Contains(text, "subtta_auth_failures_total 1") {
		t.Fatalf("the log and answers lack what the test caused:\n%s", log.String())
	}
	for _, secret := range []string{keyA, keyB, wrong, short, digestOf(keyA), digestOf(keyB), digestOf(wrong)} {
		if strings.Contains(text, secret) {
			t.Errorf("%s appears in the log, the metrics or an answer", secret)
		}
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and localhost,
// with its key, to dir (cert.pem, key.pem), and returns it.
func writeCert(t *testing.T, dir string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "subtta test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, dir, "key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The server speaks TLS 1.2 or later with its certificate, and a reload
// gives new connections the certificate now in the files.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	first := writeCert(t, dir, 1)
	cfg := testConfig(t)
	cfg.AuthKeysFile = writeFile(t, dir, "keys", keyA+"\n")
	cfg.TLSCertFile, cfg.TLSKeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler(), TLSConfig: s.TLSConfig()}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close(); s.Shutdown(context.Background()) })
	url := "https://" + ln.Addr().String()

	// get makes a new connection trusting roots, with TLS versions up to
	// maxVersion (0: any), and returns the server's certificate.
	get := func(roots *x509.Certificate, maxVersion uint16, auth string) (*x509.Certificate, int, error) {
		pool := x509.NewCertPool()
		pool.AddCert(roots)
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: maxVersion}}}
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/classify", bytes.NewReader(images(t, 1)[0]))
		req.Header.Set("Content-Type", "image/jpeg")
		req.Header.Set("Authorization", auth)
		resp, err := c.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.TLS.PeerCertificates[0], resp.StatusCode, nil
	}
	cert, code, err := get(first, 0, "Bearer "+keyA)
	if err != nil || code != 200 || !cert.Equal(first) {
		t.Fatalf("over TLS: %d, %v", code, err)
	}
	if _, code, _ := get(first, 0, ""); code != 401 {
		t.Errorf("over TLS without a key: %d", code)
	}
	if _, _, err := get(first, tls.VersionTLS11, "Bearer "+keyA); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("a client that does not trust the certificate was served")
	}

	second := writeCert(t, dir, 2)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if cert, code, err := get(second, 0, "Bearer "+keyA); err != nil || code != 200 || !cert.Equal(second) {
		t.Fatalf("after the reload: %d, %v", code, err)
	}
	writeFile(t, dir, "key.pem", "not a key")
	if err := s.Reload(); !errors.Is(err, ErrTLS) {
		t.Errorf("reloading a bad key: %v", err)
	}
	if cert, _, err := get(second, 0, "Bearer "+keyA); err != nil || !cert.Equal(second) {
		t.Errorf("after a failed reload: %v", err)
	}
}

// One key beyond its requests in flight or its images per second gets 429
// with Retry-After; another key is still served.
func TestKeyLimits(t *testing.T) {
	dir := t.TempDir()
	img := images(t, 1)[0]
	t.Run("in flight", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.BatchSize, cfg.MaxWait = 2, 3*time.Second
		cfg.AuthKeysFile = writeFile(t, dir, "keys", keyA+"\n"+keyB+"\n")
		cfg.KeyMaxInFlight = 1
		_, ts := startServer(t, cfg)
		a, b := keyed{t, ts.URL, keyA}, keyed{t, ts.URL, keyB}
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/classify?stream=a", bytes.NewReader(img))
			req.Header.Set("Content-Type", "image/jpeg")
			req.Header.Set("Authorization", "Bearer "+keyA)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		deadline := time.Now().Add(time.Minute)
		for {
			if st, code := a.status("a"); code == 200 && st.Pending == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the request never waited")
			}
			time.Sleep(5 * time.Millisecond)
		}
		r := a.classify("", img)
		checkError(t, r, 429)
		if r.header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
		}
		if r := b.classify("", img); r.status != 200 {
			t.Errorf("another key: %d %s", r.status, r.body)
		}
		if code := <-done; code != 200 {
			t.Errorf("the waiting request: %d", code)
		}
		if r := a.classify("", img); r.status != 200 {
			t.Errorf("once answered: %d %s", r.status, r.body)
		}
		if m := a.get("/metrics"); !strings.Contains(string(m.body), `subtta_key_limited_total{limit="in_flight"} 1`) {
			t.Errorf("metrics:\n%s", grep(string(m.body), "subtta_key_limited"))
		}
	})
	t.Run("images per second", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.AuthKeysFile = writeFile(t, dir, "keys", keyA+"\n"+keyB+"\n")
		cfg.KeyImagesPerSecond, cfg.KeyBurst = 0.25, 1
		_, ts := startServer(t, cfg)
		a, b := keyed{t, ts.URL, keyA}, keyed{t, ts.URL, keyB}
		if r := a.classify("", img); r.status != 200 {
			t.Fatalf("first image: %d", r.status)
		}
		r := a.classify("", img)
		checkError(t, r, 429)
		if ra := r.header.Get("Retry-After"); ra != "4" && ra != "3" {
			t.Errorf("Retry-After %q; want about 4 s at 0.25 images/s", ra)
		}
		if r := b.classify("", img); r.status != 200 {
			t.Errorf("another key: %d %s", r.status, r.body)
		}
		if m := a.get("/metrics"); !strings.Contains(string(m.body), `subtta_key_limited_total{limit="rate"} 1`) {
			t.Errorf("metrics:\n%s", grep(string(m.body), "subtta_key_limited"))
		}
	})
}

// The guard resets a stream fed one image over and over (every prediction
// the same label) to the source weights and a fresh method: its next batch
// is answered as a new stream's first, and GET and the metrics report the
// reset. A stream of varied images is left alone.
func TestGuardResetsConstantStream(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize = 4
	cfg.Guard = GuardConfig{MaxClassShare: 0.9, Window: 8}
	s, ts := startServer(t, cfg)
	imgs := images(t, 12)
	constant := slices.Repeat([][]byte{imgs[0]}, 4)
	streamBatch(t, ts, "still", constant)
	if st, _ := streamStatus(t, ts, "still"); st.Guard == nil || st.Guard.Resets != 0 || st.Guard.TopClassShare != 1 || st.Guard.Predictions != 4 {
		t.Fatalf("after one batch: %+v", st.Guard)
	}
	streamBatch(t, ts, "still", constant)
	st, _ := streamStatus(t, ts, "still")
	if st.Guard == nil || st.Guard.Resets != 1 || st.Guard.LastReason != GuardClassShare || st.Guard.LastReset == nil || st.Images != 8 {
		t.Fatalf("after two batches: %d images, guard %+v", st.Images, st.Guard)
	}
	params, _, _ := s.streamState(t, "still")
	if !slices.Equal(params, s.source) {
		t.Error("the reset stream's LayerNorm values are not the source's")
	}
	// Its next batch is a fresh stream's first.
	got := streamBatch(t, ts, "still", imgs[4:8])
	want := streamBatch(t, ts, "fresh", imgs[4:8])
	for i := range got {
		if !slices.Equal(got[i].Logits, want[i].Logits) {
			t.Fatalf("image %d after the reset: %v; a new stream: %v", i, got[i].Logits, want[i].Logits)
		}
	}
	streamBatch(t, ts, "varied", imgs[:4])
	streamBatch(t, ts, "varied", imgs[4:8])
	if st, _ := streamStatus(t, ts, "varied"); st.Guard == nil || st.Guard.Resets != 0 {
		t.Errorf("a stream of varied images: %+v", st.Guard)
	}
	m := do(t, http.MethodGet, ts.URL+"/metrics", "", nil)
	if !strings.Contains(string(m.body), `subtta_stream_guard_resets_total{reason="class_share"} 1`) {
		t.Errorf("metrics:\n%s", grep(string(m.body), "subtta_stream_guard"))
	}
}

// Patience bad batches in a row reset a stream; fewer do not.
func TestGuardPatience(t *testing.T) {
	cfg := testConfig(t)
	cfg.BatchSize, cfg.StateDir = 2, t.TempDir()
	cfg.Guard = GuardConfig{MaxEntropy: 1e-9, Patience: 2} // every batch is bad
	_, ts := startServer(t, cfg)
	imgs := images(t, 4)
	streamBatch(t, ts, "e", imgs[:2])
	if st, _ := streamStatus(t, ts, "e"); st.Guard == nil || st.Guard.BadBatches != 1 || st.Guard.Resets != 0 {
		t.Fatalf("after one bad batch: %+v", st.Guard)
	}
	streamBatch(t, ts, "e", imgs[2:])
	st, _ := streamStatus(t, ts, "e")
	if st.Guard == nil || st.Guard.BadBatches != 0 || st.Guard.Resets != 1 || st.Guard.LastReason != GuardEntropy {
		t.Fatalf("after two: %+v", st.Guard)
	}
	if sv, _ := readSaved(t, cfg.StateDir, "e"); sv.Stats.Guard.Resets != 1 {
		t.Errorf("saved guard record %+v", sv.Stats.Guard)
	}
}

func TestAccessConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"missing key file", func(c *Config) { c.AuthKeysFile = filepath.Join(dir, "none") }, "no such file"},
		{"short key", func(c *Config) { c.AuthKeysFile = writeFile(t, dir, "k1", "# x\n"+keyA+"\ntiny-secret b\n") }, "line 3: a key of 11 characters; want 16 or more"},
		{"duplicate", func(c *Config) { c.AuthKeysFile = writeFile(t, dir, "k2", keyA+" a\nsha256:"+digestOf(keyA)+" b\n") }, "line 2: the key of line 1 again"},
		{"bad digest", func(c *Config) { c.AuthKeysFile = writeFile(t, dir, "k3", "sha256:abc\n") }, "line 1: after \"sha256:\" want the 64 hex digits"},
		{"empty", func(c *Config) { c.MetricsKeysFile = writeFile(t, dir, "k4", "# nobody\n") }, "holds no key"},
		{"cert without key", func(c *Config) { c.TLSCertFile = "cert.pem" }, "TLSCertFile and TLSKeyFile go together"},
		{"bad cert", func(c *Config) {
			c.TLSCertFile, c.TLSKeyFile = writeFile(t, dir, "c", "x"), writeFile(t, dir, "k", "y")
		}, "TLS certificate"},
		{"negative rate", func(c *Config) { c.KeyImagesPerSecond = -1 }, "KeyImagesPerSecond -1"},
		{"share beyond 1", func(c *Config) { c.Guard.MaxClassShare = 1.5 }, "Guard.MaxClassShare 1.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.edit(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), keyA) || strings.Contains(err.Error(), "tiny-secret") {
				t.Errorf("the error holds a key: %v", err)
			}
		})
	}
}

// The key check takes one key's digest compared with every key's, so its
// time does not depend on which key, or how much of one, matched; here:
// every key of a set is found, and a key differing from one in its last
// character is not.
func TestKeyMatch(t *testing.T) {
	var text strings.Builder
	for i := range 50 {
		text.WriteString(strings.Repeat(string(rune('a'+i%26)), 20) + string(rune('A'+i/26)) + "\n")
	}
	ks, err := parseKeys("keys", []byte(text.String()))
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Fields(text.String()) {
		if e, ok := ks.match(line); !ok || e.digest != ks.entries[i].digest {
			t.Errorf("key %d not found", i)
		}
		if _, ok := ks.match(line[:len(line)-1] + "z"); ok {
			t.Errorf("a key differing from key %d in its last character matched", i)
		}
	}
}

// BenchmarkKeyCheck is the key check of one request against a file of 50
// keys: what --auth-keys adds to every request.
func BenchmarkKeyCheck(b *testing.B) {
	var text strings.Builder
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = digestOf(strings.Repeat("k", i+1)) // 64 characters, each key another
		text.WriteString(keys[i] + " client\n")
	}
	ks, err := parseKeys("keys", []byte(text.String()))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, ok := ks.match(keys[25]); !ok {
			b.Fatal("not found")
		}
	}
}

// The guard's rules on made-up batches: which batch is bad, when a run of
// bad batches or one label's share resets the stream.
func TestGuardCheck(t *testing.T) {
	batch := func(loss float64, logits ...[]float64) *tta.Result {
		res := &tta.Result{Logits: mat.NewDense(len(logits), len(logits[0]), slices.Concat(logits...)),
			Diag: tta.Diagnostics{Losses: map[string]float64{"tent": loss}}}
		for _, row := range logits {
			res.Preds = append(res.Preds, slices.Index(row, slices.Max(row)))
		}
		return res
	}
	sure0, sure1 := []float64{20, 0, 0}, []float64{0, 20, 0}
	unsure := []float64{0, 0, 0.01}
	for _, tc := range []struct {
		name    string
		g       GuardConfig
		batches []*tta.Result
		want    []string // the reason after each batch
	}{
		{"loss beyond, patience 2", GuardConfig{MaxLoss: 1, Patience: 2, Window: 4},
			[]*tta.Result{batch(2, sure0), batch(0.5, sure0), batch(2, sure0), batch(3, sure1)},
			[]string{"", "", "", GuardLoss}},
		{"a loss that is not finite", GuardConfig{MaxLoss: 1, Patience: 1, Window: 4},
			[]*tta.Result{batch(math.NaN(), sure0)}, []string{GuardLoss}},
		{"entropy", GuardConfig{MaxEntropy: 0.9, Patience: 2, Window: 4},
			[]*tta.Result{batch(0, unsure), batch(0, sure0), batch(0, unsure), batch(0, unsure, unsure)},
			[]string{"", "", "", GuardEntropy}},
		{"one label's share, once the window is full", GuardConfig{MaxClassShare: 0.7, Patience: 3, Window: 4},
			[]*tta.Result{batch(0, sure0, sure0, sure0), batch(0, sure0), batch(0, sure1, sure1), batch(0, sure0, sure0)},
			[]string{"", GuardClassShare, "", ""}},
		{"off", GuardConfig{Patience: 1, Window: 1},
			[]*tta.Result{batch(math.Inf(1), sure0, sure0)}, []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gs guardStats
			for i, b := range tc.batches {
				got, detail := tc.g.check(&gs, b)
				if got != tc.want[i] {
					t.Fatalf("batch %d: reason %q (%s), want %q", i, got, detail, tc.want[i])
				}
				if got != "" {
					gs = guardStats{} // as the reset does
				}
			}
		})
	}
}
