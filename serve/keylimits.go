package serve

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// keyLimits are the limits of each client key (Config.KeyMaxInFlight,
// Config.KeyImagesPerSecond): requests in flight and a token bucket of
// images, so that one client cannot take the slots or the steps of the
// others. Without keys every request counts as one client's.
type keyLimits struct {
	maxInFlight int
	perSecond   float64
	burst       int

	mu      sync.Mutex
	clients map[string]*keyLimit // by owner (the key's digest)
}

type keyLimit struct {
	inflight int
	bucket   *rate.Limiter
}

func newKeyLimits(cfg *Config) *keyLimits {
	if cfg.KeyMaxInFlight == 0 && cfg.KeyImagesPerSecond == 0 {
		return nil
	}
	return &keyLimits{maxInFlight: cfg.KeyMaxInFlight, perSecond: cfg.KeyImagesPerSecond, burst: cfg.KeyBurst,
		clients: map[string]*keyLimit{}}
}

// admit takes one request (one image) of the client, or returns the 429 to
// answer, with Retry-After. release gives the request's slot back.
func (l *keyLimits) admit(c client, now time.Time) (release func(), which string, e *httpError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.clients[c.owner]
	if k == nil {
		k = &keyLimit{}
		if l.perSecond > 0 {
			k.bucket = rate.NewLimiter(rate.Limit(l.perSecond), l.burst)
		}
		l.clients[c.owner] = k
	}
	if l.maxInFlight > 0 && k.inflight >= l.maxInFlight {
		e := errorf(http.StatusTooManyRequests, "this key has %d requests in flight, its limit; retry when one is answered", k.inflight)
		e.header = map[string]string{"Retry-After": "1"}
		return nil, "in_flight", e
	}
	if k.bucket != nil {
		r := k.bucket.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			e := errorf(http.StatusTooManyRequests, "this key sends more than %s images per second, its limit; retry later", strconv.FormatFloat(l.perSecond, 'g', -1, 64))
			e.header = map[string]string{"Retry-After": strconv.Itoa(int(math.Ceil(d.Seconds())))}
			return nil, "rate", e
		}
	}
	k.inflight++
	return func() {
		l.mu.Lock()
		k.inflight--
		l.mu.Unlock()
	}, "", nil
}

// prune forgets the limits of keys no longer in the key file with no
// request in flight, after a reload.
func (l *keyLimits) prune(kr *keyring) {
	if kr == nil {
		return
	}
	held := map[string]bool{}
	for _, e := range kr.keys.Load().entries {
		held[e.owner()] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for owner, k := range l.clients {
		if !held[owner] && k.inflight == 0 {
			delete(l.clients, owner)
		}
	}
}
