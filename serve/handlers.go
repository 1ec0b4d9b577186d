package serve

import (
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"net/http"
	"slices"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/clip"
)

// ClassifyResponse is the answer of POST /v1/classify.
type ClassifyResponse struct {
	Model  string    `json:"model"`
	Labels []string  `json:"labels"`
	Probs  []float64 `json:"probs"`  // in label order
	Logits []float64 `json:"logits"` // logit_scale · cos(image, label)
	Label  string    `json:"label"`  // the most probable label
	// RequestID echoes the request's X-Request-Id header.
	RequestID string        `json:"request_id,omitempty"`
	Stream    *StreamAnswer `json:"stream,omitempty"`
}

// StreamAnswer says which step of a stream answered a request.
type StreamAnswer struct {
	ID        string `json:"id"`
	Method    string `json:"method"`
	Batch     int64  `json:"batch"`      // the step's index in the stream, from 0
	BatchSize int    `json:"batch_size"` // the images the step took
	Position  int    `json:"position"`   // this image's row in the batch
	Steps     int    `json:"steps"`      // optimizer steps the batch took
	// Replayed says that the stream had answered a request with this
	// request's Idempotency-Key already: this is that answer, and the
	// stream did not step on the image again.
	Replayed bool `json:"replayed,omitempty"`
	// Adapted says that the stream adapted on the image (or did, for a
	// replayed answer). False: the server could not confirm it holds the
	// stream's latest state (its state store unreachable), and answered
	// with the frozen model (Config.Degraded), without adapting.
	Adapted bool `json:"adapted"`
}

// EmbedResponse is the answer of POST /v1/embed: one feature vector per
// image or text.
type EmbedResponse struct {
	Model      string      `json:"model"`
	Features   [][]float64 `json:"features"`
	Texts      []string    `json:"texts,omitempty"`
	Normalized bool        `json:"normalized"`
}

// StreamStatus is the answer of GET /v1/streams/{id}.
type StreamStatus struct {
	ID        string   `json:"id"`
	Method    string   `json:"method"`
	Labels    []string `json:"labels"`
	Templates []string `json:"templates"`
	InMemory  bool     `json:"in_memory"`
	Pending   int      `json:"pending"` // requests waiting for the next batch
	Images    int64    `json:"images"`
	Batches   int64    `json:"batches"`
	Steps     int64    `json:"steps"`   // optimizer steps
	Skipped   int64    `json:"skipped"` // steps skipped for a non-finite gradient
	// LastLoss are the last batch's losses by name ("align", "mint", ...).
	LastLoss map[string]float64 `json:"last_loss,omitempty"`
	// PrincipalAngles summarise the cosines of the principal angles between
	// the last batch's visual subspace and the text subspace (SubTTA).
	PrincipalAngles *AngleSummary `json:"principal_angles,omitempty"`
	Created         time.Time     `json:"created"`
	// Restored says whether the stream was read back from the state
	// directory (where it continued exactly as saved).
	Restored bool `json:"restored"`
	// Unsaved says that the stream's last save failed: its answered
	// adaptations are in this server's memory only until a save, tried
	// again in the background, succeeds.
	Unsaved bool `json:"unsaved,omitempty"`
	// Guard is the collapse guard's record of the stream, when the guard
	// is on.
	Guard *GuardStatus `json:"guard,omitempty"`
}

// AngleSummary summarises principal-angle cosines.
type AngleSummary struct {
	Rank int     `json:"rank"`
	Mean float64 `json:"mean_cos"`
	Min  float64 `json:"min_cos"`
	Max  float64 `json:"max_cos"`
}

func (s *Server) handleClassify(w http.ResponseWriter, r *http.Request) error {
	in, err := s.readInput(w, r, false)
	if err != nil {
		return err
	}
	if in.image == nil {
		return errorf(http.StatusBadRequest, "no image: send it as the body, or as the image part of a multipart form")
	}
	resp := ClassifyResponse{Model: s.cfg.ModelVersion, RequestID: requestID(r)}
	var logits []float64
	var pred int
	if in.stream == "" {
		labels, templates := in.labels, in.templates
		if labels == nil {
			labels = s.cfg.Labels
		}
		if templates == nil {
			templates = s.cfg.Templates
		}
		h, err := s.heads.get(labels, templates, false)
		if err != nil {
			return err
		}
		f, err := s.frozenFeatures(r.Context(), in.pixels, 1)
		if err != nil {
			return err
		}
		logits, pred = h.frozenLogits(f, s.cfg.Model.LogitScale)
		resp.Labels = labels
	} else {
		key, err := idempotencyKey(r)
		if err != nil {
			return err
		}
		var digest [8]byte
		if key != "" {
			sum := sha256.Sum256(in.image)
			copy(digest[:], sum[:])
		}
		var a answer
		for range 3 { // a stream closed under us is looked up again
			st, err := s.stream(r.Context(), in.stream, clientOf(r.Context()).owner, in.labels, in.templates)
			if err != nil {
				return err
			}
			a, err = st.submit(r.Context(), in.pixels, key, digest)
			if errors.Is(err, errStreamClosed) {
				continue
			}
			if err != nil {
				return err
			}
			resp.Labels = st.labels
			break
		}
		if a.logits == nil {
			return errorf(http.StatusServiceUnavailable, "stream %s keeps closing; retry", in.stream)
		}
		logits, pred = a.logits, a.pred
		resp.Stream = &StreamAnswer{ID: in.stream, Method: s.preset.Method, Batch: a.batch, BatchSize: a.size, Position: a.position, Steps: a.steps, Replayed: a.replayed, Adapted: !a.frozen}
	}
	resp.Logits, resp.Probs, resp.Label = logits, clip.SoftmaxRow(logits), resp.Labels[pred]
	if err := r.Context().Err(); err != nil && !errors.Is(context.Cause(r.Context()), errTimeout) {
		return err // the client has gone
	}
	// A stream's answer is written even past Timeout: the stream adapted
	// on the image (submit).
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// frozenFeatures encodes images with the source weights, concurrently with
// other frozen requests and with streams' steps.
func (s *Server) frozenFeatures(ctx context.Context, px []float32, n int) (*mat.Dense, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := s.frozen.EncodeImage(px, n)
	if err != nil {
		return nil, err
	}
	sh := f.Value().Shape()
	return mat.NewDense(sh[0], sh[1], f.Value().Data().F64()), nil
}

func (s *Server) handleEmbed(w http.ResponseWriter, r *http.Request) error {
	in, err := s.readInput(w, r, true)
	if err != nil {
		return err
	}
	switch { // readInput refused classify's parameters
	case in.image != nil && len(in.texts) > 0:
		return errorf(http.StatusBadRequest, "give an image or texts, not both")
	case in.image == nil && len(in.texts) == 0:
		return errorf(http.StatusBadRequest, "nothing to embed: send an image, or JSON {\"texts\": [...]}")
	case len(in.texts) > s.cfg.MaxLabels:
		return errorf(http.StatusBadRequest, "%d texts, more than the limit of %d", len(in.texts), s.cfg.MaxLabels)
	}
	resp := EmbedResponse{Model: s.cfg.ModelVersion, Normalized: in.normalize}
	var f *mat.Dense
	if in.image != nil {
		if f, err = s.frozenFeatures(r.Context(), in.pixels, 1); err != nil {
			return err
		}
	} else {
		ids := make([][]int, len(in.texts))
		for i, t := range in.texts {
			if err := checkText(t, s.cfg.MaxLabelBytes); err != nil {
				return errorf(http.StatusBadRequest, "text %d: %v", i, err)
			}
			if ids[i], err = s.cfg.Tokenizer.Tokenize(t, s.cfg.Model.Config.Text.ContextLength, true); err != nil {
				return errorf(http.StatusBadRequest, "text %d: %v", i, err)
			}
		}
		t, err := s.frozen.EncodeText(ids)
		if err != nil {
			return err
		}
		sh := t.Value().Shape()
		f = mat.NewDense(sh[0], sh[1], t.Value().Data().F64())
		resp.Texts = in.texts
	}
	n, _ := f.Dims()
	for i := range n {
		row := slices.Clone(f.RawRowView(i))
		if in.normalize {
			var ss float64
			for _, v := range row {
				ss += v * v
			}
			if ss > 0 {
				for j := range row {
					row[j] /= math.Sqrt(ss)
				}
			}
		}
		resp.Features = append(resp.Features, row)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) handleStreamGet(w http.ResponseWriter, r *http.Request) error {
	id, err := streamID(r.PathValue("id"))
	if err != nil {
		return err
	}
	c := clientOf(r.Context())
	owner := c.owner
	s.mu.Lock()
	st, ok := s.streams[id]
	s.mu.Unlock()
	// Another key's stream is not found (but by an admin); a stream whose
	// loading failed is on its way out.
	ok = ok && (st.owner == owner || c.admin) && !(isClosed(st.ready) && st.loadErr != nil)
	loaded := ok && isClosed(st.ready) && st.loadErr == nil
	// A stream in memory is reported from memory, the head of its saved
	// state saying whether another server saved it since. Any other is
	// reported from its saved state read whole and checked, as a request
	// to it would read it, so that a damaged state gets a request's 500
	// rather than the counters of its head.
	var sv *streamHead
	if loaded {
		sv, err = s.readHead(id) // the head alone: counters, owner, stamp
	} else {
		sv, err = s.peekState(id)
	}
	if sv != nil && sv.Owner != owner && !c.admin {
		sv = nil
	}
	if loaded {
		if permanent(err) {
			return s.storeError(id, err) // as its next request gets
		}
		if err != nil {
			// The state cannot be read now: the stream's next save
			// will say so; its copy in memory is what there is.
			s.log.Error("serve: reading stream state", "stream", id, "err", err)
			sv = nil
		}
		st.mu.Lock()
		status := StreamStatus{ID: id, Method: s.preset.Method, Labels: st.labels, Templates: st.templates, InMemory: true,
			Pending: len(st.pending), Unsaved: st.unsaved}
		stats := st.stats
		if sv != nil && (!st.onDisk || sv.Stamp != st.stamp) && !st.unsaved {
			// Another server has saved the stream since this one read
			// it: its counters are the stream's.
			stats = sv.Stats
		}
		status.fill(stats)
		st.mu.Unlock()
		writeJSON(w, http.StatusOK, status)
		return nil
	}
	if err != nil {
		return s.storeError(id, err)
	}
	if sv == nil {
		if ok {
			return errorf(http.StatusConflict, "stream %s is being loaded", id)
		}
		return errNoStream(id)
	}
	status := StreamStatus{ID: id, Method: sv.Method, Labels: sv.Labels, Templates: sv.Templates}
	status.fill(sv.Stats)
	writeJSON(w, http.StatusOK, status)
	return nil
}

func (st *StreamStatus) fill(s streamStats) {
	st.Images, st.Batches, st.Steps, st.Skipped = s.Images, s.Batches, s.Steps, s.Skipped
	st.LastLoss, st.Created, st.Restored = s.LastLoss, s.Created, s.Restored
	if g := s.Guard; g.Resets > 0 || g.BadRun > 0 || len(g.Recent) > 0 {
		st.Guard = g.status()
	}
	if len(s.Cosines) > 0 {
		a := &AngleSummary{Rank: len(s.Cosines), Min: math.Inf(1), Max: math.Inf(-1)}
		for _, c := range s.Cosines {
			a.Mean += c / float64(len(s.Cosines))
			a.Min, a.Max = min(a.Min, c), max(a.Max, c)
		}
		st.PrincipalAngles = a
	}
}

func (s *Server) handleStreamDelete(w http.ResponseWriter, r *http.Request) error {
	id, err := streamID(r.PathValue("id"))
	if err != nil {
		return err
	}
	c := clientOf(r.Context())
	owner := c.owner
	s.mu.Lock()
	st, ok := s.streams[id]
	if ok && st.owner != owner && !c.admin {
		s.mu.Unlock()
		return errNoStream(id) // another key's
	}
	var failed *stream // a stream whose loading failed, on its way out
	if ok && isClosed(st.ready) && st.loadErr != nil {
		ok, failed = false, st // its state, if any, is looked at below
	}
	if !ok {
		// Not in memory: its state goes now, under the lock, so that no
		// request reads it back meanwhile.
		var was *stamp
		if k, known := s.known[id]; known {
			was = &k
		}
		deleted, err := s.removeState(id, owner, c.admin, was)
		if err == nil {
			delete(s.known, id)
		}
		s.mu.Unlock()
		switch {
		case errors.Is(err, errOwnerUnknown):
			return errorf(http.StatusConflict, "stream %s: its saved state is damaged, and whose it is cannot be read: only an admin key (subtta serve --admin-keys) may delete it", id)
		case err != nil:
			return s.storeError(id, err)
		case !deleted:
			return errNoStream(id)
		}
		if failed != nil {
			// Gone before the answer, so that no later request gets its
			// loading error.
			select {
			case <-failed.exited:
			case <-r.Context().Done():
				return r.Context().Err()
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
		return nil
	}
	s.mu.Unlock()
	st.mu.Lock()
	st.deleted, st.closing = true, true
	st.deletedBy = c
	st.mu.Unlock()
	st.wake()
	select {
	case <-st.exited:
	case <-r.Context().Done():
		return r.Context().Err()
	}
	if he := (*httpError)(nil); errors.As(st.loadErr, &he) && he.status == http.StatusNotFound {
		return he // the state is another key's: it stays
	}
	if st.deleteErr != nil {
		return s.storeError(id, st.deleteErr)
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
	return nil
}
