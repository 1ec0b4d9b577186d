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

	"github.com/subtta/subtta/autograd"
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
	state     []byte    // the Method's state after the last step, when there is a state store

	ready   chan struct{} // closed when loaded, or when loading failed (loadErr)
	loadErr error
	exited  chan struct{} // closed when the worker has ended and the stream left the map
	kick    chan struct{} // wakes the worker (capacity 1)
	used    int64         // Server.clock at the last use; guarded by srv.mu

	mu        sync.Mutex
	pending   []*job
	busy      bool          // a batch is being stepped and saved
	closing   bool          // takes no more requests; set by stop, delete or eviction
	deleted   bool          // the stream is being deleted: waiting requests fail
	unsaved   bool          // the last save failed: evicting would lose adaptation
	retry     time.Duration // the wait before the next try of a failed save
	retries   int           // failed tries since the last save
	deletedBy client        // who deleted the stream
	deleteErr error         // why its state could not be deleted
	stats     streamStats
	onDisk    bool          // the stream has a saved state, read or written by this server
	stamp     stamp         // that state's stamp, or the Birth its first save will carry
	answers   []savedAnswer // answers to its recent requests with an Idempotency-Key, oldest first
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
	Restored bool // read back from the state store
	Guard    guardStats
}

// job is one request waiting for its stream's batch.
type job struct {
	ctx     context.Context
	pixels  []float32
	key     string  // the request's Idempotency-Key, or ""
	image   [8]byte // the start of its image's SHA-256, when key is set
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
	replayed bool  // the saved answer of an earlier request with the job's key
	frozen   bool  // the frozen model's answer: the stream did not adapt (Config.Degraded)
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
	if s.store == nil {
		return &httpError{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "10"},
			msg: fmt.Sprintf("the server holds its maximum of %d streams and has no state store to evict one to", s.cfg.MaxStreams)}
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

// submit queues a request (with its Idempotency-Key and its image's
// digest, when it has a key) and waits for its answer.
func (st *stream) submit(ctx context.Context, px []float32, key string, image [8]byte) (answer, error) {
	j := &job{ctx: ctx, pixels: px, key: key, image: image, arrived: time.Now(), done: make(chan answer, 1)}
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
// A deleted stream's state goes (a tombstone); another's stamp is kept in
// Server.known, to tell its state lost from deleted when it comes back.
func (st *stream) finish() {
	s := st.srv
	st.mu.Lock()
	st.closing = true
	rest := st.pending
	st.pending = nil
	deleted, onDisk, last, by := st.deleted, st.onDisk, st.stamp, st.deletedBy
	st.mu.Unlock()
	for _, j := range rest {
		err := error(errorf(http.StatusGone, "stream %s was deleted", st.id))
		if !deleted {
			err = errStreamClosed
		}
		j.done <- answer{err: err}
	}
	if deleted {
		var was *stamp
		if onDisk {
			was = &last
		}
		if _, err := s.removeState(st.id, st.owner, by.admin, was); err != nil {
			s.log.Error("serve: removing stream state", "stream", st.id, "err", err)
			st.deleteErr = err
		}
	}
	s.mu.Lock()
	if s.streams[st.id] == st {
		delete(s.streams, st.id)
	}
	switch {
	case deleted && st.deleteErr == nil:
		delete(s.known, st.id)
	case !deleted && onDisk && st.loadErr == nil:
		if len(s.known) >= maxKnown {
			for id := range s.known { // any one: the map bounds memory only
				delete(s.known, id)
				break
			}
		}
		s.known[st.id] = last
	}
	delete(s.unsaved, st)
	s.m.unsaved.Set(float64(len(s.unsaved)))
	s.m.streams.Set(float64(len(s.streams)))
	s.mu.Unlock()
	close(st.exited)
}

// maxKnown bounds Server.known: 100,000 streams that left memory, about
// 10 MB; beyond it one is forgotten for each that leaves (its lost state
// would then be taken for a new stream).
const maxKnown = 100_000

// setUnsaved records whether the stream's last save failed.
func (s *Server) setUnsaved(st *stream, unsaved bool) {
	st.mu.Lock()
	st.unsaved = unsaved
	if unsaved {
		if st.retry == 0 {
			st.retry = s.cfg.SaveRetry
		}
		st.retries++
	} else {
		st.retry, st.retries = 0, 0
	}
	st.mu.Unlock()
	s.mu.Lock()
	if unsaved {
		s.unsaved[st] = true
	} else {
		delete(s.unsaved, st)
	}
	s.m.unsaved.Set(float64(len(s.unsaved)))
	s.mu.Unlock()
}

// saveAgain tries again the failed save of an unsaved stream, and waits
// longer before the next try if it fails again. It returns false when the
// worker must end: the stream was saved by another server meanwhile, and
// could not be reloaded.
func (s *Server) saveAgain(st *stream) bool {
	err := s.persist(st)
	st.mu.Lock()
	tries := st.retries
	st.mu.Unlock()
	switch {
	case err == nil:
		s.setUnsaved(st, false)
		s.log.Info("serve: stream saved after failed saves", "stream", st.id, "failed", tries)
		return true
	case errors.Is(err, errStale):
		// Another server stepped the stream since this one's last save:
		// this one's unsaved steps cannot be saved over it.
		s.m.saveConflicts.Inc()
		s.log.Error("serve: an unsaved stream was saved by another server meanwhile: its steps since its last save here are dropped; reloading it",
			"stream", st.id, "failed", tries)
		s.setUnsaved(st, false)
		if err := st.reload(); err != nil {
			s.log.Error("serve: reloading stream", "stream", st.id, "err", err)
			return false
		}
		return true
	}
	s.m.saveErrors.Inc()
	st.mu.Lock()
	st.retry = min(2*st.retry, s.cfg.SaveRetryMax)
	wait := st.retry
	st.retries++
	st.mu.Unlock()
	s.log.Warn("serve: stream still unsaved: its answered adaptations are in memory only", "stream", st.id, "failed", tries+1, "next_try", wait, "err", err)
	return true
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
		unsaved := st.unsaved && !st.deleted && !isClosed(s.abandon)
		if st.deleted || st.closing && n == 0 && !unsaved {
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
		var retry <-chan time.Time
		var abandon <-chan struct{}
		var rt *time.Timer
		if unsaved && n == 0 {
			st.mu.Lock()
			wait := st.retry
			st.mu.Unlock()
			if isClosed(s.drain) {
				// Shutting down: try at least every second.
				wait = min(wait, time.Second)
			} else {
				drain = s.drain // to try at once when the shutdown begins
			}
			rt = time.NewTimer(wait)
			retry, abandon = rt.C, s.abandon
		}
		select {
		case <-st.kick:
		case <-deadline:
		case <-drain:
			if unsaved && n == 0 && !s.saveAgain(st) {
				return nil, false
			}
		case <-abandon:
		case <-retry:
			if !s.saveAgain(st) {
				return nil, false
			}
		}
		if rt != nil {
			rt.Stop()
		}
	}
}

// step adapts the stream on a batch, saves its state and answers the batch.
// A request whose Idempotency-Key the stream has answered already gets that
// answer again, without a step (replay). When the save finds the stream
// saved by another server since this one read it (errStale), the stream is
// reloaded from the store and the batch stepped again (restep), less the
// requests that the reloaded stream has answered, so that the batch's
// requests are answered only by a step that follows every step saved
// before it. It returns false when the worker must end (the stream could
// not be reloaded in place).
func (s *Server) step(st *stream, batch []*job) (keep bool) {
	got := make(map[*job]answer, len(batch))
	dups := map[*job]*job{}
	todo := st.replay(batch, got, dups)
	keep = true
	var err error
	stale := false
	if len(todo) > 0 && s.store != nil {
		// A step only on the latest state: confirmed by its stamp in the
		// store, or reloaded first.
		if stale, err = s.confirm(st); err != nil {
			s.unconfirmed(st, todo, got, err)
			todo = nil
		}
	}
	switch {
	case stale:
		s.m.saveConflicts.Inc()
		s.log.Info("serve: stream saved by another server since this one read it: reloading it before stepping the batch", "stream", st.id)
		keep, err = s.restep(st, todo, got)
	case len(todo) > 0:
		err = s.stepOnce(st, todo, got)
		if errors.Is(err, errStale) {
			s.m.saveConflicts.Inc()
			s.log.Info("serve: stream saved by another server since this one read it: reloading it and stepping the batch again", "stream", st.id)
			keep, err = s.restep(st, todo, got)
		}
	}
	st.mu.Lock()
	st.busy = false
	if !keep {
		st.closing = true
	}
	st.mu.Unlock()
	if err != nil {
		var he *httpError
		if !errors.As(err, &he) {
			err = fmt.Errorf("adaptation step: %w", err)
		}
	}
	for _, j := range batch {
		a, ok := got[j]
		if first, dup := dups[j]; dup {
			a, ok = got[first]
			a.replayed = a.err == nil
		}
		if !ok {
			a = answer{err: err}
		}
		if a.replayed {
			s.m.replays.Inc()
		}
		j.done <- a
	}
	return keep
}

// confirm says whether the stream's state in the store is no longer the
// one this server read or last wrote (stale: another server saved it
// since, or deleted it); an error when the store cannot say.
func (s *Server) confirm(st *stream) (stale bool, err error) {
	h, err := s.store.Head(context.Background(), st.id)
	if err != nil {
		return false, err
	}
	var cur *stamp
	if h != nil && !h.Deleted {
		cur = &h.Stamp
	}
	st.mu.Lock()
	var mine *stamp
	if st.onDisk {
		m := st.stamp
		mine = &m
	}
	st.mu.Unlock()
	return !sameStamp(cur, mine), nil
}

// unconfirmed answers, in got, jobs that the stream cannot step because
// its latest state is unknown (err: the store's): 503 with Retry-After,
// or with Config.Degraded frozen the frozen model's answer, marked so.
// The stream does not adapt, and nothing is saved.
func (s *Server) unconfirmed(st *stream, jobs []*job, got map[*job]answer, err error) {
	mode := s.cfg.Degraded
	if permanent(err) {
		e := s.storeError(st.id, err)
		for _, j := range jobs {
			got[j] = answer{err: e}
		}
		return
	}
	s.m.storeErrors.Inc()
	s.log.Warn("serve: the state store cannot confirm the stream's latest state: not adapting", "stream", st.id, "answer", mode, "err", err)
	s.m.degraded.WithLabelValues(mode).Add(float64(len(jobs)))
	refuse := &httpError{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "2"},
		msg: fmt.Sprintf("stream %s: the state store cannot be reached to confirm the stream's latest state; it did not adapt on the image: retry later", st.id)}
	if mode != DegradedFrozen {
		for _, j := range jobs {
			got[j] = answer{err: refuse}
		}
		return
	}
	h, herr := s.heads.get(st.labels, st.templates, false)
	for _, j := range jobs {
		a := answer{err: refuse}
		if herr == nil {
			if f, ferr := s.frozenFeatures(context.Background(), j.pixels, 1); ferr == nil {
				logits, pred := h.frozenLogits(f, s.cfg.Model.LogitScale)
				a = answer{logits: slices.Clone(logits), pred: pred, batch: -1, frozen: true}
			}
		}
		got[j] = a
	}
}

// replay answers, in got, the jobs whose Idempotency-Key the stream has
// answered already, with that answer (or 422 for a key sent with another
// image), and records in dups the jobs whose key an earlier job of the
// list carries, to get that job's answer. It returns the jobs left to step.
func (st *stream) replay(jobs []*job, got map[*job]answer, dups map[*job]*job) (todo []*job) {
	st.mu.Lock()
	known := make(map[string]savedAnswer, len(st.answers))
	for _, a := range st.answers {
		known[a.Key] = a
	}
	st.mu.Unlock()
	first := map[string]*job{}
	for _, j := range jobs {
		if j.key == "" {
			todo = append(todo, j)
			continue
		}
		if a, ok := known[j.key]; ok {
			if a.Image != j.image {
				got[j] = answer{err: errorf(http.StatusUnprocessableEntity, "Idempotency-Key %s was sent to stream %s before with another image; give each image a key of its own",
					quote(j.key, maxEcho), st.id)}
				continue
			}
			got[j] = answer{logits: slices.Clone(a.Logits), pred: a.Pred, batch: a.Batch, size: a.Size,
				position: a.Position, steps: a.Steps, replayed: true}
			continue
		}
		if f, ok := first[j.key]; ok {
			dups[j] = f
			continue
		}
		first[j.key] = j
		todo = append(todo, j)
	}
	return todo
}

// restep reloads the stream from the store and steps it on the jobs again,
// less those the reloaded stream has answered. With a store that can lock
// a stream (streamLocker), it holds the lock from the reading to the
// saving, so that no other save can come first again; with another, it
// tries again while other servers save the stream first, up to maxResteps
// times.
func (s *Server) restep(st *stream, todo []*job, got map[*job]answer) (keep bool, err error) {
	// On any failure the stream, stepped on a stale state, cannot go on:
	// its worker ends, and its next request loads it anew.
	held := false
	if l, ok := s.store.(streamLocker); ok {
		unlock, err := l.Lock(context.Background(), st.id)
		if err != nil {
			return false, err
		}
		defer unlock()
		held = true
	}
	for attempt := 1; ; attempt++ {
		if err := st.reload(); err != nil {
			s.log.Error("serve: reloading stream", "stream", st.id, "err", err)
			return false, err
		}
		if todo = st.replay(todo, got, map[*job]*job{}); len(todo) == 0 {
			return true, nil
		}
		err := s.stepOnce(st, todo, got)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, errStale):
			return false, err
		case held:
			// Under the lock, only a writer that takes none (another
			// system's, see internal/filelock) can have saved.
			return false, fmt.Errorf("stream %s: saved by another writer while this server held its lock (%s)", st.id, s.store.Where(st.id))
		case attempt == maxResteps:
			return false, &httpError{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "1"},
				msg: fmt.Sprintf("stream %s was saved by other servers %d times while this one stepped it; retry", st.id, attempt+1)}
		}
		s.m.saveConflicts.Inc()
	}
}

// stepOnce steps the stream on the jobs, counts them, saves the stream and
// puts the jobs' answers in got. It returns errStale, and no answers, when
// the store refused the save. A failure to save for another reason is
// logged, and the step stands.
func (s *Server) stepOnce(st *stream, jobs []*job, got map[*job]answer) error {
	n := len(jobs)
	var res *tta.Result
	px := make([]float32, 0, n*s.pre.OutputLen())
	for _, j := range jobs {
		px = append(px, j.pixels...)
	}
	t0 := time.Now()
	hold, err := s.uploadAhead(px)
	if err == nil {
		res, err = s.adapt(st, px, n)
		if err == nil && hold != nil && !hold.Used() {
			s.noAhead.Store(true)
		}
		hold.Release()
	}
	s.m.stepSeconds.Observe(time.Since(t0).Seconds())
	s.m.batchSize.Observe(float64(n))
	if err != nil {
		s.log.Error("serve: adaptation step failed", "stream", st.id, "err", err)
		return err
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
	index := st.stats.Batches
	st.stats.Images += int64(n)
	st.stats.Batches++
	st.stats.Steps += int64(res.Diag.Steps)
	st.stats.Skipped += int64(res.Diag.Skipped)
	st.stats.LastLoss = res.Diag.Losses
	st.stats.Cosines = cos
	old := st.answers
	st.mu.Unlock()
	s.guard(st, res)
	answers := make([]answer, n)
	for i := range jobs {
		answers[i] = answer{logits: slices.Clone(res.Logits.RawRowView(i)), pred: res.Preds[i],
			batch: index, size: n, position: i, steps: res.Diag.Steps}
	}
	recent := s.recentAnswers(old, jobs, answers)
	st.mu.Lock()
	st.answers = recent
	st.mu.Unlock()
	perr := s.persist(st)
	if errors.Is(perr, errStale) {
		return perr
	}
	if perr != nil {
		s.m.saveErrors.Inc()
		s.log.Warn("serve: saving stream state failed: its answered adaptations are in memory only until a save, tried again in the background, succeeds", "stream", st.id, "err", perr)
	} else if s.afterSave != nil {
		s.afterSave()
	}
	st.mu.Lock()
	was := st.unsaved
	st.mu.Unlock()
	if perr != nil || was {
		s.setUnsaved(st, perr != nil)
	}
	for i, j := range jobs {
		got[j] = answers[i]
	}
	return nil
}

// uploadAhead uploads a batch's images to the device (--device cuda)
// before the step waits for the model's lock, so that the copy runs while
// another stream's step holds the model (autograd.DeviceInput.Prefetch);
// the step's passes find it by the pixels' memory. It returns nil without
// a device, and once a step did not read its batch's copy (a method that
// encodes views made from the batch). The caller releases the hold.
func (s *Server) uploadAhead(px []float32) (*autograd.DeviceInput, error) {
	if autograd.CurrentDevice() == nil || s.noAhead.Load() {
		return nil, nil
	}
	h := autograd.HoldValues(px)
	if err := h.Prefetch(); err != nil {
		h.Release()
		return nil, err
	}
	return h, nil
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
	if err == nil && s.store != nil {
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
