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

// Pull downloads files of repo from the Hugging Face Hub into
// cacheDir/<repo>/<file> with the default Hub; see Hub.Pull.
func Pull(ctx context.Context, repo string, files []string, cacheDir string, progress func(Progress)) ([]string, error) {
	rf := make([]RemoteFile, len(files))
	for i, f := range files {
		rf[i] = RemoteFile{Name: f}
	}
	return (&Hub{}).Pull(ctx, repo, rf, cacheDir, progress)
}

// Pull downloads files of repo into cacheDir/<repo>/<file> and returns
// their paths. Each file is downloaded to <file>.part and renamed into
// place only once complete and verified, so a path in the cache is always a
// whole file. A file already in the cache is skipped (after checking its
// SHA-256 when one is given); a .part left by an interrupted download is
// resumed with a Range request when the server allows it. The SHA-256 is
// checked when the caller gives one or the server states one (the Hub sends
// it as X-Linked-Etag, or ETag, for LFS files). progress, if not nil, is
// called as data arrives.
func (h *Hub) Pull(ctx context.Context, repo string, files []RemoteFile, cacheDir string, progress func(Progress)) ([]string, error) {
	if err := checkRelPath(repo); err != nil || strings.Count(repo, "/") > 1 {
		return nil, fmt.Errorf("weights: pull: bad repository name %q", repo)
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

func (h *Hub) pullOne(ctx context.Context, repo string, f RemoteFile, dst string, progress func(Progress)) (string, error) {
	want := strings.ToLower(f.SHA256)
	if _, err := os.Stat(dst); err == nil {
		if want == "" {
			report(progress, Progress{File: f.Name, Done: -1, Total: -1, Skipped: true})
			return dst, nil
		}
		got, err := fileSHA256(dst)
		if err == nil && got == want {
			report(progress, Progress{File: f.Name, Done: -1, Total: -1, Skipped: true})
			return dst, nil
		}
		// A stale or corrupt cached copy: fetch it again.
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("weights: pull: %w", err)
	}
	part := dst + ".part"
	// Two tries: the second starts over when a resumed .part turns out bad.
	for try := 0; ; try++ {
		err := h.download(ctx, repo, f.Name, want, part, progress)
		if err == nil {
			break
		}
		var restart errRestart
		if errors.As(err, &restart) && try == 0 {
			os.Remove(part)
			continue
		}
		return "", err
	}
	if err := os.Rename(part, dst); err != nil {
		return "", fmt.Errorf("weights: pull: %w", err)
	}
	return dst, nil
}

// errRestart asks pullOne to discard a resumed .part and try once more.
type errRestart struct{ error }

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
// checks the result's size and SHA-256.
func (h *Hub) download(ctx context.Context, repo, file, want, part string, progress func(Progress)) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("weights: pull %s/%s: %s", repo, file, fmt.Sprintf(format, a...))
	}
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
		return fail("%v", err)
	}
	defer resp.Body.Close()
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
	default:
		return fail("HTTP %s", resp.Status)
	}
	total := int64(-1)
	if resp.ContentLength >= 0 {
		total = have + resp.ContentLength
	}
	pw := &progressWriter{w: io.MultiWriter(out, sum), p: Progress{File: file, Done: have, Total: total}, fn: progress}
	report(progress, pw.p)
	n, err := io.Copy(pw, resp.Body)
	if err != nil {
		// Keep the .part: the next Pull resumes from it.
		return fail("after %d bytes: %v", have+n, err)
	}
	if total >= 0 && have+n != total {
		return fail("got %d bytes, want %d (truncated)", have+n, total)
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
	w  io.Writer
	p  Progress
	fn func(Progress)
}

func (pw *progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.p.Done += int64(n)
	report(pw.fn, pw.p)
	return n, err
}
