package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/subtta/subtta/internal/filelock"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
)

// validID is what a stream id may look like: it names the stream's files in
// the state directory.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// streamID checks a stream id from a request and folds it to lower case:
// CAM1 and cam1 are one stream, so that its file is one file on every file
// system, whether it tells case apart or not.
func streamID(id string) (string, error) {
	if !validID.MatchString(id) {
		return "", errorf(http.StatusBadRequest, "stream %s: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", quote(id, maxIDEcho))
	}
	return strings.ToLower(id), nil
}

// stream is one client's adapting classifier: a Method over the shared
// model, the stream's own LayerNorm values, and the requests waiting for
// its next batch. Its worker goroutine (run) loads it, then takes batches
// one after another.
type stream struct {
	srv       *Server
	id        string
	owner     string // the hex SHA-256 digest of the key that created it ("": none)
	labels    []string
	templates []string
	heads     *heads
	method    tta.Method
	params    []float64 // this stream's LayerNorm values (the model holds the source ones)
	state     []byte    // the Method's state after the last step, when there is a state directory

	ready   chan struct{} // closed when loaded, or when loading failed (loadErr)
	loadErr error
	exited  chan struct{} // closed when the worker has ended and the stream left the map
	kick    chan struct{} // wakes the worker (capacity 1)
	used    int64         // Server.clock at the last use; guarded by srv.mu

	mu      sync.Mutex
	pending []*job
	busy    bool // a batch is being stepped and saved
	closing bool // takes no more requests; set by stop, delete or eviction
	deleted bool // the stream is being deleted: waiting requests fail
	unsaved bool // the last save failed: evicting would lose adaptation
	stats   streamStats
	onDisk  bool  // the stream has a state file, read or written by this server
	stamp   stamp // that file's stamp, or the Birth its first save will carry
}

// streamStats are a stream's counters, saved with its state.
type streamStats struct {
	Images   int64
	Batches  int64
	Steps    int64
	Skipped  int64
	LastLoss map[string]float64
	Cosines  []float64 // principal-angle cosines of the last batch, when it aligned
	Created  time.Time
	Restored bool // read back from the state directory
	Guard    guardStats
}

// job is one request waiting for its stream's batch.
type job struct {
	ctx     context.Context
	pixels  []float32
	arrived time.Time
	done    chan answer // capacity 1: the worker never blocks on it
	taken   bool        // in a batch being stepped; guarded by the stream's mu
}

// answer is a job's outcome: its row of the batch's prediction.
type answer struct {
	logits   []float64
	pred     int
	batch    int64 // the batch's index in the stream
	size     int   // the batch's size
	position int   // the job's row in the batch
	steps    int   // optimizer steps the batch took
	err      error
}

var (
	// errStreamClosed sends a request that found its stream closing back
	// to look the stream up again.
	errStreamClosed = errors.New("stream closed")
	errDraining     = &httpError{status: http.StatusServiceUnavailable, msg: "the server is shutting down", header: map[string]string{"Retry-After": "5"}}
)

// stream returns the stream id of owner (the digest of the client's key,
// "" without keys), created (or read back from the state directory) if it
// is not in memory; another owner's stream is not found (404). labels and
// templates, when not nil, must be the stream's own.
func (s *Server) stream(ctx context.Context, id, owner string, labels, templates []string) (*stream, error) {
	for {
		st, err := s.lookup(id, owner, labels, templates)
		if err != nil {
			return nil, err
		}
		select {
		case <-st.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if st.loadErr != nil && st.owner == owner {
			return nil, st.loadErr
		}
		st.mu.Lock()
		closing := st.closing
		st.mu.Unlock()
		if st.owner != owner && !closing {
			// Another key's stream. (One that another key failed to
			// load is closing: once it has left, this key may find
			// the id free, or its own file.)
			return nil, errNoStream(id)
		}
		if closing {
			// Evicted or deleted under our feet: wait until it has left,
			// then look again.
			select {
			case <-st.exited:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if labels != nil && !slices.Equal(labels, st.labels) {
			return nil, errorf(http.StatusConflict, "stream %s classifies %d other labels (%s, …); give none, or use another stream", id, len(st.labels), st.labels[0])
		}
		if templates != nil && !slices.Equal(templates, st.templates) {
			return nil, errorf(http.StatusConflict, "stream %s uses other templates (%q, …); give none, or use another stream", id, st.templates[0])
		}
		return st, nil
	}
}

// lookup finds or starts the stream, evicting the least recently used idle
// stream when MaxStreams are in memory. A new stream belongs to owner.
func (s *Server) lookup(id, owner string, labels, templates []string) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil, errDraining
	}
	s.clock++
	if st, ok := s.streams[id]; ok {
		st.used = s.clock
		return st, nil
	}
	active := 0 // streams not already on their way out
	for _, st := range s.streams {
		st.mu.Lock()
		if !st.closing {
			active++
		}
		st.mu.Unlock()
	}
	if active >= s.cfg.MaxStreams {
		if err := s.evictLocked(); err != nil {
			return nil, err
		}
	}
	if labels == nil {
		labels = s.cfg.Labels
	}
	if templates == nil {
		templates = s.cfg.Templates
	}
	st := &stream{srv: s, id: id, owner: owner, labels: labels, templates: templates, used: s.clock,
		ready: make(chan struct{}), exited: make(chan struct{}), kick: make(chan struct{}, 1)}
	s.streams[id] = st
	s.m.streams.Set(float64(len(s.streams)))
	s.workers.Add(1)
	go st.run()
	return st, nil
}

// evictLocked closes the least recently used stream that has no request
// waiting and no step running. Its state is already on disk: it is saved
// after every step. The caller holds s.mu.
func (s *Server) evictLocked() error {
	if s.cfg.StateDir == "" {
		return &httpError{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "10"},
			msg: fmt.Sprintf("the server holds its maximum of %d streams and has no state directory to evict one to", s.cfg.MaxStreams)}
	}
	var victim *stream
	for _, st := range s.streams {
		st.mu.Lock()
		idle := !st.busy && !st.closing && !st.unsaved && len(st.pending) == 0 && isClosed(st.ready)
		st.mu.Unlock()
		if idle && (victim == nil || st.used < victim.used) {
			victim = st
		}
	}
	if victim == nil {
		return &httpError{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "1"},
			msg: fmt.Sprintf("all %d streams are busy; retry later", s.cfg.MaxStreams)}
	}
	victim.mu.Lock()
	victim.closing = true
	victim.mu.Unlock()
	victim.wake()
	s.m.evictions.Inc()
	s.log.Info("serve: evicting stream", "stream", victim.id)
	return nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (st *stream) wake() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// submit queues a request and waits for its answer.
func (st *stream) submit(ctx context.Context, px []float32) (answer, error) {
	j := &job{ctx: ctx, pixels: px, arrived: time.Now(), done: make(chan answer, 1)}
	st.mu.Lock()
	if st.closing {
		st.mu.Unlock()
		return answer{}, errStreamClosed
	}
	st.pending = append(st.pending, j)
	st.mu.Unlock()
	st.wake()
	select {
	case a := <-j.done:
		return a, a.err
	case <-ctx.Done():
	}
	st.mu.Lock()
	taken := j.taken
	if !taken {
		st.pending = slices.DeleteFunc(st.pending, func(p *job) bool { return p == j })
	}
	st.mu.Unlock()
	if !taken || !errors.Is(context.Cause(ctx), errTimeout) {
		// Not in a batch yet: dropped, the stream never sees it. Or the
		// client has gone: its answer goes unread.
		return answer{}, ctx.Err()
	}
	// The stream is adapting on this image: the request gets that step's
	// answer however long it takes, so that no image is adapted on
	// without being answered.
	a := <-j.done
	return a, a.err
}

// run is the stream's worker.
func (st *stream) run() {
	s := st.srv
	defer s.workers.Done()
	defer st.finish()
	if err := st.load(); err != nil {
		st.loadErr = err
		st.mu.Lock()
		st.closing = true
		st.mu.Unlock()
		close(st.ready)
		return
	}
	close(st.ready)
	for {
		batch, ok := st.next()
		if !ok {
			return
		}
		if !s.step(st, batch) {
			return
		}
	}
}

// finish removes the stream from the server and fails what still waits.
func (st *stream) finish() {
	s := st.srv
	st.mu.Lock()
	st.closing = true
	rest := st.pending
	st.pending = nil
	deleted := st.deleted
	st.mu.Unlock()
	for _, j := range rest {
		err := error(errorf(http.StatusGone, "stream %s was deleted", st.id))
		if !deleted {
			err = errStreamClosed
		}
		j.done <- answer{err: err}
	}
	if deleted {
		s.removeState(st.id, st.owner)
	}
	s.mu.Lock()
	if s.streams[st.id] == st {
		delete(s.streams, st.id)
	}
	s.m.streams.Set(float64(len(s.streams)))
	s.mu.Unlock()
	close(st.exited)
}

// next waits for the next batch: up to the batch size of waiting requests,
// once that many wait or the oldest has waited MaxWait (at once when the
// stream is closing or the server draining). It drops requests whose client
// has gone. ok is false when the worker should end.
func (st *stream) next() (batch []*job, ok bool) {
	s := st.srv
	size := s.preset.BatchSize
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		st.mu.Lock()
		st.pending = slices.DeleteFunc(st.pending, func(j *job) bool { return j.ctx.Err() != nil })
		n := len(st.pending)
		if st.deleted || st.closing && n == 0 {
			st.mu.Unlock()
			return nil, false
		}
		var wait time.Duration
		if n > 0 {
			wait = time.Until(st.pending[0].arrived.Add(s.cfg.MaxWait))
		}
		if n >= size || n > 0 && (wait <= 0 || st.closing || isClosed(s.drain)) {
			batch = slices.Clone(st.pending[:min(n, size)])
			st.pending = slices.Delete(st.pending, 0, len(batch))
			for _, j := range batch {
				j.taken = true
			}
			st.busy = true
			st.mu.Unlock()
			return batch, true
		}
		st.mu.Unlock()
		var deadline <-chan time.Time
		if n > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			deadline = timer.C
		}
		var drain <-chan struct{}
		if n > 0 {
			drain = s.drain
		}
		select {
		case <-st.kick:
		case <-deadline:
		case <-drain:
		}
	}
}

// step adapts the stream on a batch, saves its state and answers the batch.
// When the save finds the stream saved by another server since this one
// read it (errStale), the stream is reloaded from its file and the batch
// stepped again, so that the batch's requests are answered only by a step
// that follows every step saved before it. That second step runs under
// the lock of the stream's file, so that no other save can come first
// again: a stream stepped by several servers at once moves on whichever of
// them steps it. It returns false when the worker must end (the stream
// could not be reloaded in place).
func (s *Server) step(st *stream, batch []*job) (keep bool) {
	n := len(batch)
	px := make([]float32, 0, n*s.pre.OutputLen())
	for _, j := range batch {
		px = append(px, j.pixels...)
	}
	keep = true
	res, index, err := s.stepOnce(st, px, n, nil)
	if errors.Is(err, errStale) {
		s.m.saveConflicts.Inc()
		s.log.Info("serve: stream saved by another server since this one read it: reloading it and stepping the batch again", "stream", st.id)
		res, index, keep, err = s.restep(st, px, n)
	}
	st.mu.Lock()
	st.busy = false
	if !keep {
		st.closing = true
	}
	st.mu.Unlock()
	for i, j := range batch {
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) {
				err = fmt.Errorf("adaptation step: %w", err)
			}
			j.done <- answer{err: err}
			continue
		}
		j.done <- answer{logits: slices.Clone(res.Logits.RawRowView(i)), pred: res.Preds[i],
			batch: index, size: n, position: i, steps: res.Diag.Steps}
	}
	return keep
}

// restep reloads the stream from its file and steps it on the batch again,
// holding the file's lock from the reading to the saving.
func (s *Server) restep(st *stream, px []float32, n int) (res *tta.Result, index int64, keep bool, err error) {
	// On any failure the stream, stepped on a stale state, cannot go on:
	// its worker ends, and its next request loads it anew.
	lock, err := filelock.Acquire(s.lockPath(st.id))
	if err != nil {
		return nil, 0, false, err
	}
	defer lock.Unlock()
	if err := st.reload(); err != nil {
		s.log.Error("serve: reloading stream", "stream", st.id, "err", err)
		return nil, 0, false, err
	}
	res, index, err = s.stepOnce(st, px, n, lock)
	if err != nil && !errors.Is(err, errStale) {
		return nil, 0, false, err
	}
	if errors.Is(err, errStale) {
		// Under the lock, only a writer that takes none (another
		// system's, see internal/filelock) can have saved.
		return nil, 0, false, fmt.Errorf("stream %s: saved by another writer while this server held its lock (%s)", st.id, s.lockPath(st.id))
	}
	return res, index, true, nil
}

// stepOnce steps the stream on a batch, counts it and saves the stream
// (under held, when not nil, the lock of its file). A failure to save other
// than errStale is logged, and the step stands.
func (s *Server) stepOnce(st *stream, px []float32, n int, held *filelock.Lock) (res *tta.Result, index int64, err error) {
	t0 := time.Now()
	res, err = s.adapt(st, px, n)
	s.m.stepSeconds.Observe(time.Since(t0).Seconds())
	s.m.batchSize.Observe(float64(n))
	if err != nil {
		s.log.Error("serve: adaptation step failed", "stream", st.id, "err", err)
		return nil, 0, err
	}
	s.m.batches.Inc()
	s.m.optimizerSteps.Add(float64(res.Diag.Steps))
	var cos []float64
	if a := res.Diag.Alignment; a != nil {
		if ts := st.heads.subspace(s.cfg.Dataset); ts != nil {
			cos, _ = feature.PrincipalAngleCosines(a.Basis, ts.Basis)
		}
	}
	st.mu.Lock()
	index = st.stats.Batches
	st.stats.Images += int64(n)
	st.stats.Batches++
	st.stats.Steps += int64(res.Diag.Steps)
	st.stats.Skipped += int64(res.Diag.Skipped)
	st.stats.LastLoss = res.Diag.Losses
	st.stats.Cosines = cos
	st.mu.Unlock()
	s.guard(st, res)
	perr := s.persist(st, held)
	if errors.Is(perr, errStale) {
		return nil, 0, perr
	}
	if perr != nil {
		s.m.saveErrors.Inc()
		s.log.Error("serve: saving stream state", "stream", st.id, "err", perr)
	}
	st.mu.Lock()
	st.unsaved = perr != nil
	st.mu.Unlock()
	return res, index, nil
}

// adapt runs the stream's Method on a batch with the stream's LayerNorm
// values in the model, and leaves the model with the source values.
func (s *Server) adapt(st *stream, px []float32, n int) (res *tta.Result, err error) {
	s.model.Lock()
	defer func() {
		s.params.write(s.source)
		s.cfg.Model.SetVisionTrainable(false)
		s.model.Unlock()
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	if s.beforeStep != nil {
		s.beforeStep()
	}
	s.params.write(st.params)
	res, err = st.method.Step(px, n)
	st.params = s.params.read(st.params)
	if err == nil && (res.Logits == nil || len(res.Preds) != n) {
		err = fmt.Errorf("%s returned %d predictions for %d images", st.method.Name(), len(res.Preds), n)
	}
	if err == nil && s.cfg.StateDir != "" {
		// Saved here, while the stream's values are in the model.
		st.state, err = st.method.MarshalBinary()
	}
	return res, err
}

// restore installs a Method state saved by adapt in the stream's Method and
// takes the stream's LayerNorm values from it.
func (s *Server) restore(st *stream, state []byte) error {
	s.model.Lock()
	defer func() {
		s.params.write(s.source)
		s.cfg.Model.SetVisionTrainable(false)
		s.model.Unlock()
	}()
	if err := st.method.UnmarshalBinary(state); err != nil {
		return err
	}
	st.params = s.params.read(st.params)
	st.state = state
	return nil
}

// newMethod builds the stream's Method over the shared model. It snapshots
// the model's LayerNorm values as the source, so it runs under the write
// lock, with the model at rest.
func (s *Server) newMethod(h *heads) (tta.Method, error) {
	s.model.Lock()
	defer func() {
		s.params.write(s.source)
		s.cfg.Model.SetVisionTrainable(false)
		s.model.Unlock()
	}()
	return s.preset.New(s.cfg.Model, h.Heads)
}

// stop closes the stream once the requests waiting have been stepped, and
// waits for its worker to end (or ctx).
func (st *stream) stop(ctx context.Context) error {
	st.mu.Lock()
	st.closing = true
	st.mu.Unlock()
	st.wake()
	select {
	case <-st.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("serve: stream %s: %w", st.id, ctx.Err())
	}
}
