package weights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// DefaultHubURL is the Hugging Face Hub.
const DefaultHubURL = "https://huggingface.co"

// Hub downloads files of model repositories from a Hugging Face Hub
// compatible server, <BaseURL>/<repo>/resolve/<Revision>/<file>.
type Hub struct {
	BaseURL  string       // DefaultHubURL when empty
	Revision string       // "main" when empty
	Token    string       // sent as a bearer token when set
	Client   *http.Client // http.DefaultClient when nil

	// HFCache, when set, is a Hugging Face hub cache (the folder Python's
	// huggingface_hub fills: models--ORG--NAME/snapshots/REV/FILE, with
	// refs/REVISION naming the snapshot of a branch): a file found there is
	// used in place, not downloaded.
	HFCache string

	// Retry says how a download is retried; the zero value is
	// DefaultRetry.
	Retry Retry

	// OnRetry, if not nil, is told of each failure that is retried and
	// how long the wait before the next try is.
	OnRetry func(file string, err error, wait time.Duration)
}

// Retry is how Hub retries a download that failed on the network (no
// connection, a connection dropped mid-file, no byte for IdleTimeout) or
// on an HTTP 429 or 5xx answer: after exponentially growing waits with
// jitter, each try resuming the partial file with a Range request. A try
// that receives data starts the count afresh, so a download that makes
// progress is never abandoned; Tries tries in a row without a byte, or
// Stall without one, and the download fails. A Retry-After the server
// sends is waited for (up to MaxRetryAfter). Other answers (401, 403, 404,
// a wrong checksum) fail at once.
type Retry struct {
	Tries         int           // tries in a row without progress (default 5; 1: no retry)
	Stall         time.Duration // time without progress before giving up (default 8 s)
	Initial       time.Duration // first wait (default 500 ms), doubling up to Max
	Max           time.Duration // longest wait (default 30 s)
	MaxRetryAfter time.Duration // longest Retry-After honoured (default 2 min)
	IdleTimeout   time.Duration // longest wait for the next byte of a response (default 60 s)
}

// DefaultRetry is the Retry of a Hub that sets none: with no network a
// download fails after about 8 s.
var DefaultRetry = Retry{Tries: 5, Stall: 8 * time.Second, Initial: 500 * time.Millisecond,
	Max: 30 * time.Second, MaxRetryAfter: 2 * time.Minute, IdleTimeout: time.Minute}

// withDefaults fills r's zero fields from DefaultRetry.
func (r Retry) withDefaults() Retry {
	d := DefaultRetry
	if r.Tries > 0 {
		d.Tries = r.Tries
	}
	for _, f := range []struct{ dst, src *time.Duration }{
		{&d.Stall, &r.Stall}, {&d.Initial, &r.Initial}, {&d.Max, &r.Max},
		{&d.MaxRetryAfter, &r.MaxRetryAfter}, {&d.IdleTimeout, &r.IdleTimeout},
	} {
		if *f.src > 0 {
			*f.dst = *f.src
		}
	}
	return d
}

// HubFromEnv returns the Hub the environment describes, as Python's
// huggingface_hub reads it: HF_ENDPOINT (a mirror) as BaseURL; HF_TOKEN,
// else the token file `huggingface-cli login` writes ($HF_TOKEN_PATH, else
// $HF_HOME/token), as Token; and HF_HUB_CACHE, else $HF_HOME/hub, as
// HFCache. HF_HOME defaults to $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface.
func HubFromEnv() *Hub {
	h := &Hub{BaseURL: os.Getenv("HF_ENDPOINT"), Token: os.Getenv("HF_TOKEN")}
	home := os.Getenv("HF_HOME")
	if home == "" {
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
			home = filepath.Join(x, "huggingface")
		} else if u, err := os.UserHomeDir(); err == nil {
			home = filepath.Join(u, ".cache", "huggingface")
		}
	}
	if h.Token == "" {
		tokenPath := os.Getenv("HF_TOKEN_PATH")
		if tokenPath == "" && home != "" {
			tokenPath = filepath.Join(home, "token")
		}
		if tokenPath != "" {
			if b, err := os.ReadFile(tokenPath); err == nil {
				h.Token = strings.TrimSpace(string(b))
			}
		}
	}
	h.HFCache = os.Getenv("HF_HUB_CACHE")
	if h.HFCache == "" && home != "" {
		h.HFCache = filepath.Join(home, "hub")
	}
	return h
}

// RemoteFile names a file of a repository and, optionally, its expected
// SHA-256 (hex).
type RemoteFile struct {
	Name   string
	SHA256 string
}

// Progress reports a download: Done bytes of Total (Total is -1 when the
// server does not say). Skipped is set for a file already in the cache.
type Progress struct {
	File        string
	Done, Total int64
	Skipped     bool
}

// Pull downloads files of repo into cacheDir/<repo>/<file> with the Hub
// the environment describes (HubFromEnv); see Hub.Pull.
func Pull(ctx context.Context, repo string, files []string, cacheDir string, progress func(Progress)) ([]string, error) {
	rf := make([]RemoteFile, len(files))
	for i, f := range files {
		rf[i] = RemoteFile{Name: f}
	}
	return HubFromEnv().Pull(ctx, repo, rf, cacheDir, progress)
}

// Pull downloads files of repo into cacheDir/<repo>/<file> and returns
// their paths. Each file is downloaded to <file>.part and renamed into
// place only once complete and verified, so a path in the cache is always a
// whole file. A file already in the cache is skipped (after checking its
// SHA-256 when one is given), and so is one in the Hugging Face cache
// HFCache, whose path is returned; a .part left by an interrupted download
// is resumed with a Range request when the server allows it, by this
// call's retries (h.Retry) and by a later Pull. The SHA-256 is
// checked when the caller gives one or the server states one (the Hub sends
// it as X-Linked-Etag, or ETag, for LFS files). progress, if not nil, is
// called as data arrives.
func (h *Hub) Pull(ctx context.Context, repo string, files []RemoteFile, cacheDir string, progress func(Progress)) ([]string, error) {
	if err := checkRepoID(repo); err != nil {
		return nil, fmt.Errorf("weights: pull: bad repository name %q: %w", repo, err)
	}
	if err := h.checkBaseURL(); err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range files {
		if err := checkRelPath(f.Name); err != nil {
			return nil, fmt.Errorf("weights: pull %s: bad file name %q", repo, f.Name)
		}
		p, err := h.pullOne(ctx, repo, f, filepath.Join(cacheDir, filepath.FromSlash(repo), filepath.FromSlash(f.Name)), progress)
		if err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// ErrHubURL is wrapped by Pull's error when Hub.BaseURL is not an http or
// https URL with a host.
var ErrHubURL = errors.New("the hub's address is not an http:// or https:// URL")

// checkBaseURL refuses a BaseURL that no request could reach, which would
// otherwise fail every retry with the HTTP client's words for it. It
// names $HF_ENDPOINT, where HubFromEnv takes the address from.
func (h *Hub) checkBaseURL() error {
	if h.BaseURL == "" {
		return nil
	}
	u, err := url.Parse(h.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("weights: pull: %q (Hub.BaseURL, $HF_ENDPOINT): %w", h.BaseURL, ErrHubURL)
	}
	return nil
}

// syncFile flushes the file at path to the disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// maxRepoName is the longest name the Hub gives a repository or its owner.
const maxRepoName = 96

// checkRepoID refuses a repository id the Hub would not have, before any
// request: "NAME" or "OWNER/NAME", each part of letters, digits, '-', '_'
// and '.', not starting or ending with '-' or '.', without "--" or "..",
// at most maxRepoName long (the Hub's rule). Such a name would only be
// answered 404 or 401, after the retries, and leave its folder in the
// cache.
func checkRepoID(repo string) error {
	parts := strings.Split(repo, "/")
	if len(parts) > 2 {
		return errors.New(`want NAME or OWNER/NAME`)
	}
	for _, p := range parts {
		switch {
		case p == "":
			return errors.New(`want NAME or OWNER/NAME`)
		case len(p) > maxRepoName:
			return fmt.Errorf("%q is longer than %d characters", p, maxRepoName)
		case strings.Contains(p, "--") || strings.Contains(p, ".."):
			return fmt.Errorf(`%q holds "--" or ".."`, p)
		case strings.IndexAny(p[:1], "-.") == 0 || strings.IndexAny(p[len(p)-1:], "-.") == 0:
			return fmt.Errorf("%q starts or ends with '-' or '.'", p)
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				return fmt.Errorf("%q holds %q: letters, digits, '-', '_' and '.' only", p, r)
			}
		}
	}
	return nil
}

// checkRelPath rejects names that could escape the cache directory.
func checkRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || path.Clean(p) != p {
		return errors.New("bad path")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." || part == "." || part == "" {
			return errors.New("bad path")
		}
	}
	return nil
}

// ErrChecksum is wrapped by the error for a file whose SHA-256 differs from
// the expected one.
var ErrChecksum = errors.New("SHA-256 mismatch")

// hasSHA256 reports whether the file at path has the SHA-256 want.
func hasSHA256(path, want string) bool {
	got, err := fileSHA256(path)
	return err == nil && got == want
}

func (h *Hub) pullOne(ctx context.Context, repo string, f RemoteFile, dst string, progress func(Progress)) (string, error) {
	want := strings.ToLower(f.SHA256)
	// A cached copy (ours, else the Hugging Face cache's) serves when no
	// checksum is asked for, or when it has the one asked for; a stale or
	// corrupt one is fetched again.
	for _, p := range []string{dst, h.hfCached(repo, f.Name)} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil && (want == "" || hasSHA256(p, want)) {
			report(progress, Progress{File: f.Name, Done: -1, Total: -1, Skipped: true})
			return p, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("weights: pull: %w", err)
	}
	part := dst + ".part"
	if err := h.retry(ctx, repo, f.Name, want, part, progress); err != nil {
		return "", err
	}
	// On disk before the rename: a file in the cache is taken as whole
	// (and, without a SHA-256 to check, unread) by later pulls.
	if err := syncFile(part); err != nil {
		return "", fmt.Errorf("weights: pull: %w", err)
	}
	if err := os.Rename(part, dst); err != nil {
		return "", fmt.Errorf("weights: pull: %w", err)
	}
	return dst, nil
}

// errRestart asks for a resumed .part to be discarded and the download
// tried once more from the start.
type errRestart struct{ error }

// errTransient marks a failure worth retrying: the network, or an HTTP
// 429 or 5xx answer (wait, when the server said how long).
type errTransient struct {
	error
	wait time.Duration
}

func (e errTransient) Unwrap() error { return e.error }

// hfCached returns the path of file of repo in the Hugging Face cache
// HFCache at h's revision, or "" when it is not there.
func (h *Hub) hfCached(repo, file string) string {
	if h.HFCache == "" {
		return ""
	}
	dir := filepath.Join(h.HFCache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	rev := h.Revision
	if rev == "" {
		rev = "main"
	}
	commit := rev
	if b, err := os.ReadFile(filepath.Join(dir, "refs", filepath.FromSlash(rev))); err == nil {
		commit = strings.TrimSpace(string(b))
	}
	if checkRelPath(commit) != nil || strings.Contains(commit, "/") {
		return ""
	}
	p := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(file))
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

// retry downloads file into part, retrying as h.Retry says.
func (h *Hub) retry(ctx context.Context, repo, file, want, part string, progress func(Progress)) error {
	r := h.Retry.withDefaults()
	b := &backoff.ExponentialBackOff{InitialInterval: r.Initial, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: r.Max}
	b.Reset()
	tries, restarted := 0, false
	lastProgress := time.Now()
	for {
		before := partSize(part)
		err := h.download(ctx, repo, file, want, part, progress, r.IdleTimeout, lastProgress.Add(r.Stall))
		if err == nil {
			return nil
		}
		var restart errRestart
		if errors.As(err, &restart) && !restarted {
			restarted = true // once: a server that cannot resume twice will not
			os.Remove(part)
			continue
		}
		var transient errTransient
		if !errors.As(err, &transient) || ctx.Err() != nil {
			return err
		}
		if partSize(part) > before {
			tries = 0 // progress: a fresh count and a fresh stall clock
			lastProgress = time.Now()
			b.Reset()
		}
		tries++
		wait := b.NextBackOff()
		stalled := time.Since(lastProgress) + wait
		if transient.wait > 0 {
			wait = min(transient.wait, r.MaxRetryAfter)
			stalled = 0 // the server is there, and said when to come back
			lastProgress = time.Now().Add(wait)
		}
		if tries >= r.Tries || stalled > r.Stall {
			return fmt.Errorf("%w (gave up after %d tries)", err, tries)
		}
		if h.OnRetry != nil {
			h.OnRetry(file, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// partSize is the size of the partial file at part, 0 when there is none.
func partSize(part string) int64 {
	st, err := os.Stat(part)
	if err != nil {
		return 0
	}
	return st.Size()
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func report(progress func(Progress), p Progress) {
	if progress != nil {
		progress(p)
	}
}

func (h *Hub) url(repo, file string) string {
	base := h.BaseURL
	if base == "" {
		base = DefaultHubURL
	}
	rev := h.Revision
	if rev == "" {
		rev = "main"
	}
	return strings.TrimRight(base, "/") + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + file
}

// download fetches file into part, resuming from part's current size, and
// checks the result's size and SHA-256. The response must start by
// deadline and its body go no longer than idle without a byte. Failures
// worth retrying are errTransient.
func (h *Hub) download(ctx context.Context, repo, file, want, part string, progress func(Progress), idle time.Duration, deadline time.Time) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("weights: pull %s/%s: %s", repo, file, fmt.Sprintf(format, a...))
	}
	transient := func(wait time.Duration, format string, a ...any) error {
		return errTransient{fail(format, a...), wait}
	}
	// A watchdog cancels the request when the response does not start by
	// deadline or the body stalls for idle.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errStalled := errors.New("no response")
	watchdog := time.AfterFunc(max(time.Until(deadline), time.Millisecond), func() { cancel(errStalled) })
	defer watchdog.Stop()
	out, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fail("%v", err)
	}
	defer out.Close()
	// Hash what an earlier attempt left, to resume after it.
	sum := sha256.New()
	have, err := io.Copy(sum, out)
	if err != nil {
		return fail("%v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url(repo, file), nil)
	if err != nil {
		return fail("%v", err)
	}
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	// The Hub answers an LFS file with a redirect to a CDN; the checksum
	// is on the redirect, so keep the headers of every hop.
	client := http.DefaultClient
	if h.Client != nil {
		client = h.Client
	}
	var hops []http.Header
	c := *client
	c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if r.Response != nil {
			hops = append(hops, r.Response.Header)
		}
		if r.URL.Host != via[0].URL.Host {
			r.Header.Del("Authorization") // never hand the token to a CDN
		}
		if client.CheckRedirect != nil {
			return client.CheckRedirect(r, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil && context.Cause(ctx) != errStalled {
			return fail("%v", context.Cause(ctx))
		}
		if context.Cause(ctx) == errStalled {
			return transient(0, "no answer from %s", req.URL.Host)
		}
		return transient(0, "%v", unwrapURLError(err))
	}
	defer resp.Body.Close()
	watchdog.Reset(idle)
	hops = append(hops, resp.Header)
	if want == "" {
		want = serverSHA256(hops)
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		if start, ok := rangeStart(resp.Header.Get("Content-Range")); !ok || start != have {
			return errRestart{fail("server resumed at %q, want byte %d", resp.Header.Get("Content-Range"), have)}
		}
	case resp.StatusCode == http.StatusOK:
		if have > 0 { // the server ignored the Range: start over
			if err := out.Truncate(0); err != nil {
				return fail("%v", err)
			}
			if _, err := out.Seek(0, io.SeekStart); err != nil {
				return fail("%v", err)
			}
			sum.Reset()
			have = 0
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && have > 0:
		return errRestart{fail("server refused to resume at byte %d", have)}
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return transient(retryAfter(resp.Header.Get("Retry-After")), "HTTP %s", resp.Status)
	case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && h.Token == "":
		return fail("HTTP %s: a gated or private repository needs a token (set HF_TOKEN)", resp.Status)
	default:
		return fail("HTTP %s", resp.Status)
	}
	total := int64(-1)
	if resp.ContentLength >= 0 {
		total = have + resp.ContentLength
	}
	pw := &progressWriter{w: io.MultiWriter(out, sum), p: Progress{File: file, Done: have, Total: total}, fn: progress,
		tick: func() { watchdog.Reset(idle) }}
	report(progress, pw.p)
	n, err := io.Copy(pw, resp.Body)
	if err != nil {
		// Keep the .part: the next try resumes from it.
		if context.Cause(ctx) == errStalled {
			err = fmt.Errorf("no data for %v", idle)
		} else if ctx.Err() != nil {
			return fail("after %d bytes: %v", have+n, context.Cause(ctx))
		}
		return transient(0, "after %d bytes: %v", have+n, err)
	}
	if total >= 0 && have+n != total {
		return transient(0, "got %d bytes, want %d (truncated)", have+n, total)
	}
	if err := out.Sync(); err != nil {
		return fail("%v", err)
	}
	if want != "" {
		if got := hex.EncodeToString(sum.Sum(nil)); got != want {
			out.Close()
			os.Remove(part)
			return fmt.Errorf("weights: pull %s/%s: sha256 %s, want %s: %w", repo, file, got, want, ErrChecksum)
		}
	}
	return out.Close()
}

// serverSHA256 returns the SHA-256 a response chain states, if any: the Hub
// sends it as X-Linked-Etag on the redirect of an LFS file, and as ETag for
// LFS files served directly. Other ETags (git blob ids, CDN tags) are not
// SHA-256 digests and are ignored.
func serverSHA256(hops []http.Header) string {
	for _, key := range []string{"X-Linked-Etag", "Etag"} {
		for _, h := range hops {
			v := strings.TrimPrefix(h.Get(key), "W/")
			v = strings.ToLower(strings.Trim(v, `"`))
			if len(v) == 64 && isHex(v) {
				return v
			}
		}
	}
	return ""
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// rangeStart parses the first byte of "bytes a-b/n".
func rangeStart(cr string) (int64, bool) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(a, 10, 64)
	return n, err == nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

type progressWriter struct {
	w    io.Writer
	p    Progress
	fn   func(Progress)
	tick func() // called on every write
}

func (pw *progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.p.Done += int64(n)
	report(pw.fn, pw.p)
	if pw.tick != nil {
		pw.tick()
	}
	return n, err
}

// unwrapURLError drops the `Get "URL": ` of a transport error: the message
// names the file already.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
