package autograd

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// MaxTowerGraphs is the number of recordings a TowerGraphs keeps, one per
// device and batch size: a stream's full batches and its last, shorter
// one, and a few more. The least recently used is released first.
const MaxTowerGraphs = 4

// TowerGraphs holds recordings of a vision tower's passes without
// gradients on a device that can record (kernel.Grapher: a CUDA Graph on
// package gpu's device). VisionTowerOnDevice, given one in
// VisionTower.Graphs, replays a recording with one launch in place of
// queuing the pass's few hundred operations one by one; a model keeps one
// for its tower (vit.Model). The zero value is ready to use.
//
// The first pass of a batch size on a device runs op by op (it uploads the
// frozen weights and builds the kernels); the second is recorded, then
// replayed; every later one first looks the parameters up on the host as a
// pass op by op does (uploading the LayerNorm parameters that adaptation
// changed into the buffers they already have) and replays the recording
// only if every parameter still lies at the address it was recorded with
// (kernel.SameMemory), the same tensors of the same tower. Otherwise the
// pass runs op by op and the next one records again. A replay runs the same
// kernels on the same values as the pass op by op: the features are the
// same to the bit.
//
// A recording owns the device memory of its pass (its activations, about
// what one pass op by op takes at its peak) until it is released: when the
// TowerGraphs is no longer reachable, by Release, or when a fifth batch
// size pushes it out.
type TowerGraphs struct {
	once sync.Once
	set  *graphSet
}

// GraphStats is what a TowerGraphs did.
type GraphStats struct {
	Recorded int   // passes recorded
	Replayed int   // passes replayed
	Err      error // why the last recording that failed failed; nil if none did
}

// GraphFailed, when not nil, is called once per TowerGraphs with the first
// error of a recording that failed (the passes then run op by op, with the
// same results). Package cmd/subtta prints it as a warning. A device
// opened with recording turned off (kernel.ErrGraphsOff) is not reported.
var GraphFailed func(error)

// graphSet is a TowerGraphs' recordings, apart from it so that a cleanup
// can release them once it is gone.
type graphSet struct {
	mu       sync.Mutex
	entries  []*towerGraph // the most recently used last
	stats    GraphStats
	reported bool
}

// towerGraph is one recording, or the count of passes before it.
type towerGraph struct {
	mu   sync.Mutex // held through a replay: in and out are shared (TryLock)
	key  towerKey
	runs int  // passes seen
	off  bool // the device does not record (ErrGraphsOff)
	g    kernel.Graph
	in   kernel.Buf   // the images the recording reads
	out  kernel.Buf   // the features it writes
	seen []kernel.Buf // the parameter buffers it reads, in the pass's order
	keep []any        // the weights' device copies it reads (devRun.keep)
}

// towerKey is what makes two passes the same pass: the device, the batch,
// the geometry, and the tower's tensors and blocks themselves.
type towerKey struct {
	d           kernel.Device
	batch, cols int
	geometry    PatchGeometry
	patch       *LinearParams
	pre, post   *LayerNormParams
	blocks      []*BlockParams
	tensors     []smat.Tensor
}

func (k *towerKey) equal(o *towerKey) bool {
	if k.d != o.d || k.batch != o.batch || k.cols != o.cols || k.geometry != o.geometry ||
		k.patch != o.patch || k.pre != o.pre || k.post != o.post ||
		len(k.blocks) != len(o.blocks) || len(k.tensors) != len(o.tensors) {
		return false
	}
	for i := range k.blocks {
		if k.blocks[i] != o.blocks[i] {
			return false
		}
	}
	for i := range k.tensors {
		if k.tensors[i] != o.tensors[i] {
			return false
		}
	}
	return true
}

// Stats returns what g did so far.
func (g *TowerGraphs) Stats() GraphStats {
	s := g.graphs()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Release frees every recording; the next passes record again.
func (g *TowerGraphs) Release() { g.graphs().release() }

func (g *TowerGraphs) graphs() *graphSet {
	g.once.Do(func() {
		g.set = &graphSet{}
		runtime.AddCleanup(g, (*graphSet).release, g.set)
	})
	return g.set
}

// release frees every recording.
func (s *graphSet) release() {
	s.mu.Lock()
	entries := s.entries
	s.entries = nil
	s.mu.Unlock()
	for _, e := range entries {
		e.mu.Lock()
		e.drop()
		e.mu.Unlock()
	}
}

// entry returns the recording of key, made (empty) if there is none, and
// marks it the most recently used.
func (s *graphSet) entry(key *towerKey) *towerGraph {
	s.mu.Lock()
	var e *towerGraph
	for i, x := range s.entries {
		if x.key.equal(key) {
			e = x
			s.entries = append(s.entries[:i], s.entries[i+1:]...)
			break
		}
	}
	var old *towerGraph
	if e == nil {
		e = &towerGraph{key: *key}
		if len(s.entries) == MaxTowerGraphs {
			old = s.entries[0]
			s.entries = s.entries[1:]
		}
	}
	s.entries = append(s.entries, e)
	s.mu.Unlock()
	if old != nil {
		old.mu.Lock()
		old.drop()
		old.mu.Unlock()
	}
	return e
}

// failed records err, a recording's failure, and reports the first.
func (s *graphSet) failed(err error) {
	s.mu.Lock()
	s.stats.Err = err
	report := !s.reported && GraphFailed != nil
	s.reported = true
	s.mu.Unlock()
	if report {
		GraphFailed(err)
	}
}

func (s *graphSet) count(recorded bool) {
	s.mu.Lock()
	if recorded {
		s.stats.Recorded++
	} else {
		s.stats.Replayed++
	}
	s.mu.Unlock()
}

// drop releases e's recording and its buffers. Called with e.mu held.
func (e *towerGraph) drop() {
	if e.g == nil {
		return
	}
	e.g.Release()
	e.key.d.Free(e.in)
	e.key.d.Free(e.out)
	e.g, e.in, e.out, e.seen, e.keep = nil, nil, nil, nil, nil
}

// replay runs the pass from the tower's recording (TowerGraphs), recording
// it first where this is the pass to record. It reports false where the
// pass is to run op by op: no TowerGraphs, a device that does not record,
// the first pass of its kind, or a recording that failed or no longer
// applies.
func (op *towerOp) replay() (smat.Tensor, bool) {
	gr, ok := op.d.(kernel.Grapher)
	if op.v.Graphs == nil || !ok {
		return nil, false
	}
	v := op.v
	key := &towerKey{d: op.d, batch: op.batch, cols: op.cols, geometry: v.Geometry, patch: v.Patch,
		pre: v.LNPre, post: v.LNPost, blocks: v.Blocks, tensors: v.operands()}
	s := v.Graphs.graphs()
	e := s.entry(key)
	if !e.mu.TryLock() {
		// Another goroutine replays it (its images and features are in the
		// recording's buffers): this pass runs op by op beside it rather
		// than waiting, as concurrent passes did before recordings.
		return nil, false
	}
	defer e.mu.Unlock()
	e.runs++
	if e.off || e.g == nil && e.runs < 2 {
		return nil, false
	}
	// The parameters looked up as the pass does, nothing queued.
	dry := &devRun{d: op.d, dry: true, track: true}
	op.queue(dry, dryBuf(op.batch*op.cols), dryBuf(op.batch*op.emb))
	dry.close()
	if dry.own {
		e.drop()
		return nil, false
	}
	if e.g != nil && !sameMemory(e.seen, dry.seen) {
		e.drop()
		e.runs = 1 // the next pass records
		return nil, false
	}
	if e.g == nil {
		err := e.record(gr, op, dry.seen)
		if errors.Is(err, kernel.ErrGraphsOff) {
			e.off = true
			return nil, false
		}
		if err != nil {
			e.off = true // not again for this pass
			s.failed(fmt.Errorf("autograd: recording the vision tower's pass (batch %d) on %s: %w", op.batch, op.d.Name(), err))
			return nil, false
		}
		s.count(true)
	}
	r := &devRun{d: op.d}
	defer r.close()
	if img := r.inputInto(op.images, e.in); img != e.in && r.err == nil {
		r.do(func() error { return r.d.StrideRows(e.in, img, op.batch, op.cols, 1) })
	}
	r.do(e.g.Launch)
	y := op.download(r, e.out)
	if r.err == nil {
		s.count(false)
	}
	return y, true
}

// record records op's pass into e: the images from a new buffer e.in, the
// features into e.out. seen is what the check before it looked up; the
// pass recorded must look up the same.
func (e *towerGraph) record(gr kernel.Grapher, op *towerOp, seen []kernel.Buf) error {
	d := op.d
	in, err := d.Alloc(op.batch * op.cols)
	if err != nil {
		return err
	}
	out, err := d.Alloc(op.batch * op.emb)
	if err != nil {
		d.Free(in)
		return err
	}
	r := &devRun{d: d, track: true}
	g, err := gr.Capture(func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				de, ok := p.(*DeviceError)
				if !ok {
					panic(p)
				}
				err = de
			}
		}()
		op.queue(r, in, out)
		return r.release()
	})
	if err == nil && (r.own || !sameMemory(r.seen, seen)) {
		g.Release()
		err = errors.New("the pass recorded read other parameter buffers than the check before it")
	}
	if err != nil {
		d.Free(in)
		d.Free(out)
		return err
	}
	e.g, e.in, e.out, e.seen, e.keep = g, in, out, seen, r.keep
	return nil
}

// sameMemory reports whether a and b list the same memory in the same
// order (kernel.SameMemory).
func sameMemory(a, b []kernel.Buf) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !kernel.SameMemory(a[i], b[i]) {
			return false
		}
	}
	return true
}
