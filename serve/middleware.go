package serve

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// wrap builds an endpoint from what every endpoint shares, outermost
// first: metrics (observed), the panic guard (recovered), the key check
// (authenticated), method dispatch (allowMethods), and for a limited
// endpoint, one that does the model's work, the per-key limits
// (keyLimited), the server-wide slots (slotted) and the timeout
// (timeLimited); call runs the method's handler and writes its error as
// JSON. Each is a handler around the next, as net/http composes them.
func (s *Server) wrap(name string, limited bool, methods map[string]handlerFunc) http.Handler {
	h := s.call(methods)
	if limited {
		h = s.timeLimited(h)
		h = s.slotted(h)
		h = s.keyLimited(h)
	}
	h = allowMethods(methods, h)
	h = s.authenticated(name, h)
	h = s.recovered(name, h)
	return s.observed(name, h)
}

// observed counts each request of the endpoint name with its status and
// time (subtta_requests_total and its histogram), whatever answered it.
func (s *Server) observed(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		defer func() { s.m.observe(name, w.code(), time.Since(t0)) }()
		next.ServeHTTP(w, r)
	})
}

// recovered turns a panic below it into a logged 500 (if nothing was
// written yet), so that no panic reaches net/http or the client.
func (s *Server) recovered(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("serve: panic", "endpoint", name, "panic", p)
				if sw, ok := w.(*statusWriter); !ok || sw.status == 0 {
					writeError(w, errorf(http.StatusInternalServerError, "internal error: %v", p))
				}
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticated checks the request's key for the endpoint's access level
// (401 or 403 as authenticate decides) and puts its client in the
// request's context (clientOf).
func (s *Server) authenticated(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, denied := s.authenticate(r, name)
		if denied != nil {
			writeError(w, denied)
			return
		}
		next.ServeHTTP(w, r.WithContext(withClient(r.Context(), c)))
	})
}

// allowMethods answers 404 for an endpoint with no methods and 405 (with
// Allow) for a method it does not take.
func allowMethods(methods map[string]handlerFunc, next http.Handler) http.Handler {
	allowed := slices.Sorted(maps.Keys(methods))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := methods[r.Method]
		switch {
		case len(methods) == 0:
			writeError(w, errorf(http.StatusNotFound, "no such endpoint: %s", quote(r.URL.Path, maxEcho)))
		case !ok:
			e := errorf(http.StatusMethodNotAllowed, "%s takes %v, not %s", quote(r.URL.Path, maxEcho), allowed, quote(r.Method, maxEcho))
			e.header = map[string]string{"Allow": strings.Join(allowed, ", ")}
			writeError(w, e)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// keyLimited admits the request under its key's limits (--key-max-in-flight,
// --key-images-per-second), or answers 429 counting which limit refused it.
func (s *Server) keyLimited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.limits == nil {
			next.ServeHTTP(w, r)
			return
		}
		release, which, e := s.limits.admit(clientOf(r.Context()), time.Now())
		if e != nil {
			s.m.keyLimited.WithLabelValues(which).Inc()
			writeError(w, e)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// slotted runs the request in one of the server's --max-concurrent slots,
// counted in flight, or answers 429 with Retry-After when none is free.
func (s *Server) slotted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		default:
			s.m.rejected.Inc()
			e := errorf(http.StatusTooManyRequests, "more than %d requests at once; retry later", s.cfg.MaxConcurrent)
			e.header = map[string]string{"Retry-After": "1"}
			writeError(w, e)
			return
		}
		s.m.inflight.Inc()
		defer s.m.inflight.Dec()
		next.ServeHTTP(w, r)
	})
}

// timeLimited gives the request --timeout, after which its context ends
// with errTimeout (a 504, classify).
func (s *Server) timeLimited(next http.Handler) http.Handler {
	if s.cfg.Timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeoutCause(r.Context(), s.cfg.Timeout, errTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// call runs the handler of the request's method and writes its error, if
// any, as the HTTP error classify makes of it.
func (s *Server) call(methods map[string]handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := methods[r.Method](w, r); err != nil {
			writeError(w, s.classify(r, err))
		}
	})
}
