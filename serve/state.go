package serve

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/internal/filelock"
)

// A stream's state lives in ID.stream in the state directory: savedStream,
// gob-encoded, rewritten whole (atomically) after every step. It holds the
// Method's whole state (tta.Method.MarshalBinary: LayerNorm values, optimizer moments
// and step counts, the method's memory), so a restore continues the stream
// exactly where it was saved.
//
// Several servers may share a state directory (or one server may hold a
// stream that another has stepped since). Each saved state carries a stamp
// (Birth, Generation), and a save replaces the file only if the file still
// carries the stamp this server read or last wrote, checked and written
// under an exclusive lock on .ID.stream.lock (internal/filelock): a
// compare-and-swap. When it does not, the save fails with errStale, and the
// stream's worker reloads the file and steps the batch again, before
// answering it, this time holding the lock from the reading to the saving.

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
	// Stamp says which save of which stream this is. A file written before
	// stamps existed decodes with the zero stamp, which is then its stamp.
	Stamp stamp
	// Owner is the hex SHA-256 digest of the API key that created the
	// stream ("": created without keys). Only that key finds the stream.
	Owner string
}

// stamp identifies one saved version of a stream: the stream (Birth, drawn
// at random when the stream is first created, so that a stream deleted and
// created again is another one) and its number of saves (Generation).
type stamp struct {
	Birth, Generation uint64
}

// errStale is persist's error when the file was saved by someone else
// since this server read or wrote it.
var errStale = errors.New("saved by another server since this one read it")

func (s *Server) statePath(id string) string { return filepath.Join(s.cfg.StateDir, id+".stream") }

// lockPath is the lock file of a stream's state file: hidden, and left
// behind when the stream is deleted (filelock).
func (s *Server) lockPath(id string) string {
	return filepath.Join(s.cfg.StateDir, "."+id+".stream.lock")
}

// persist saves the stream after a step, if its file still carries the
// stamp st read or last wrote (errStale if not), under the file's lock:
// held, when the caller holds it, or taken here. Only the stream's worker
// calls it.
func (s *Server) persist(st *stream, held *filelock.Lock) (err error) {
	if s.cfg.StateDir == "" {
		return nil
	}
	path := s.statePath(st.id)
	if held == nil {
		lock, err := filelock.Acquire(s.lockPath(st.id))
		if err != nil {
			return err
		}
		defer func() {
			if uerr := lock.Unlock(); err == nil {
				err = uerr
			}
		}()
	}
	cur, err := s.readState(st.id)
	if err != nil {
		return err
	}
	st.mu.Lock()
	stats, onDisk, last := st.stats, st.onDisk, st.stamp
	st.mu.Unlock()
	if (cur != nil) != onDisk || cur != nil && cur.Stamp != last {
		return errStale
	}
	next := stamp{Birth: last.Birth, Generation: last.Generation + 1}
	sv := savedStream{Format: stateFormat, ID: st.id, ModelVersion: s.cfg.ModelVersion, Dataset: s.cfg.Dataset,
		Method: s.preset.Method, Labels: st.labels, Templates: st.templates, Stats: stats,
		State: st.state, Saved: time.Now().UTC(), Stamp: next, Owner: st.owner}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&sv); err != nil {
		return err
	}
	if err := atomicfile.Write(path, buf.Bytes()); err != nil {
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

// checkFoldedNames refuses a state directory that holds the file of a
// stream id with capitals, saved before ids were folded to lower case: its
// stream would not be found under its folded id. It names the first such
// file and the name to give it.
func checkFoldedNames(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("serve: state directory: %w", err)
	}
	var bad []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".stream")
		if ok && validID.MatchString(id) && id != strings.ToLower(id) {
			bad = append(bad, e.Name())
		}
	}
	if len(bad) == 0 {
		return nil
	}
	more := ""
	if len(bad) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(bad)-1)
	}
	return fmt.Errorf("serve: state directory %s holds %s%s, the file of a stream id with capitals, saved before stream ids were folded to lower case: rename it to %s (where that name is taken, keep one of the two)",
		dir, bad[0], more, strings.ToLower(bad[0]))
}

// compatible refuses a state saved by another model, method or preset.
func (s *Server) compatible(sv *savedStream) error {
	if sv.ModelVersion != s.cfg.ModelVersion || sv.Method != s.preset.Method || sv.Dataset != s.cfg.Dataset {
		return errorf(http.StatusConflict, "stream %s was saved by model %q with %s (%s); this server runs model %q with %s (%s): DELETE it or use another stream id",
			sv.ID, sv.ModelVersion, sv.Method, sv.Dataset, s.cfg.ModelVersion, s.preset.Method, s.cfg.Dataset)
	}
	return nil
}

// removeState deletes a stream's file, under its lock, so that no save
// of another server lands in between its check and its rename. A server
// still holding the stream finds the file gone at its next save (errStale)
// and starts the stream afresh. Its empty lock file stays (filelock). A
// file of another owner than owner stays.
func (s *Server) removeState(id, owner string) {
	if s.cfg.StateDir == "" {
		return
	}
	lock, err := filelock.Acquire(s.lockPath(id))
	if err != nil {
		s.log.Error("serve: removing stream state", "stream", id, "err", err)
		return
	}
	defer lock.Unlock()
	if sv, err := s.readState(id); err == nil && sv != nil && sv.Owner != owner {
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
		if sv.Owner != st.owner {
			return errNoStream(st.id)
		}
		if err := s.compatible(sv); err != nil {
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
		if err := s.compatible(sv); err != nil {
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
			return fmt.Errorf("serve: stream %s: %s: %w", st.id, s.statePath(st.id), err)
		}
		stats = sv.Stats
		stats.Restored = true
		s.m.restores.Inc()
	}
	st.mu.Lock()
	st.stats = stats
	st.onDisk = sv != nil
	st.stamp = fresh
	if sv != nil {
		st.stamp = sv.Stamp
	}
	st.mu.Unlock()
	return nil
}
