package serve

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/subtta/subtta/internal/atomicfile"
)

// A stream's state lives in ID.stream in the state directory: savedStream,
// gob-encoded, rewritten whole (atomically) after every step. It holds the
// Method's whole state (tta.Stateful: LayerNorm values, optimizer moments
// and step counts, the method's memory), so a restore continues the stream
// exactly where it was saved.

const stateFormat = "subtta-serve-stream-v2"

// savedStream is what ID.stream holds.
type savedStream struct {
	Format       string
	ID           string
	ModelVersion string
	Dataset      string
	Method       string
	Labels       []string
	Templates    []string
	Stats        streamStats
	// State is the Method's MarshalBinary.
	State []byte
	Saved time.Time
}

func (s *Server) statePath(id string) string { return filepath.Join(s.cfg.StateDir, id+".stream") }

// persist saves the stream after a step. Only the stream's worker calls it.
func (s *Server) persist(st *stream) error {
	if s.cfg.StateDir == "" {
		return nil
	}
	st.mu.Lock()
	stats := st.stats
	st.mu.Unlock()
	sv := savedStream{Format: stateFormat, ID: st.id, ModelVersion: s.cfg.ModelVersion, Dataset: s.cfg.Dataset,
		Method: s.preset.Method, Labels: st.labels, Templates: st.templates, Stats: stats,
		State: st.state, Saved: time.Now().UTC()}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&sv); err != nil {
		return err
	}
	return atomicfile.Write(s.statePath(st.id), buf.Bytes())
}

// readState reads a stream's saved state, or returns nil when there is
// none.
func (s *Server) readState(id string) (*savedStream, error) {
	if s.cfg.StateDir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(s.statePath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var sv savedStream
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&sv); err != nil || sv.Format != stateFormat || sv.ID != id {
		return nil, fmt.Errorf("serve: %s is not a saved stream of this version (%v)", s.statePath(id), err)
	}
	return &sv, nil
}

// compatible refuses a state saved by another model, method or preset.
func (s *Server) compatible(sv *savedStream) error {
	if sv.ModelVersion != s.cfg.ModelVersion || sv.Method != s.preset.Method || sv.Dataset != s.cfg.Dataset {
		return errorf(http.StatusConflict, "stream %s was saved by model %q with %s (%s); this server runs model %q with %s (%s): DELETE it or use another stream id",
			sv.ID, sv.ModelVersion, sv.Method, sv.Dataset, s.cfg.ModelVersion, s.preset.Method, s.cfg.Dataset)
	}
	return nil
}

// removeState deletes a stream's files.
func (s *Server) removeState(id string) {
	if s.cfg.StateDir == "" {
		return
	}
	if err := os.Remove(s.statePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
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
		if err := s.compatible(sv); err != nil {
			return err
		}
		st.labels, st.templates = sv.Labels, sv.Templates
	}
	if st.heads, err = s.heads.get(st.labels, st.templates, s.preset.PerTemplateHeads); err != nil {
		return err
	}
	if st.method, err = s.newMethod(st.heads); err != nil {
		// The method cannot work with these labels (SubTTA needs three).
		return errorf(http.StatusBadRequest, "stream %s: %s cannot run on these %d labels: %v", st.id, s.preset.Method, len(st.labels), err)
	}
	st.params = slices.Clone(s.source)
	st.stats = streamStats{Created: time.Now().UTC()}
	if sv == nil {
		return nil
	}
	if err := s.restore(st, sv.State); err != nil {
		return fmt.Errorf("serve: stream %s: %s: %w", st.id, s.statePath(st.id), err)
	}
	st.stats = sv.Stats
	st.stats.Restored = true
	s.m.restores.Inc()
	return nil
}
