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
// none.
func (s *Server) readState(id string) (*savedStream, error) {
	if s.store == nil {
		return nil, nil
	}
	return s.store.Load(context.Background(), id)
}

// readHead reads the head of a stream's saved state, or returns nil when
// there is none.
func (s *Server) readHead(id string) (*streamHead, error) {
	if s.store == nil {
		return nil, nil
	}
	return s.store.Head(context.Background(), id)
}

// compatible refuses a state saved by another model, method or preset.
func (s *Server) compatible(sv *streamHead) error {
	if sv.ModelVersion != s.cfg.ModelVersion || sv.Method != s.preset.Method || sv.Dataset != s.cfg.Dataset {
		return errorf(http.StatusConflict, "stream %s was saved by model %q with %s (%s); this server runs model %q with %s (%s): DELETE it or use another stream id",
			sv.ID, sv.ModelVersion, sv.Method, sv.Dataset, s.cfg.ModelVersion, s.preset.Method, s.cfg.Dataset)
	}
	return nil
}

// removeState deletes a stream's saved state, unless it belongs to another
// owner than owner (that state stays). A server still holding the stream
// finds it gone at its next save (errStale) and starts the stream afresh.
func (s *Server) removeState(id, owner string) {
	if s.store == nil {
		return
	}
	ours := func(h *streamHead) bool { return h.Owner == owner }
	if err := s.store.Delete(context.Background(), id, ours); err != nil {
		s.log.Error("serve: removing stream state", "stream", id, "err", err)
	}
}

// load builds the stream's Method, and restores its saved state if there
// is one.
func (st *stream) load() error {
	s := st.srv
	sv, err := s.readState(st.id)
	if err != nil {
		return err
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
// fresh start when the file is gone: another server deleted the stream),
// after a save found the file saved by another server. A stream saved with
// other labels or templates cannot be reloaded in place: the error says so
// (409), and the worker ends so that the stream is loaded anew.
func (st *stream) reload() error {
	s := st.srv
	sv, err := s.readState(st.id)
	if err != nil {
		return err
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
// state sv, or the source state when sv is nil.
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
			return fmt.Errorf("serve: stream %s: %s: %w", st.id, s.store.Where(st.id), err)
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
