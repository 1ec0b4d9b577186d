package serve

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/tta"
)

// A stream's state lives in two files of the state directory:
//
//   - ID.stream: savedStream, gob-encoded, rewritten whole (atomically) after
//     every step;
//   - ID.journal: the encoded images of the stream's first batches, one
//     record per batch, appended after every step until ReplayLimit batches.
//
// The journal is written first: a crash between the two leaves one batch
// too many in the journal, which ID.stream's count leaves out.

const stateFormat = "subtta-serve-stream-v1"

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
	// Params are the stream's LayerNorm values and Carried its Method's
	// carried state (tta.Carrier), nil when it has none.
	Params  []float64
	Carried []float64
	// Journal is the number of batches in ID.journal, which replayed from
	// the source give exactly this state; −1 when the journal was dropped
	// (restore from Params and Carried).
	Journal int
	Saved   time.Time
}

func (s *Server) statePath(id string) string   { return filepath.Join(s.cfg.StateDir, id+".stream") }
func (s *Server) journalPath(id string) string { return filepath.Join(s.cfg.StateDir, id+".journal") }

// persist saves the stream after a step: the batch goes to the journal
// while the journal is kept, then the state file is rewritten. Only the
// stream's worker calls it (and writes st.journal and st.params).
func (s *Server) persist(st *stream, batch []*job) error {
	if s.cfg.StateDir == "" {
		return nil
	}
	st.mu.Lock()
	journal, stats := st.journal, st.stats
	st.mu.Unlock()
	if journal >= 0 {
		if journal < s.cfg.ReplayLimit {
			if err := s.appendJournal(st.id, journal == 0, batch); err != nil {
				return err
			}
			journal++
		} else {
			// From here on a restore starts from the saved values.
			journal = -1
			if err := os.Remove(s.journalPath(st.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		st.mu.Lock()
		st.journal = journal
		st.mu.Unlock()
	}
	sv := savedStream{Format: stateFormat, ID: st.id, ModelVersion: s.cfg.ModelVersion, Dataset: s.cfg.Dataset,
		Method: s.preset.Method, Labels: st.labels, Templates: st.templates, Stats: stats,
		Params: st.params, Journal: journal, Saved: time.Now().UTC()}
	if c, ok := st.method.(tta.Carrier); ok {
		sv.Carried = c.Carried()
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&sv); err != nil {
		return err
	}
	return atomicfile.Write(s.statePath(st.id), buf.Bytes())
}

// appendJournal appends one batch's images to the journal (starting it
// afresh when first is set) and syncs it.
func (s *Server) appendJournal(id string, first bool, batch []*job) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if first {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(s.journalPath(id), flags, 0o644)
	if err != nil {
		return err
	}
	var buf []byte
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(batch)))
	for _, j := range batch {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(j.image)))
		buf = append(buf, j.image...)
	}
	if _, err = f.Write(buf); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readJournal reads the first n batches of the journal and cuts the file
// after them (dropping a batch a crash left beyond the state file's count).
func (s *Server) readJournal(id string, n int) ([][][]byte, error) {
	f, err := os.OpenFile(s.journalPath(id), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var off int64
	u32 := func() (uint32, error) {
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, err
		}
		off += 4
		return binary.LittleEndian.Uint32(b[:]), nil
	}
	batches := make([][][]byte, 0, n)
	for range n {
		k, err := u32()
		if err != nil {
			return nil, fmt.Errorf("journal %s: batch %d: %w", id, len(batches), err)
		}
		if int(k) > s.preset.BatchSize {
			return nil, fmt.Errorf("journal %s: batch %d has %d images", id, len(batches), k)
		}
		var batch [][]byte
		for range k {
			size, err := u32()
			if err != nil {
				return nil, fmt.Errorf("journal %s: batch %d: %w", id, len(batches), err)
			}
			if int64(size) > s.cfg.MaxBodyBytes {
				return nil, fmt.Errorf("journal %s: batch %d: image of %d bytes", id, len(batches), size)
			}
			img := make([]byte, size)
			if _, err := io.ReadFull(r, img); err != nil {
				return nil, fmt.Errorf("journal %s: batch %d: %w", id, len(batches), err)
			}
			off += int64(size)
			batch = append(batch, img)
		}
		batches = append(batches, batch)
	}
	return batches, f.Truncate(off)
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
	if len(sv.Params) != s.params.n {
		return fmt.Errorf("serve: stream %s: %d saved LayerNorm values, the model has %d", sv.ID, len(sv.Params), s.params.n)
	}
	return nil
}

// removeState deletes a stream's files.
func (s *Server) removeState(id string) {
	if s.cfg.StateDir == "" {
		return
	}
	for _, p := range []string{s.statePath(id), s.journalPath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Error("serve: removing stream state", "stream", id, "err", err)
		}
	}
}

// load builds the stream's Method, and restores its saved state if there
// is one: by replaying the journal when it covers the whole stream, else
// from the saved LayerNorm values and carried state.
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
	st.journal = 0
	if s.cfg.StateDir == "" || s.cfg.ReplayLimit < 0 {
		st.journal = -1
	}
	if sv == nil {
		return nil
	}
	t0 := time.Now()
	if sv.Journal >= 0 {
		err := st.replay(sv)
		if err == nil {
			st.stats, st.journal = sv.Stats, sv.Journal
			st.stats.Restored = "exact"
			s.m.restores.WithLabelValues("exact").Inc()
			s.log.Info("serve: stream restored by replay", "stream", st.id, "batches", sv.Journal, "seconds", time.Since(t0).Seconds())
			return nil
		}
		s.log.Warn("serve: stream replay failed; restoring the saved values", "stream", st.id, "err", err)
		if st.method, err = s.newMethod(st.heads); err != nil {
			return err
		}
	}
	st.params = slices.Clone(sv.Params)
	if c, ok := st.method.(tta.Carrier); ok && sv.Carried != nil {
		if err := c.SetCarried(sv.Carried); err != nil {
			return fmt.Errorf("serve: stream %s: %w", st.id, err)
		}
	}
	st.stats, st.journal = sv.Stats, -1
	st.stats.Restored = "snapshot"
	s.m.restores.WithLabelValues("snapshot").Inc()
	if err := os.Remove(s.journalPath(st.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// replay steps a fresh Method through the journal and checks that it ends
// where the saved state is.
func (st *stream) replay(sv *savedStream) error {
	s := st.srv
	batches, err := s.readJournal(st.id, sv.Journal)
	if err != nil {
		return err
	}
	for b, batch := range batches {
		px := make([]float32, 0, len(batch)*s.pre.OutputLen())
		for i, img := range batch {
			p, err := s.decode(img)
			if err != nil {
				return fmt.Errorf("batch %d image %d: %w", b, i, err)
			}
			px = append(px, p...)
		}
		if _, err := s.adapt(st, px, len(batch)); err != nil {
			return fmt.Errorf("batch %d: %w", b, err)
		}
	}
	if !slices.Equal(st.params, sv.Params) {
		return errors.New("the replayed LayerNorm values differ from the saved ones")
	}
	if c, ok := st.method.(tta.Carrier); ok && !slices.Equal(c.Carried(), sv.Carried) {
		return errors.New("the replayed carried state differs from the saved one")
	}
	return nil
}
