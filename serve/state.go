package serve

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"
)

// A stream's state lives in the server's state store (store.go): a folder
// with one file ID.stream per stream (store_dir.go), or a Redis database
// (store_redis.go). It is savedStream, encoded as statefile.go says: a
// small head (the stream's stamp, owner, labels and counters) followed by
// the body, rewritten whole after every step. The body holds the Method's
// whole state (tta.Method.MarshalBinary: LayerNorm values, optimizer
// moments and step counts, the method's memory), so a restore continues
// the stream exactly where it was saved, and the answers to the stream's
// most recent requests that carried an Idempotency-Key, so that a retried
// request is answered once. GET /v1/streams/{id}, DELETE's owner check and
// a save's compare-and-swap read the head alone.
//
// Several servers may share a store (or one server may hold a stream that
// another has stepped since). Each saved state carries a stamp (Birth,
// Generation), and a save replaces the stored state only if it still
// carries the stamp this server read or last wrote: a compare-and-swap.
// When it does not, the save fails with errStale, and the stream's worker
// reloads the state and steps the batch again, before answering it.

// streamHead is the head of a stream's saved state: what is read without
// the rest to report the stream, check its owner or compare its stamp.
type streamHead struct {
	ID           string
	ModelVersion string
	Dataset      string
	Method       string
	Labels       []string
	Templates    []string
	Stats        streamStats
	Saved        time.Time
	// Stamp says which save of which stream this is. A state written
	// before stamps existed decodes with the zero stamp, which is then its
	// stamp.
	Stamp stamp
	// Owner is the hex SHA-256 digest of the API key that created the
	// stream ("": created without keys). Only that key finds the stream.
	Owner string
	// Deleted marks a tombstone: the stream, whose last state carried
	// Stamp, was deleted through the API (stateStore.Delete). A store
	// that holds one for a stream tells a deleted stream from a lost one.
	Deleted bool
}

// savedStream is what the store holds for a stream: its head, the
// Method's state and the saved answers.
type savedStream struct {
	streamHead
	// State is the Method's MarshalBinary.
	State []byte
	// Answers are the answers to the stream's most recent requests that
	// carried an Idempotency-Key, oldest first, at most Config.RecentAnswers.
	Answers []savedAnswer
}

// savedAnswer is the answer to a request that carried an Idempotency-Key:
// a request with the same key is answered with it, without a step.
type savedAnswer struct {
	Key string
	// Image is the start of the SHA-256 of the request's image: a key
	// sent again with another image is refused.
	Image                 [8]byte
	Logits                []float64
	Pred                  int
	Batch                 int64
	Size, Position, Steps int
}

// stamp identifies one saved version of a stream: the stream (Birth, drawn
// at random when the stream is first created, so that a stream deleted and
// created again is another one) and its number of saves (Generation).
type stamp struct {
	Birth, Generation uint64
}

// errStale is a store's error when the stream was saved by someone else
// since this server read or wrote it.
var errStale = errors.New("saved by another server since this one read it")

// persist saves the stream after a step, if its stored state still carries
// the stamp st read or last wrote (errStale if not). Only the stream's
// worker calls it.
func (s *Server) persist(st *stream) error {
	if s.store == nil {
		return nil
	}
	st.mu.Lock()
	stats, stored, last := st.stats, st.onDisk, st.stamp
	answers := st.answers
	st.mu.Unlock()
	next := stamp{Birth: last.Birth, Generation: last.Generation + 1}
	sv := savedStream{
		streamHead: streamHead{ID: st.id, ModelVersion: s.cfg.ModelVersion, Dataset: s.cfg.Dataset,
			Method: s.preset.Method, Labels: st.labels, Templates: st.templates, Stats: stats,
			Saved: time.Now().UTC(), Stamp: next, Owner: st.owner},
		State: st.state, Answers: answers}
	var prev *stamp
	if stored {
		prev = &last
	}
	if err := s.store.Save(context.Background(), &sv, prev); err != nil {
		return err
	}
	st.mu.Lock()
	st.stamp, st.onDisk = next, true
	st.mu.Unlock()
	return nil
}

// readState reads a stream's saved state, or returns nil when there is
// none; a tombstone is returned as it is (Deleted). Errors are the
// store's: storeError turns them into a client's.
func (s *Server) readState(id string) (*savedStream, error) {
	if s.store == nil {
		return nil, nil
	}
	return s.store.Load(context.Background(), id)
}

// peekState reads a stream's saved state whole, checking it as a
// request's load would but setting nothing aside (stateStore.Peek), and
// returns its head; nil when there is none or a tombstone.
func (s *Server) peekState(id string) (*streamHead, error) {
	if s.store == nil {
		return nil, nil
	}
	sv, err := s.store.Peek(context.Background(), id)
	if sv == nil || sv.Deleted {
		return nil, err
	}
	return &sv.streamHead, err
}

// readHead reads the head of a stream's saved state, or returns nil when
// there is none or a tombstone.
func (s *Server) readHead(id string) (*streamHead, error) {
	if s.store == nil {
		return nil, nil
	}
	h, err := s.store.Head(context.Background(), id)
	if h != nil && h.Deleted {
		h = nil
	}
	return h, err
}

// storeError is what a client is told of a store's error about stream
// id: a damaged state, or a state file that is not a regular file, is a
// 500 naming the stream and why (never where it is kept: the log says
// that), a store that cannot be read a 503 with Retry-After. It is logged
// in full.
func (s *Server) storeError(id string, err error) error {
	var he *httpError
	if err == nil || errors.As(err, &he) {
		return err
	}
	var be *badStateError
	if errors.As(err, &be) {
		s.m.damaged.Inc()
		s.log.Error("serve: damaged stream state", "stream", id, "err", err)
		msg := fmt.Sprintf("stream %s: its saved state is damaged (%s)", id, be.reason())
		switch {
		case be.aside != "" && be.err != errSetAside:
			msg += "; it was set aside for the operator, and the stream is refused until it is deleted (DELETE /v1/streams/" + id + ")"
		case be.aside == "":
			msg += "; the stream is refused until it is deleted (DELETE /v1/streams/" + id + ")"
		}
		return errorf(http.StatusInternalServerError, "%s", msg)
	}
	s.m.storeErrors.Inc()
	var nf *notFileError
	if errors.As(err, &nf) {
		s.log.Error("serve: stream state is not a regular file: the stream is refused until it is removed", "stream", id, "err", err)
		return errorf(http.StatusInternalServerError, "stream %s: its state file in the state store is %s, not a regular file: the operator must remove it (the server log says where); the stream is refused until then", id, nf.kind)
	}
	s.log.Error("serve: state store", "stream", id, "err", err)
	return &httpError{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "2"},
		msg: fmt.Sprintf("stream %s: the state store cannot be read now; retry later", id)}
}

// lost is the error for stream id, saved before (last with the stamp
// was) and not deleted through the API, whose state the store no longer
// has: the store lost it (a Redis restarted without persistence, a file
// removed by hand). With Config.AllowLostState the stream starts afresh
// instead (nil), logged.
func (s *Server) lost(id string, was stamp) error {
	s.m.lostStates.Inc()
	if s.cfg.AllowLostState {
		s.log.Warn("serve: stream's saved state is missing from the store, and it was not deleted through the API: starting it afresh (AllowLostState)",
			"stream", id, "where", s.store.Where(id), "last_saved_generation", was.Generation)
		return nil
	}
	s.log.Error("serve: stream's saved state is missing from the store, and it was not deleted through the API: refusing the stream (restore the state, or DELETE the stream to start it afresh)",
		"stream", id, "where", s.store.Where(id), "last_saved_generation", was.Generation)
	return errorf(http.StatusInternalServerError, "stream %s: its saved state (generation %d) is missing from the state store, and the stream was not deleted: the operator may restore it; DELETE the stream to start it afresh", id, was.Generation)
}

// compatible refuses a state saved by another model, method or preset.
func (s *Server) compatible(sv *streamHead) error {
	if sv.ModelVersion != s.cfg.ModelVersion || sv.Method != s.preset.Method || sv.Dataset != s.cfg.Dataset {
		return errorf(http.StatusConflict, "stream %s was saved by model %q with %s (%s); this server runs model %q with %s (%s): DELETE it or use another stream id",
			sv.ID, sv.ModelVersion, sv.Method, sv.Dataset, s.cfg.ModelVersion, s.preset.Method, s.cfg.Dataset)
	}
	return nil
}

// errOwnerUnknown is removeState's error for a state proven damaged whose
// owner cannot be read, for a client that is not an admin.
var errOwnerUnknown = errors.New("the saved state is damaged and its owner cannot be read")

// removeState deletes a stream's saved state (leaving a tombstone), if it
// is owner's, or if admin. A state proven damaged, whose owner cannot be
// read, goes only for an admin, or when the server has no client keys
// (errOwnerUnknown otherwise). A stream without a state that this server
// knows was saved (was, when not nil) gets a tombstone all the same, so
// that the servers holding it find it deleted, not lost. deleted says
// whether something went; an error deletes nothing.
func (s *Server) removeState(id, owner string, admin bool, was *stamp) (deleted bool, err error) {
	if s.store == nil {
		return false, nil
	}
	unknown := false
	allow := func(h *streamHead) bool {
		switch {
		case admin:
			return true
		case h == nil:
			unknown = s.clientKeys != nil
			return !unknown
		}
		return h.Owner == owner
	}
	ctx := context.Background()
	deleted, err = s.store.Delete(ctx, id, allow)
	switch {
	case err != nil:
		return false, err
	case unknown:
		return false, errOwnerUnknown
	case !deleted && was != nil:
		// Nothing in the store (it lost the state): a tombstone, where
		// there is still nothing.
		if err := s.store.Save(ctx, tombstone(id, *was, owner), nil); err != nil && !errors.Is(err, errStale) {
			return false, err
		}
		deleted = true
	}
	return deleted, nil
}

// load builds the stream's Method, and restores its saved state if there
// is one.
func (st *stream) load() error {
	s := st.srv
	sv, err := s.readState(st.id)
	if err != nil {
		return s.storeError(st.id, err)
	}
	if sv != nil && sv.Deleted {
		sv = nil // deleted through the API: a new stream
	} else if sv == nil {
		s.mu.Lock()
		was, known := s.known[st.id]
		s.mu.Unlock()
		if known {
			if err := s.lost(st.id, was); err != nil {
				return err
			}
			s.mu.Lock()
			delete(s.known, st.id)
			s.mu.Unlock()
		}
	}
	if sv != nil {
		if sv.Owner != st.owner {
			return errNoStream(st.id)
		}
		if err := s.compatible(&sv.streamHead); err != nil {
			return err
		}
		st.labels, st.templates = sv.Labels, sv.Templates
	}
	if n, why := minLabels(s.preset); len(st.labels) < n {
		return errorf(http.StatusBadRequest, "stream %s: %s needs at least %d labels%s; %d given", st.id, s.preset.Method, n, why, len(st.labels))
	}
	if st.heads, err = s.heads.get(st.labels, st.templates, s.preset.PerTemplateHeads); err != nil {
		return err
	}
	return st.install(sv)
}

// reload drops the stream's Method and counters for those saved (or for a
// fresh start when a tombstone says another server deleted the stream),
// after a save found the state saved by another server. A stream saved
// before whose state is missing, without a tombstone, is lost (lost). A
// stream saved with other labels or templates cannot be reloaded in
// place: the error says so (409), and the worker ends so that the stream
// is loaded anew.
func (st *stream) reload() error {
	s := st.srv
	sv, err := s.readState(st.id)
	if err != nil {
		return s.storeError(st.id, err)
	}
	st.mu.Lock()
	onDisk, was := st.onDisk, st.stamp
	st.mu.Unlock()
	switch {
	case sv != nil && sv.Deleted:
		sv = nil
	case sv == nil && onDisk:
		if err := s.lost(st.id, was); err != nil {
			return err
		}
	}
	if sv != nil {
		if sv.Owner != st.owner {
			// Deleted and created again by another key meanwhile.
			return errNoStream(st.id)
		}
		if err := s.compatible(&sv.streamHead); err != nil {
			return err
		}
		if !slices.Equal(sv.Labels, st.labels) || !slices.Equal(sv.Templates, st.templates) {
			return errorf(http.StatusConflict, "stream %s was created at the same time by another server with other labels or templates (%d labels, %q, …); retry to use its labels, or use another stream id",
				st.id, len(sv.Labels), sv.Templates[0])
		}
	}
	return st.install(sv)
}

// install gives the stream a new Method over its heads, with the saved
// state sv, or the source state when sv is nil. A state whose LayerNorm
// values are not all finite is refused as damaged.
func (st *stream) install(sv *savedStream) error {
	s := st.srv
	m, err := s.newMethod(st.heads)
	if err != nil {
		s.log.Error("serve: building the stream's method", "stream", st.id, "labels", len(st.labels), "err", err)
		return errorf(http.StatusBadRequest, "stream %s: %s cannot adapt on these %d labels (the server log says why)", st.id, s.preset.Method, len(st.labels))
	}
	s.model.Lock() // st.method, params and state are read under it
	st.method, st.params, st.state = m, slices.Clone(s.source), nil
	s.model.Unlock()
	stats := streamStats{Created: time.Now().UTC()}
	fresh := stamp{Birth: rand.Uint64()}
	if sv != nil {
		if err := s.restore(st, sv.State); err != nil {
			s.log.Error("serve: restoring stream", "stream", st.id, "where", s.store.Where(st.id), "err", err)
			return errorf(http.StatusInternalServerError, "stream %s: its saved state does not fit %s (the server log says why)", st.id, s.preset.Method)
		}
		s.model.Lock()
		bad := slices.IndexFunc(st.params, func(v float64) bool { return !isFinite(v) })
		s.model.Unlock()
		if bad >= 0 {
			return s.storeError(st.id, &badStateError{where: s.store.Where(st.id), err: fmt.Errorf("LayerNorm value %d is not finite", bad)})
		}
		stats = sv.Stats
		stats.Restored = true
		s.m.restores.Inc()
	}
	st.mu.Lock()
	st.stats = stats
	st.onDisk = sv != nil
	st.stamp = fresh
	st.answers = nil
	if sv != nil {
		st.stamp = sv.Stamp
		st.answers = sv.Answers
	}
	st.mu.Unlock()
	return nil
}

// recentAnswers is the stream's answers followed by those of a step
// (answers of jobs without a key are left out), the oldest dropped beyond
// the window of Config.RecentAnswers.
func (s *Server) recentAnswers(old []savedAnswer, jobs []*job, got []answer) []savedAnswer {
	out := slices.Clone(old)
	for i, j := range jobs {
		if j.key == "" || got[i].err != nil {
			continue
		}
		a := got[i]
		out = append(out, savedAnswer{Key: j.key, Image: j.image, Logits: a.logits, Pred: a.pred,
			Batch: a.batch, Size: a.size, Position: a.position, Steps: a.steps})
	}
	if extra := len(out) - s.cfg.RecentAnswers; extra > 0 {
		out = slices.Delete(out, 0, extra)
	}
	return out
}
