package online

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/internal/prefetch"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"gonum.org/v1/gonum/mat"
)

// Domain is one test distribution (a corruption at a severity): a random-
// access set of preprocessed images with labels. The runner decides the
// order and the batches, so Domains know nothing of either.
type Domain interface {
	Name() string
	Len() int
	// Sample returns image i preprocessed for the model (CHW float32) and
	// its label. The runner copies the pixels before the next call.
	Sample(i int) (pixels []float32, label int, err error)
}

// BatchDomain is a Domain that reads many samples at once, for example
// decoding and preprocessing them in parallel. The runner uses Samples when a
// batch comes from one such domain.
type BatchDomain interface {
	Domain
	// Samples appends the preprocessed images of the given indices to dst,
	// in order, after its len(dst) elements (as append does; pass dst[:0]
	// to reuse a buffer), and returns the extended slice with their labels.
	// It does not overwrite dst as data.Preprocessor.Transform does.
	Samples(indices []int, dst []float32) (pixels []float32, labels []int, err error)
}

// ViewDomain is a Domain that gives several preprocessed views of each
// sample, for a tta.MultiView method: view 0 the base view (Sample's), the
// others random crops with flips of the decoded image, drawn from a source
// seeded by (seed, the domain's name, the sample's index) so that a sample
// gets the same views in any batch, at any thread count and after a
// resume (data.ViewRNG).
type ViewDomain interface {
	Domain
	// ViewSamples appends v views of each of the given samples to dst,
	// after its len(dst) elements (as append does; pass dst[:0] to reuse a
	// buffer), sample after sample, views 1…v−1 of the given kind, and
	// returns the extended slice with their labels. It does not overwrite
	// dst as data.Preprocessor.Views does.
	ViewSamples(indices []int, v int, kind tta.ViewKind, seed uint64, dst []float32) (pixels []float32, labels []int, err error)
}

// Protocol is how the runner moves between domains.
type Protocol int

const (
	// ResetEachDomain resets the method before every domain (the paper's
	// protocol, and the default).
	ResetEachDomain Protocol = iota
	// Continual resets once, before the first domain, and adapts through
	// all domains in the given order.
	Continual
	// Mixed pools the samples of all domains into one stream, ordered as a
	// whole, and resets once. Accuracy is still reported per domain.
	Mixed
	// Episodic adapts to one sample at a time (batch size 1): the method
	// is reset before every domain, as under ResetEachDomain, and its
	// adapted weights and optimizer before every sample (ResetSample),
	// while its per-stream memory (SubTTA's feature bank, TDA's caches)
	// carries on through the domain.
	Episodic
)

// Protocols lists the protocols, in the order of their values.
var Protocols = []Protocol{ResetEachDomain, Continual, Mixed, Episodic}

// ParseProtocol returns the protocol whose String is name.
func ParseProtocol(name string) (Protocol, error) {
	for _, p := range Protocols {
		if p.String() == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w %q (want reset, continual, mixed or episodic)", ErrUnknownProtocol, name)
}

// ErrUnknownProtocol is wrapped by ParseProtocol's error.
var ErrUnknownProtocol = errors.New("online: unknown protocol")

func (p Protocol) String() string {
	switch p {
	case ResetEachDomain:
		return "reset"
	case Continual:
		return "continual"
	case Mixed:
		return "mixed"
	case Episodic:
		return "episodic"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Protocol  Protocol
	BatchSize int
	// Shuffle orders every stream (each domain, and the pooled stream
	// under Mixed) like Python's random.seed(Seed); random.shuffle(order),
	// the official code's protocol with Seed 1 (see PythonShuffle). Without
	// Shuffle the stream is in index order.
	Shuffle bool
	Seed    uint64
	// Limit, when positive, keeps the first Limit samples of each domain's
	// order (Limited gives the count).
	Limit int
	// Order, when set, gives the order explicitly (see ReadOrder) and
	// overrides Shuffle: it is called with the stream name (the domain's,
	// or "mixed") and length, and must return a permutation of 0…n−1. A
	// domain's order is then cut to Limit; under Mixed, each domain is
	// shuffled (with Shuffle) and cut first, and Order orders the pool:
	// indices into the domains' kept samples concatenated in order.
	Order func(stream string, n int) ([]int, error)
	// Log, when set, receives one JSON line per batch (BatchRecord).
	Log io.Writer
	// Text, when set, is the text subspace the geometric diagnostics are
	// measured against (principal angles, semantic concentration); Head
	// (C×d), when set, gives the cosine to the predicted class.
	Text *feature.TextSubspace
	Head mat.Matrix
	// OnBatch, when set, is called after every batch with its record
	// (diagnostics included, as for Log), in the order of the batches. An
	// error stops the run and is returned by Run: a caller can cancel
	// between batches this way. The method steps no further then, but the
	// records of the batches it has already stepped (see
	// DiagnosticWorkers) are still handed on, so that nothing computed is
	// lost; Run returns the first error.
	OnBatch func(BatchRecord) error
	// DiagnosticWorkers is how many goroutines compute the batches'
	// geometric diagnostics (for Log and OnBatch) while the method steps
	// on the next batches; 0 means DefaultDiagnosticWorkers, a negative
	// count none: each batch's diagnostics are then computed between its
	// step and the next, on the runner's goroutine. With n workers the
	// record of batch b is handed on after the method's step on batch
	// b+n (or at the end of the stream), so that at most n+1 batches
	// wait; the records, their order and their bits do not depend on n.
	// The diagnostics read copies of the batch's features, predictions
	// and labels, and decompose on the CPU whatever device is set.
	DiagnosticWorkers int
	// SaveState, when set, is asked right after the method's step on a
	// batch, before any further step, whether the caller will want the
	// method's state after that batch with its record (for a checkpoint):
	// if so, the runner marshals it then (tta.Method.MarshalBinary), for
	// BatchRecord.State, since with diagnostic workers OnBatch sees the
	// record only after later steps.
	SaveState func(stream string, batch int) bool
	// Resume, when set, is called at the start of every stream, after any
	// reset. A caller continuing an interrupted run restores the method's
	// state there (tta.Method.UnmarshalBinary) and returns how many leading batches of the
	// stream were done before; the runner skips them, and they count nowhere
	// in its report.
	Resume func(stream string) (batches int, err error)
}

// Runner evaluates a Method on a sequence of domains. The last partial
// batch of each stream is kept.
type Runner struct {
	Method tta.Method
	Config RunnerConfig
}

// DomainResult is the accuracy on one domain.
type DomainResult struct {
	Name     string  `json:"name"`
	Samples  int     `json:"samples"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"` // percent
}

// Report is the outcome of a run: per-domain accuracy and their mean.
type Report struct {
	Method   string         `json:"method"`
	Protocol string         `json:"protocol"`
	Domains  []DomainResult `json:"domains"`
	Mean     float64        `json:"mean_accuracy"` // mean of the accuracies of the domains with samples, percent (an empty one has none)
}

// BatchRecord is one line of the runner's JSONL log.
type BatchRecord struct {
	Stream  string `json:"stream"` // domain name, or "mixed"
	Batch   int    `json:"batch"`  // index within the stream
	Size    int    `json:"size"`
	Correct int    `json:"correct"`
	// Diagnostics are the method's, copied; their Alignment is not handed
	// on (nil): the basis's geometry is in PrincipalCosines.
	tta.Diagnostics
	// PrincipalCosines are the cosines of the principal angles between the
	// visual basis and B_T: SubTTA's EMA basis when alignment ran, else the
	// basis of the batch covariance of the prediction features (batches of
	// at least 2).
	PrincipalCosines []float64 `json:"principal_cosines,omitempty"`
	// SemanticConcentration is the batch mean of ‖f·P_T‖²/‖f‖².
	SemanticConcentration *float64 `json:"semantic_concentration,omitempty"`
	// PredictedClassCosine is the batch mean of cos(f, t_pred);
	// TrueClassCosine that of cos(f, t_y), the ground-truth class's.
	PredictedClassCosine *float64 `json:"predicted_class_cosine,omitempty"`
	TrueClassCosine      *float64 `json:"true_class_cosine,omitempty"`
	// SampleCosines are both cosines of every image of the batch, with
	// whether it was classified correctly.
	SampleCosines *SampleCosines `json:"sample_cosines,omitempty"`
	// Domains breaks Size and Correct down by domain, in the order of the
	// domains, for a batch of the mixed protocol's stream.
	Domains []DomainCount `json:"domains,omitempty"`
	Seconds float64       `json:"seconds"`

	state []byte                 // the method's state after the batch, if saved
	live  func() ([]byte, error) // marshals it while the method has not stepped since
}

// State returns the method's state right after this batch
// (tta.Method.MarshalBinary), or nil when it is no longer to be had: when
// RunnerConfig.SaveState did not ask for it at the batch's step and the
// method has stepped since. Without diagnostic workers, and for the last
// batch stepped when the runner stops stepping, the method has not. Call
// it only from OnBatch.
func (b *BatchRecord) State() ([]byte, error) {
	if b.state == nil && b.live != nil {
		return b.live()
	}
	return b.state, nil
}

// SampleCosines are per-image diagnostics of a batch, in batch order:
// the cosine of the prediction features to the predicted class's text
// feature and to the ground-truth class's, and whether the two classes
// agree.
type SampleCosines struct {
	Predicted []float64 `json:"predicted"`
	True      []float64 `json:"true"`
	Correct   []bool    `json:"correct"`
}

type sampleRef struct{ domain, index int }

// MixedStream is the name of the mixed protocol's one stream
// (BatchRecord.Stream).
const MixedStream = "mixed"

// DomainCount is the part of a batch that comes from one domain.
type DomainCount struct {
	Name    string `json:"name"`
	Size    int    `json:"size"`
	Correct int    `json:"correct"`
}

// domainCounts returns a batch's images and correct predictions per
// domain, for the domains it holds, in the domains' order.
func domainCounts(domains []Domain, batch []sampleRef, preds, labels []int) []DomainCount {
	counts := make([]DomainCount, len(domains))
	for j, ref := range batch {
		counts[ref.domain].Size++
		if preds[j] == labels[j] {
			counts[ref.domain].Correct++
		}
	}
	var out []DomainCount
	for i, c := range counts {
		if c.Size > 0 {
			c.Name = domains[i].Name()
			out = append(out, c)
		}
	}
	return out
}

// Run evaluates the method on the domains.
func (r *Runner) Run(domains []Domain) (*Report, error) {
	c := r.Config
	if r.Method == nil {
		return nil, errors.New("tta: runner: nil method")
	}
	if c.BatchSize < 1 {
		return nil, fmt.Errorf("tta: runner: batch size %d < 1", c.BatchSize)
	}
	if len(domains) == 0 {
		return nil, errors.New("tta: runner: no domains")
	}
	pool, err := r.startDiagnostics()
	if err != nil {
		return nil, err
	}
	defer pool.close()
	rep := &Report{Method: r.Method.Name(), Protocol: c.Protocol.String()}
	results := make([]DomainResult, len(domains))
	for i, d := range domains {
		results[i].Name = d.Name()
	}
	switch c.Protocol {
	case ResetEachDomain, Continual, Episodic:
		if c.Protocol == Episodic && c.BatchSize != 1 {
			return nil, fmt.Errorf("tta: runner: the episodic protocol adapts to one sample at a time, batch size %d", c.BatchSize)
		}
		for i, d := range domains {
			if c.Protocol != Continual || i == 0 {
				if err := r.Method.Reset(); err != nil {
					return nil, fmt.Errorf("tta: runner: %s: reset: %w", d.Name(), err)
				}
			}
			order, err := r.order(d.Name(), d.Len())
			if err != nil {
				return nil, err
			}
			order = limit(order, c.Limit)
			refs := make([]sampleRef, len(order))
			for j, k := range order {
				refs[j] = sampleRef{i, k}
			}
			if err := r.stream(pool, d.Name(), domains, refs, results); err != nil {
				return nil, err
			}
		}
	case Mixed:
		if err := r.Method.Reset(); err != nil {
			return nil, fmt.Errorf("tta: runner: reset: %w", err)
		}
		var all []sampleRef
		for i, d := range domains {
			own := identity(d.Len())
			if c.Shuffle {
				own = PythonShuffle(d.Len(), c.Seed)
			}
			for _, k := range limit(own, c.Limit) {
				all = append(all, sampleRef{i, k})
			}
		}
		order, err := r.order(MixedStream, len(all))
		if err != nil {
			return nil, err
		}
		refs := make([]sampleRef, len(order))
		for j, k := range order {
			refs[j] = all[k]
		}
		if err := r.stream(pool, MixedStream, domains, refs, results); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("tta: runner: unknown protocol %v", c.Protocol)
	}
	scored := 0
	for i := range results {
		if results[i].Samples > 0 {
			results[i].Accuracy = 100 * float64(results[i].Correct) / float64(results[i].Samples)
			rep.Mean += results[i].Accuracy
			scored++
		}
	}
	if scored > 0 {
		rep.Mean /= float64(scored)
	}
	rep.Domains = results
	return rep, nil
}

// order returns the sample order of a stream of n samples.
func (r *Runner) order(stream string, n int) ([]int, error) {
	c := r.Config
	switch {
	case c.Order != nil:
		o, err := c.Order(stream, n)
		if err != nil {
			return nil, fmt.Errorf("tta: runner: %s: order: %w", stream, err)
		}
		seen := make([]bool, n)
		for _, k := range o {
			if k < 0 || k >= n || seen[k] {
				return nil, fmt.Errorf("tta: runner: %s: order is not a permutation of 0…%d (entry %d)", stream, n-1, k)
			}
			seen[k] = true
		}
		if len(o) != n {
			return nil, fmt.Errorf("tta: runner: %s: order has %d entries for %d samples", stream, len(o), n)
		}
		return o, nil
	case c.Shuffle:
		return PythonShuffle(n, c.Seed), nil
	}
	return identity(n), nil
}

func identity(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

func limit(order []int, n int) []int {
	if n > 0 && n < len(order) {
		return order[:n]
	}
	return order
}

// Limited is the number of samples a domain of n samples contributes to a
// run with RunnerConfig.Limit limit.
func Limited(n, limit int) int {
	if limit > 0 && limit < n {
		return limit
	}
	return n
}

// stream runs the method over refs in batches, scoring into results.
// The records go to Log and OnBatch in order, each once its diagnostics
// are computed: at once when pool is nil, else once the method has stepped
// on pool.lag more batches or the stream ends. Whatever stops the stream,
// the records of the batches already stepped are handed on before it
// returns the first error.
func (r *Runner) stream(pool *diagPool, name string, domains []Domain, refs []sampleRef, results []DomainResult) error {
	bs := r.Config.BatchSize
	skip := 0
	if r.Config.Resume != nil {
		var err error
		if skip, err = r.Config.Resume(name); err != nil {
			return fmt.Errorf("tta: runner: %s: resume: %w", name, err)
		}
		if nb := (len(refs) + bs - 1) / bs; skip < 0 || skip > nb {
			return fmt.Errorf("tta: runner: %s: resume after %d batches, the stream has %d", name, skip, nb)
		}
	}
	// The next batch is read (decoded, preprocessed) while the method
	// steps on the current one; the batches and their order are the same.
	mv, views := r.Method.(tta.MultiView)
	nv, kind := 1, tta.ViewKind(0)
	if views {
		nv, kind = mv.Views(), mv.ViewKind()
	}
	nb := (len(refs) + bs - 1) / bs
	// With a device, the reader also uploads each batch it has read
	// (autograd.DeviceInput.Prefetch; package gpu: beside the current
	// batch's pass, on a stream of its own), and the method's passes find
	// that copy by the pixels' memory. It stops for the rest of the stream
	// once a step did not read its batch's copy (a method that encodes
	// views made from the batch), which wastes at most the next batch's.
	ahead := autograd.CurrentDevice() != nil
	var aheadOff atomic.Bool
	pipe := prefetch.StartWith(nb-skip, func(i int, reuse fetched) (f fetched, err error) {
		start := (skip + i) * bs
		batch := refs[start:min(start+bs, len(refs))]
		if views {
			f.pixels, f.labels, err = r.fetchViews(domains, batch, nv, kind, reuse.pixels[:0])
		} else {
			f.pixels, f.labels, err = r.fetch(domains, batch, reuse.pixels[:0])
		}
		if err == nil && ahead && !aheadOff.Load() {
			f.hold = autograd.HoldValues(f.pixels)
			if err = f.hold.Prefetch(); err != nil {
				f.hold.Release()
				f.hold = nil
				err = fmt.Errorf("tta: runner: %s: batch %d: %w", name, skip+i, err)
			}
		}
		return f, err
	}, func(f fetched) { f.hold.Release() })
	defer pipe.Close()

	records := r.Config.Log != nil || r.Config.OnBatch != nil
	q := &recordQueue{r: r, stream: name, stepped: -1}
	defer func() { q.stepped = -1 }() // for a record kept beyond OnBatch
	lag := 0
	if pool != nil {
		lag = pool.lag
	}
	for b, start := skip, skip*bs; start < len(refs) && q.err == nil; b, start = b+1, start+bs {
		batch := refs[start:min(start+bs, len(refs))]
		f, _, err := pipe.Next()
		if err != nil {
			q.fail(err)
			break
		}
		pixels, labels := f.pixels, f.labels
		q.stepped = -1 // the method's state is no batch's until the step succeeds
		t0 := time.Now()
		if r.Config.Protocol == Episodic {
			if err := r.Method.ResetSample(); err != nil {
				f.hold.Release()
				q.fail(fmt.Errorf("tta: runner: %s: batch %d: reset: %w", name, b, err))
				break
			}
		}
		var res *tta.Result
		if views {
			res, err = mv.StepViews(pixels, len(batch), mv.Views())
		} else {
			res, err = r.Method.Step(pixels, len(batch))
		}
		if f.hold != nil {
			if !f.hold.Used() {
				aheadOff.Store(true)
			}
			f.hold.Release() // before the reader reuses the pixels' memory
		}
		if err != nil {
			q.fail(fmt.Errorf("tta: runner: %s: batch %d: %w", name, b, err))
			break
		}
		q.stepped = b
		rec := &BatchRecord{Stream: name, Batch: b, Size: len(batch), Diagnostics: copyDiagnostics(res.Diag), Seconds: time.Since(t0).Seconds()}
		if len(res.Preds) != len(batch) {
			q.stepped = -1
			q.fail(fmt.Errorf("tta: runner: %s: batch %d: %d predictions for %d images", name, b, len(res.Preds), len(batch)))
			break
		}
		for j, ref := range batch {
			results[ref.domain].Samples++
			if res.Preds[j] == labels[j] {
				results[ref.domain].Correct++
				rec.Correct++
			}
		}
		if name == MixedStream {
			rec.Domains = domainCounts(domains, batch, res.Preds, labels)
		}
		if !records {
			continue
		}
		if sv := r.Config.SaveState; sv != nil && sv(name, b) {
			if rec.state, err = r.Method.MarshalBinary(); err != nil {
				q.fail(fmt.Errorf("tta: runner: %s: batch %d: saving the method's state: %w", name, b, err))
				break
			}
		}
		rec.live = q.liveState(b)
		job := &diagJob{rec: rec, done: make(chan error, 1)}
		if pool == nil {
			job.done <- r.diagnoseSafely(rec, viewResult(res, labels))
		} else {
			// The method may reuse its buffers in its next step.
			job.in = copyResult(res, labels)
			job.in.serial = pool.lag > 1
			pool.jobs <- job
		}
		q.jobs = append(q.jobs, job)
		for len(q.jobs) > lag && q.err == nil {
			q.next()
		}
	}
	for len(q.jobs) > 0 {
		q.next()
	}
	return q.err
}

// recordQueue holds the records of batches stepped and not yet handed
// on, oldest first.
type recordQueue struct {
	r      *Runner
	stream string
	jobs   []*diagJob
	// stepped is the batch after whose step the method's state is, or
	// −1 (before the first step, or after a failed one).
	stepped int
	err     error // the first error
	broken  bool  // a record's diagnostics failed: none after it goes on
}

func (q *recordQueue) fail(err error) {
	if q.err == nil {
		q.err = err
	}
}

// liveState returns BatchRecord.live for batch b.
func (q *recordQueue) liveState(b int) func() ([]byte, error) {
	return func() ([]byte, error) {
		if q.stepped != b {
			return nil, nil
		}
		st, err := q.r.Method.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("tta: runner: %s: batch %d: saving the method's state: %w", q.stream, b, err)
		}
		return st, nil
	}
}

// next waits for the oldest record's diagnostics and hands it on.
func (q *recordQueue) next() {
	j := q.jobs[0]
	q.jobs[0] = nil
	q.jobs = q.jobs[1:]
	err := <-j.done
	if q.broken {
		return
	}
	if err != nil {
		// A gap in the records would make the later ones useless to a
		// caller that resumes from them: stop at the first failure.
		q.broken = true
		q.fail(fmt.Errorf("tta: runner: %s: batch %d: diagnostics: %w", q.stream, j.rec.Batch, err))
		return
	}
	if err := q.r.emit(j.rec); err != nil {
		q.fail(err)
	}
}

// emit writes a batch's record to Log and hands it to OnBatch.
func (r *Runner) emit(rec *BatchRecord) error {
	if r.Config.Log != nil {
		line, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("tta: runner: %w", err)
		}
		if _, err := r.Config.Log.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("tta: runner: log: %w", err)
		}
	}
	if r.Config.OnBatch != nil {
		return r.Config.OnBatch(*rec)
	}
	return nil
}

// fetched is a batch's pixels and labels, read ahead of the method.
type fetched struct {
	pixels []float32
	labels []int
	hold   *autograd.DeviceInput // the pixels' copy on the device; nil: none
}

// fetchViews reads v views of each of the batch's samples into dst, one
// call to ViewSamples per run of samples from the same domain.
func (r *Runner) fetchViews(domains []Domain, batch []sampleRef, v int, kind tta.ViewKind, dst []float32) ([]float32, []int, error) {
	var labels []int
	for start := 0; start < len(batch); {
		end := start + 1
		for end < len(batch) && batch[end].domain == batch[start].domain {
			end++
		}
		d := domains[batch[start].domain]
		vd, ok := d.(ViewDomain)
		if !ok {
			return nil, nil, fmt.Errorf("tta: runner: %s: %s sees %d views of each image, and the domain gives one", d.Name(), r.Method.Name(), v)
		}
		idx := make([]int, end-start)
		for j, ref := range batch[start:end] {
			idx[j] = ref.index
		}
		before := len(dst)
		px, ls, err := vd.ViewSamples(idx, v, kind, r.Config.Seed, dst)
		if err != nil {
			return nil, nil, fmt.Errorf("tta: runner: %s: %w", d.Name(), err)
		}
		if len(ls) != len(idx) || (len(px)-before)%(v*len(idx)) != 0 {
			return nil, nil, fmt.Errorf("tta: runner: %s: ViewSamples returned %d labels and %d values for %d images × %d views", d.Name(), len(ls), len(px)-before, len(idx), v)
		}
		dst, labels = px, append(labels, ls...)
		start = end
	}
	return dst, labels, nil
}

// fetch reads the batch's samples into dst: with one call to Samples when
// they all come from one BatchDomain, else one Sample at a time.
func (r *Runner) fetch(domains []Domain, batch []sampleRef, dst []float32) ([]float32, []int, error) {
	first := batch[0].domain
	same := true
	for _, ref := range batch {
		same = same && ref.domain == first
	}
	if bd, ok := domains[first].(BatchDomain); ok && same {
		idx := make([]int, len(batch))
		for j, ref := range batch {
			idx[j] = ref.index
		}
		px, labels, err := bd.Samples(idx, dst)
		if err != nil {
			return nil, nil, fmt.Errorf("tta: runner: %s: %w", bd.Name(), err)
		}
		if len(labels) != len(batch) || len(px)%len(batch) != 0 {
			return nil, nil, fmt.Errorf("tta: runner: %s: Samples returned %d labels and %d values for %d images", bd.Name(), len(labels), len(px), len(batch))
		}
		return px, labels, nil
	}
	labels := make([]int, len(batch))
	size := -1
	for j, ref := range batch {
		px, label, err := domains[ref.domain].Sample(ref.index)
		if err != nil {
			return nil, nil, fmt.Errorf("tta: runner: %s: sample %d: %w", domains[ref.domain].Name(), ref.index, err)
		}
		if size >= 0 && len(px) != size {
			return nil, nil, fmt.Errorf("tta: runner: %s: sample %d has %d values, earlier samples %d", domains[ref.domain].Name(), ref.index, len(px), size)
		}
		size = len(px)
		dst = append(dst, px...)
		labels[j] = label
	}
	return dst, labels, nil
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}
