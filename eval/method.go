package eval

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/report"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/online"
)

// methodRun evaluates one method on the domains it has left.
type methodRun struct {
	cfg      Config
	preset   tta.Preset
	method   tta.Method
	text     *feature.TextSubspace
	head     *mat.Dense
	domains  []*domain
	todo     []int // indices into domains not yet in the results
	units    int   // the domains of this method in this run (of its shard)
	done     map[[2]string]bool
	opt      Options
	progress *Progress
	ctx      context.Context
	sum      *Summary
	logf     func(string, ...any)

	batches *os.File
	stats   map[string]*domainStats // per domain, from the batch records
	build   string                  // report.Environment.Build, for the records
	order   *sampleOrder            // Config.Order's, nil for the shuffle

	// The domain in progress (reset and continual protocols): its index, when this attempt
	// at it started, the counts and time of the batches a checkpoint
	// restored, and when it was last checkpointed.
	parts          map[int]*partialDomain
	current        int
	started        time.Time
	prior          online.DomainResult
	priorTime      time.Duration
	lastCheckpoint time.Time
}

// domainStats gathers a domain's per-batch diagnostics into its record.
type domainStats struct {
	steps, skipped int
	cosines        [][]float64
	concentration  []float64
	predCosine     []float64
	trueCosine     []float64
	cos            report.CosineSummary // sums until record divides them
	batches        int
	seconds        map[string]float64 // summed over the batches
}

func (r *methodRun) name() string { return r.preset.Method }

func (r *methodRun) run() error {
	r.stats = map[string]*domainStats{}
	proto, _ := protocol(r.cfg.Protocol)
	if !perDomain(proto) {
		return r.runWhole(proto)
	}
	start := 0
	carried, err := r.method.MarshalCarried()
	if err != nil {
		return fmt.Errorf("eval: %s: %w", r.name(), err)
	}
	if carried != nil {
		// SubTTA's EMA covariance flows from one domain to the next: resume
		// only after a finished prefix whose state was saved, redoing what
		// follows it.
		var v []byte
		start, v = r.resumePoint()
		if start > 0 {
			if err := r.method.UnmarshalCarried(v); err != nil {
				return fmt.Errorf("eval: %s: %w", r.statePath(start), err)
			}
		}
		r.todo = r.todo[:0]
		for i := start; i < len(r.domains); i++ {
			r.todo = append(r.todo, i)
		}
	}
	parts, err := r.loadPartials()
	if err != nil {
		return err
	}
	r.parts = parts
	redo, kept := map[string]bool{}, map[string]int{}
	for _, i := range r.todo {
		redo[r.domains[i].name] = true
		if p := parts[i]; p != nil {
			kept[r.domains[i].name] = p.batches
		}
	}
	// Batch lines of domains about to be computed (left by an interrupted
	// attempt, or redone after the carried state) are dropped first, so
	// each domain's lines are those of its stored record; a domain that
	// continues from a checkpoint keeps the lines of the batches before it.
	if err := r.openBatches(func(stream string, batch int) bool { return redo[stream] && batch >= kept[stream] }); err != nil {
		return err
	}
	defer r.batches.Close()
	r.sum.Resumed += r.units - len(r.todo)
	if n := r.units - len(r.todo); n > 0 {
		r.logf("%s: resuming: %d of %d domains already done", r.name(), n, r.units)
	}
	var images int
	var busy time.Duration
	checked, finite := checkFinite(r.method, r.preset.BatchSize)
	for _, i := range r.todo {
		d := r.domains[i]
		t0 := time.Now()
		r.current, r.prior, r.priorTime, r.lastCheckpoint = i, online.DomainResult{}, 0, t0
		r.started = t0
		cfg := r.runnerConfig(proto)
		cfg.Resume = finite.watch(r.resume)
		run := online.Runner{Method: checked, Config: cfg}
		rep, err := run.Run([]online.Domain{d})
		if err != nil {
			return r.interrupted(err)
		}
		res := rep.Domains[0]
		images, busy = images+res.Samples, busy+time.Since(t0)
		if r.prior.Samples > 0 {
			res.Samples += r.prior.Samples
			res.Correct += r.prior.Correct
			res.Accuracy = 100 * float64(res.Correct) / float64(res.Samples)
		}
		// A domain continued from a checkpoint counts the time of its
		// earlier attempts up to the checkpoint.
		rec := r.record(d, res, r.priorTime+time.Since(t0))
		v, err := r.method.MarshalCarried()
		if err != nil {
			return fmt.Errorf("eval: %s: %w", r.name(), err)
		}
		if v != nil {
			// The state goes to disk before the record, so that every
			// finished prefix has the state that follows it; the state
			// before the domain goes once the record is stored, so that a
			// run stopped before then resumes with this domain rather than
			// from the start.
			if err := writeState(r.statePath(i+1), v); err != nil {
				return err
			}
		}
		if err := r.store(rec); err != nil {
			return err
		}
		if v != nil {
			os.Remove(r.statePath(i))
		}
		os.Remove(r.partialPath(i))
	}
	if images > 0 && len(r.todo) > 1 {
		r.logf("%s: %d images in %.1f s, %.1f img/s (reading, preprocessing and the method, over the domains computed)", r.name(), images, busy.Seconds(), float64(images)/busy.Seconds())
	}
	return nil
}

// runWhole runs the continual or mixed protocol: one stream through every
// domain, whose records are stored at the end. The stream continues from
// its checkpoint (streamPartialPath), if any; otherwise every domain is
// redone.
func (r *methodRun) runWhole(proto online.Protocol) error {
	ds := make([]online.Domain, len(r.domains))
	idx := map[string]int{}
	for i, d := range r.domains {
		ds[i] = d
		idx[d.name] = i
	}
	part := r.loadStreamPartial(proto)
	// The batch lines of earlier attempts go, but for those of the batches
	// before the checkpoint.
	err := r.openBatches(func(stream string, batch int) bool {
		if part != nil && proto == online.Mixed {
			return stream != online.MixedStream || batch >= part.batches
		}
		j, ok := idx[stream]
		return part == nil || !ok || j > part.domain || j == part.domain && batch >= part.batches
	})
	if err != nil {
		return err
	}
	defer r.batches.Close()
	prior := make([]online.DomainResult, len(r.domains))
	if part != nil {
		for _, l := range part.lines {
			if proto == online.Mixed {
				for _, c := range l.Domains {
					prior[idx[c.Name]].Samples += c.Size
					prior[idx[c.Name]].Correct += c.Correct
				}
			} else {
				j := idx[l.Stream]
				prior[j].Samples += l.Size
				prior[j].Correct += l.Correct
			}
			r.progress.Total -= l.Size
			r.addStats(l.BatchRecord)
		}
		r.priorTime = part.elapsed
		r.sum.Continued += len(part.lines)
		where := online.MixedStream
		if proto == online.Continual {
			where = r.domains[part.domain].name
		}
		r.logf("%s: continuing the %s stream in %s after batch %d, from %s", r.name(), proto, where, part.batches, r.streamPartialPath())
	} else if len(r.todo) < len(r.domains) {
		r.logf("%s: no checkpoint of the %s stream; redoing all %d domains", r.name(), proto, len(r.domains))
	}
	t0 := time.Now()
	r.started, r.lastCheckpoint = t0, t0
	cfg := r.runnerConfig(proto)
	cfg.Resume = func(stream string) (int, error) {
		j := idx[stream] // 0 for the mixed stream
		r.current = j
		switch {
		case part == nil || j > part.domain:
			return 0, nil
		case j < part.domain:
			return r.batchCount(j), nil
		}
		if err := r.method.UnmarshalBinary(part.state); err != nil {
			return 0, fmt.Errorf("%s: %w (delete the file to compute the stream from its start)", r.streamPartialPath(), err)
		}
		return part.batches, nil
	}
	checked, finite := checkFinite(r.method, r.preset.BatchSize)
	cfg.Resume = finite.watch(cfg.Resume)
	run := online.Runner{Method: checked, Config: cfg}
	rep, err := run.Run(ds)
	if err != nil {
		return r.interrupted(err)
	}
	el := r.priorTime + time.Since(t0)
	total := 0
	for _, d := range r.domains {
		total += online.Limited(d.Len(), r.cfg.Limit)
	}
	for i, d := range r.domains {
		res := rep.Domains[i]
		if prior[i].Samples > 0 {
			res.Samples += prior[i].Samples
			res.Correct += prior[i].Correct
			res.Accuracy = 100 * float64(res.Correct) / float64(res.Samples)
		}
		// Time is shared out by images: the stream interleaves domains.
		share := time.Duration(float64(el) * float64(online.Limited(d.Len(), r.cfg.Limit)) / float64(max(total, 1)))
		if err := r.store(r.record(d, res, share)); err != nil {
			return err
		}
	}
	os.Remove(r.streamPartialPath())
	return nil
}

// batchCount is the number of batches of domain i.
func (r *methodRun) batchCount(i int) int {
	bs := r.preset.BatchSize
	return (online.Limited(r.domains[i].Len(), r.cfg.Limit) + bs - 1) / bs
}

// openBatches rewrites the batch log without this method's lines that drop
// selects, and opens it for appending.
func (r *methodRun) openBatches(drop func(stream string, batch int) bool) error {
	path := filepath.Join(r.cfg.Out, BatchesFile)
	if err := pruneBatches(path, r.name(), drop); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	r.batches = f
	return nil
}

// pruneBatches rewrites the batch log at path (if any) without the lines of
// method that drop selects by stream and batch index; a line that cannot be
// read (one cut short by a kill) goes too.
func pruneBatches(path, method string, drop func(stream string, batch int) bool) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	var kept []byte
	changed := false
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var id struct {
			Method string `json:"method"`
			Stream string `json:"stream"`
			Batch  int    `json:"batch"`
		}
		if json.Unmarshal(line, &id) != nil || !bytes.HasSuffix(line, []byte("\n")) || id.Method == method && drop(id.Stream, id.Batch) {
			changed = true
			continue
		}
		kept = append(kept, line...)
	}
	if !changed {
		return nil
	}
	return writeFileAtomic(path, kept)
}

func (r *methodRun) runnerConfig(proto online.Protocol) online.RunnerConfig {
	return online.RunnerConfig{
		Protocol:  proto,
		BatchSize: r.preset.BatchSize,
		Shuffle:   !r.cfg.NoShuffle,
		Seed:      r.cfg.Seed,
		Limit:     r.cfg.Limit,
		Order:     streamOrder(r.order),
		Text:      r.text,
		Head:      r.head,
		OnBatch:   r.onBatch,
		// The diagnostics of a batch are computed while the method steps
		// on the next ones: the state a checkpoint will save is taken at
		// the step it belongs to.
		DiagnosticWorkers: r.opt.DiagnosticWorkers,
		SaveState:         func(string, int) bool { return r.checkpointDue() },
	}
}

func (r *methodRun) onBatch(b online.BatchRecord) error {
	r.addStats(b)
	line, err := json.Marshal(batchLine{Method: r.name(), BatchRecord: b})
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if _, err := r.batches.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("eval: %s: %w", BatchesFile, err)
	}
	r.progress.advance(r.name(), b.Stream, b.Size)
	if r.opt.Progress != nil {
		r.opt.Progress(*r.progress)
	}
	if err := r.checkpoint(&b); err != nil {
		return err
	}
	return r.ctx.Err()
}

// addStats adds a batch's diagnostics to its domain's statistics.
func (r *methodRun) addStats(b online.BatchRecord) {
	st := r.stats[b.Stream]
	if st == nil {
		st = &domainStats{}
		r.stats[b.Stream] = st
	}
	st.steps += b.Steps
	st.skipped += b.Skipped
	if len(b.PrincipalCosines) > 0 {
		st.cosines = append(st.cosines, b.PrincipalCosines)
	}
	if b.SemanticConcentration != nil {
		st.concentration = append(st.concentration, *b.SemanticConcentration)
	}
	if b.PredictedClassCosine != nil {
		st.predCosine = append(st.predCosine, *b.PredictedClassCosine)
	}
	if b.TrueClassCosine != nil {
		st.trueCosine = append(st.trueCosine, *b.TrueClassCosine)
	}
	if sc := b.SampleCosines; sc != nil {
		for i, ok := range sc.Correct {
			st.cos.Predicted += sc.Predicted[i]
			st.cos.True += sc.True[i]
			if ok {
				st.cos.Correct++
				st.cos.CorrectPredicted += sc.Predicted[i]
			} else {
				st.cos.Wrong++
				st.cos.WrongPredicted += sc.Predicted[i]
				st.cos.WrongTrue += sc.True[i]
			}
		}
	}
	st.batches++
	for k, v := range b.Timings {
		if st.seconds == nil {
			st.seconds = map[string]float64{}
		}
		st.seconds[k] += v
	}
}

func (r *methodRun) record(d *domain, res online.DomainResult, el time.Duration) report.Record {
	rec := report.Record{
		Method: r.name(), Domain: d.name, Corruption: d.corruption, Severity: d.severity,
		Samples: res.Samples, Correct: res.Correct, Accuracy: res.Accuracy,
		Seconds: el.Seconds(), Finished: time.Now().UTC(), Build: r.build, Run: r.opt.runID.digest(d.corruption),
	}
	if d.down {
		rec.Corruption, rec.Severity, rec.Run = "", 0, r.opt.runID.digest("")
	}
	if el > 0 {
		rec.ImagesPerSecond = float64(res.Samples) / el.Seconds()
	}
	if given := r.cfg.MethodOptions.forMethod(r.name()); len(given) > 0 {
		vals := r.preset.OptionValues()
		rec.Options = map[string]string{}
		for k := range given {
			rec.Options[k] = vals[k]
		}
	}
	if st := r.stats[d.name]; st != nil {
		rec.Steps, rec.Skipped = st.steps, st.skipped
		rec.PrincipalCosines, rec.SemanticConcentration, rec.PredictedClassCosine = st.cosines, st.concentration, st.predCosine
		rec.TrueClassCosine, rec.Cosines, rec.Batches = st.trueCosine, st.cos.Means(), st.batches
		if st.batches > 0 && len(st.seconds) > 0 {
			rec.BatchSeconds = map[string]float64{}
			for k, v := range st.seconds {
				rec.BatchSeconds[k] = v / float64(st.batches)
			}
		}
	}
	return rec
}

// store stores a domain's record in the results file: appended, or, for
// a domain the file already holds (one redone because the state carried
// into it was not on disk, or a stream redone whole), in place of the
// earlier record, so that the file holds each domain once.
func (r *methodRun) store(rec report.Record) error {
	path := filepath.Join(r.cfg.Out, ResultsFile)
	if r.done[[2]string{rec.Method, rec.Domain}] {
		if err := replaceRecord(path, rec); err != nil {
			return err
		}
	} else if err := report.AppendRecord(path, rec); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	r.done[[2]string{rec.Method, rec.Domain}] = true
	r.sum.Computed++
	r.logf("%-10s %-22s %6.2f%%  (%d images, %.1f img/s)", rec.Method, rec.Domain, rec.Accuracy, rec.Samples, rec.ImagesPerSecond)
	if r.opt.AfterDomain != nil {
		r.opt.AfterDomain(rec)
	}
	return nil
}

// replaceRecord rewrites the results file at path (atomically) with rec in
// place of the records of its method and domain, appended after the
// others, which keep their bytes; a last line cut short by a kill goes,
// as report.AppendRecord drops it.
func replaceRecord(path string, rec report.Record) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("eval: %s: %s on %s: %w", path, rec.Method, rec.Domain, err)
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("eval: %w", err)
	}
	kept := make([]byte, 0, len(b)+len(line)+1)
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var id struct {
			Method string `json:"method"`
			Domain string `json:"domain"`
		}
		if json.Unmarshal(l, &id) != nil {
			if !bytes.HasSuffix(l, []byte("\n")) {
				continue // cut short
			}
			return fmt.Errorf("eval: %s: %w: %q", path, report.ErrDamagedLine, l)
		}
		if id.Method == rec.Method && id.Domain == rec.Domain {
			continue
		}
		kept = append(kept, bytes.TrimRight(l, "\n")...)
		kept = append(kept, '\n')
	}
	kept = append(append(kept, line...), '\n')
	return writeFileAtomic(path, kept)
}

// interrupted wraps an error that stopped a method mid-way, saying what
// of its results the folder keeps: an interruption, to be resumed, or a
// step whose outputs were not finite (finiteMethod), with its likely cause.
func (r *methodRun) interrupted(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return interruptedError{fmt.Sprintf("eval: interrupted during %s; %s; run again to resume", r.name(), r.kept(true)), err}
	}
	var d *divergedError
	if errors.As(err, &d) {
		return fmt.Errorf("eval: %w: %s; %s", d, d.why(r.cfg.MethodOptions.forMethod(r.name())), r.kept(false))
	}
	return fmt.Errorf("eval: %s: %w", r.name(), err)
}

// kept says what of the method's results the folder holds after it
// stopped early: the records of its finished domains in results.jsonl
// (those of a continual or mixed stream are written once the stream
// ends) and, with checkpoints, the checkpoint of the domain or stream in
// progress if there is one on disk.
func (r *methodRun) kept(checkpoints bool) string {
	n := 0
	for _, d := range r.domains {
		if r.done[[2]string{r.name(), d.name}] {
			n++
		}
	}
	proto, _ := protocol(r.cfg.Protocol)
	var parts []string
	switch {
	case n == 1:
		parts = append(parts, fmt.Sprintf("1 finished domain of %s is kept in %s", r.name(), filepath.Join(r.cfg.Out, ResultsFile)))
	case n > 1:
		parts = append(parts, fmt.Sprintf("%d finished domains of %s are kept in %s", n, r.name(), filepath.Join(r.cfg.Out, ResultsFile)))
	case perDomain(proto):
		parts = append(parts, fmt.Sprintf("no domain of %s had finished, so none is stored", r.name()))
	default:
		parts = append(parts, fmt.Sprintf("%s's %s stream stores its domains' records only once it ends: none is stored yet", r.name(), r.cfg.Protocol))
	}
	if checkpoints {
		path, what := r.partialPath(r.current), r.domains[r.current].name
		if !perDomain(proto) {
			path, what = r.streamPartialPath(), "the stream"
		}
		if exists(path) {
			parts = append(parts, fmt.Sprintf("%s, in progress, is checkpointed in %s", what, path))
		} else {
			parts = append(parts, fmt.Sprintf("%s, in progress, has no checkpoint: it is computed again from its start", what))
		}
	}
	return strings.Join(parts, ", and ")
}

// interruptedError says where the results of an interrupted run are; it
// wraps the context's error.
type interruptedError struct {
	msg string
	err error
}

func (e interruptedError) Error() string { return e.msg }
func (e interruptedError) Unwrap() error { return e.err }

// resumePoint is the length k of the longest finished prefix of the
// domains whose carried state is on disk and intact (0 needs none), and
// that state. A state file that is damaged (readState) is removed with a
// warning, and a shorter prefix is looked for.
func (r *methodRun) resumePoint() (int, []byte) {
	k := 0
	for k < len(r.domains) && r.done[[2]string{r.name(), r.domains[k].name}] {
		k++
	}
	for ; k > 0; k-- {
		path := r.statePath(k)
		if !exists(path) {
			continue
		}
		v, err := readState(path)
		if err == nil {
			return k, v
		}
		r.logf("warning: %s: ignoring the carried state: %s; computing the domains after it again", r.name(), strings.TrimPrefix(err.Error(), "eval: "))
		os.Remove(path)
	}
	return 0, nil
}

// statePath is the file of the carried state after the first k domains.
// Its name holds a hash of those domains' names in order: a state is only
// resumed after exactly the domains that made it, not after as many others
// (a run of shot_noise then gaussian_noise leaves nothing that a run of all
// 15 corruptions, gaussian_noise first, would take up).
func (r *methodRun) statePath(k int) string {
	return filepath.Join(r.cfg.Out, stateDir, fmt.Sprintf("%s.%d.%x.f64", r.name(), k, domainsHash(r.domains[:k])))
}

// domainsHash identifies a sequence of domains by their names, in order
// (8 bytes of SHA-256), for the names of state files.
func domainsHash(ds []*domain) []byte {
	h := sha256.New()
	for _, d := range ds {
		h.Write([]byte(d.name))
		h.Write([]byte{0})
	}
	return h.Sum(nil)[:8]
}

// Carried-state files: a magic line, the payload's length, the payload
// (tta.Method.MarshalCarried), and a CRC-32C of every byte before it (4
// bytes, big-endian, as the checkpoints of partial domains). Version 2
// files, written before the checksum, are read by their length alone, as
// that build did. Version 1 files, written before methods encoded their
// own carried state, hold a count of float64 values and the values in
// little-endian order, the very bytes SubTTA's MarshalCarried returns;
// they are read as such.
const (
	stateMagicV1 = "subtta-carried-v1"
	stateMagicV2 = "subtta-carried-v2"
	stateMagic   = "subtta-carried-v3"
)

// writeState stores a carried state.
func writeState(path string, v []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	b := make([]byte, 0, len(stateMagic)+8+len(v)+crcLen)
	b = append(b, stateMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(v)))
	b = append(b, v...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return writeFileAtomic(path, b)
}

func readState(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	width := uint64(1) // bytes per announced unit
	sum := 0           // the checksum's length
	switch {
	case len(b) >= len(stateMagic)+8 && string(b[:len(stateMagic)]) == stateMagic:
		sum = crcLen
	case len(b) >= len(stateMagicV2)+8 && string(b[:len(stateMagicV2)]) == stateMagicV2:
	case len(b) >= len(stateMagicV1)+8 && string(b[:len(stateMagicV1)]) == stateMagicV1:
		width = 8
	default:
		return nil, fmt.Errorf("eval: %s: not a carried-state file", path)
	}
	h := len(stateMagic) + 8 // the magics are as long
	n := binary.LittleEndian.Uint64(b[len(stateMagic):])
	if uint64(len(b)-h) != width*n+uint64(sum) {
		return nil, fmt.Errorf("eval: %s: truncated (%d bytes announced, %d present)", path, width*n+uint64(sum), len(b)-h)
	}
	if end := len(b) - sum; sum > 0 && crc32.Checksum(b[:end], castagnoli) != binary.BigEndian.Uint32(b[end:]) {
		return nil, fmt.Errorf("eval: %s: %w: its checksum does not match its %d bytes", path, errDamagedPartial, len(b))
	}
	return b[h : len(b)-sum], nil
}
