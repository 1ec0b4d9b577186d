package serve

// This file is access by API key: the key files, the bearer check, and the
// client a request is made for.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
)

// ErrKeyFile is the error of a key file that cannot be used; its message
// names the file and the line, never a key.
var ErrKeyFile = errors.New("serve: bad key file")

// MinKeyLength is the fewest characters a key in a key file may have: a
// key is a secret drawn at random (openssl rand -hex 32), not a password.
const MinKeyLength = 16

// digestPrefix marks a line of a key file that holds the SHA-256 digest
// of a key (64 hex digits) rather than the key.
const digestPrefix = "sha256:"

// keyEntry is one key of a key file: its SHA-256 digest and its client's
// name.
type keyEntry struct {
	digest [sha256.Size]byte
	name   string
}

// owner is the key's name for the streams it owns and for its limits: its
// digest in hex.
func (e keyEntry) owner() string { return hex.EncodeToString(e.digest[:]) }

// keySet is the keys of one reading of a key file.
type keySet struct {
	entries []keyEntry
}

// parseKeys reads a key file's text: one key per line, optionally followed
// by white space and the client's name; "sha256:" and 64 hex digits stand
// for the key of that digest; blank lines and lines starting with # are
// skipped. Errors name the file and the line, never the key.
func parseKeys(path string, text []byte) (*keySet, error) {
	ks := &keySet{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		secret, name := line, ""
		if i := strings.IndexAny(line, " \t"); i >= 0 {
			secret, name = line[:i], strings.TrimSpace(line[i:])
		}
		var e keyEntry
		if hexDigest, ok := strings.CutPrefix(secret, digestPrefix); ok {
			b, err := hex.DecodeString(hexDigest)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("%w: %s line %d: after %q want the %d hex digits of a SHA-256 digest", ErrKeyFile, path, n, digestPrefix, 2*sha256.Size)
			}
			copy(e.digest[:], b)
		} else {
			if len(secret) < MinKeyLength {
				return nil, fmt.Errorf("%w: %s line %d: a key of %d characters; want %d or more (a random secret, such as openssl rand -hex 32 prints)", ErrKeyFile, path, n, len(secret), MinKeyLength)
			}
			e.digest = sha256.Sum256([]byte(secret))
		}
		if first, ok := seen[e.digest]; ok {
			return nil, fmt.Errorf("%w: %s line %d: the key of line %d again", ErrKeyFile, path, n, first)
		}
		seen[e.digest] = n
		e.name = name
		if e.name == "" {
			e.name = "sha256:" + hex.EncodeToString(e.digest[:4])
		}
		ks.entries = append(ks.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKeyFile, path, err)
	}
	if len(ks.entries) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key (one a line: KEY [NAME], or sha256:HEX [NAME])", ErrKeyFile, path)
	}
	return ks, nil
}

// match returns the entry of a presented key, comparing its digest with
// every entry's in constant time: how long it takes says nothing about
// which key, or how much of one, matched.
func (ks *keySet) match(key string) (keyEntry, bool) {
	d := sha256.Sum256([]byte(key))
	found := -1
	for i := range ks.entries {
		eq := subtle.ConstantTimeCompare(d[:], ks.entries[i].digest[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return keyEntry{}, false
	}
	return ks.entries[found], true
}

// keyring is a key file and its keys as last read; reload reads it again
// and keeps the keys it had when the file cannot be used.
type keyring struct {
	path string
	keys atomic.Pointer[keySet]
}

func newKeyring(path string) (*keyring, error) {
	kr := &keyring{path: path}
	if _, err := kr.reload(); err != nil {
		return nil, err
	}
	return kr, nil
}

// reload reads the key file again and returns the number of its keys.
func (kr *keyring) reload() (int, error) {
	b, err := os.ReadFile(kr.path)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrKeyFile, err)
	}
	ks, err := parseKeys(kr.path, b)
	if err != nil {
		return 0, err
	}
	kr.keys.Store(ks)
	return len(ks.entries), nil
}

func (kr *keyring) match(key string) (keyEntry, bool) { return kr.keys.Load().match(key) }

// client is who a request is made for: the hex SHA-256 digest of its key
// (owner; empty without keys) and the client's name from the key file.
type client struct {
	owner string
	name  string
	admin bool // a key of Config.AdminKeysFile: any stream's GET and DELETE
}

type clientKey struct{}

func withClient(ctx context.Context, c client) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

// clientOf is the client of a request that passed the key check.
func clientOf(ctx context.Context) client {
	c, _ := ctx.Value(clientKey{}).(client)
	return c
}

// Access levels of endpoints.
const (
	accessOpen    = iota // /healthz
	accessMetrics        // /metrics: a metrics key, else a client key, else open
	accessClient         // everything else: a client key when there are keys
)

// access is the access level of an endpoint of Handler.
func access(endpoint string) int {
	switch endpoint {
	case "healthz":
		return accessOpen
	case "metrics":
		return accessMetrics
	}
	return accessClient
}

// bearer is the token of an Authorization: Bearer header ("" when none).
func bearer(r *http.Request) (token string, given bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

// authenticate checks a request's key for an endpoint and returns the
// client it is made for, or the 401 to answer. The error says whether a
// key was missing or not accepted, never what was sent.
func (s *Server) authenticate(r *http.Request, endpoint string) (client, *httpError) {
	var kr *keyring
	switch access(endpoint) {
	case accessOpen:
		return client{}, nil
	case accessMetrics:
		kr = s.metricsKeys
		if kr == nil {
			kr = s.clientKeys
		}
	default:
		kr = s.clientKeys
	}
	if kr == nil {
		return client{}, nil
	}
	tok, given := bearer(r)
	if tok != "" {
		if e, ok := kr.match(tok); ok {
			c := client{name: e.name}
			if kr == s.clientKeys {
				c.owner = e.owner()
			}
			return c, nil
		}
		if s.adminKeys != nil && endpoint == "streams" {
			if e, ok := s.adminKeys.match(tok); ok {
				return client{name: e.name, admin: true}, nil
			}
		}
	}
	s.m.authFailures.Inc()
	e := errorf(http.StatusUnauthorized, "this endpoint needs an API key: send the header Authorization: Bearer KEY")
	e.header = map[string]string{"WWW-Authenticate": `Bearer realm="subtta"`}
	if given {
		e.msg = "the API key was not accepted (send Authorization: Bearer KEY with a key the server holds)"
		e.header["WWW-Authenticate"] = `Bearer realm="subtta", error="invalid_token"`
	}
	return client{}, e
}

// Reload reads the key files (Config.AuthKeysFile, Config.MetricsKeysFile)
// and the TLS certificate (Config.TLSCertFile, Config.TLSKeyFile) again:
// subtta serve calls it on SIGHUP. A file that cannot be used leaves what
// was loaded from it in place, and its error is returned (all of them
// joined); requests in flight finish under the keys they were accepted
// with.
func (s *Server) Reload() error {
	var errs []error
	for _, kr := range []*keyring{s.clientKeys, s.metricsKeys, s.adminKeys} {
		if kr == nil {
			continue
		}
		n, err := kr.reload()
		if err != nil {
			s.log.Error("serve: reloading keys: keeping the keys loaded before", "file", kr.path, "err", err)
			errs = append(errs, err)
			continue
		}
		s.log.Info("serve: keys reloaded", "file", kr.path, "keys", n)
	}
	if s.limits != nil {
		s.limits.prune(s.clientKeys)
	}
	if s.cert != nil {
		if err := s.cert.reload(); err != nil {
			s.log.Error("serve: reloading the TLS certificate: keeping the one loaded before", "err", err)
			errs = append(errs, err)
		} else {
			s.log.Info("serve: TLS certificate reloaded", "cert", s.cert.certFile)
		}
	}
	return errors.Join(errs...)
}

// errNoStream is the answer for a stream that does not exist, or is
// another key's: the two are not told apart.
func errNoStream(id string) *httpError { return errorf(http.StatusNotFound, "no stream %s", id) }
