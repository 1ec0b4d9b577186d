package eval

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"github.com/subtta/subtta/tta/online"
)

// DefaultCheckpointEvery is how often, at most, a domain in progress is
// checkpointed when Options.CheckpointEvery is 0.
const DefaultCheckpointEvery = 30 * time.Second

// partialDomain is a domain (or a continual or mixed stream) cut short by
// an interruption: the method's whole state (tta.Method's MarshalBinary) after its first
// batches, with the lines of the batch log up to there, which give the
// counts and diagnostics so far.
type partialDomain struct {
	domain  int           // the domain in progress, in a stream's checkpoint (0 for mixed); −1 in a domain's
	batches int           // done in that domain (in the mixed stream)
	elapsed time.Duration // the domain's time up to the checkpoint
	state   []byte
	lines   []batchLine
}

// A checkpoint's bytes are, in this order: partialMagic, or streamMagic
// and the index of the stream's domain in progress (8 bytes); the batches
// done (8 bytes) and the time taken (8 bytes, nanoseconds), little-endian;
// the method's state; and a CRC-32C of every byte before it (4 bytes,
// big-endian, as serve's stream states), so that a damaged or cut-short
// checkpoint is never adapted on: readPartial refuses it
// (errDamagedPartial), and the domain is computed from its start.
//
// Checkpoints of the format before checksums (partialMagicV1,
// streamMagicV1) cannot be checked: they are refused likewise
// (errUncheckedPartial), losing at most the batches since the domain's
// start.
const (
	partialMagic   = "subtta-partial-domain-v2\n"
	streamMagic    = "subtta-partial-stream-v2\n" // then the domain's index
	partialMagicV1 = "subtta-partial-domain-v1\n"
	streamMagicV1  = "subtta-partial-stream-v1\n"
)

// crcLen is the length of a checkpoint's checksum.
const crcLen = 4

// castagnoli is CRC-32C's table (hardware-accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Why readPartial refuses a checkpoint that is there.
var (
	errDamagedPartial   = errors.New("damaged checkpoint")
	errUncheckedPartial = errors.New("checkpoint of an earlier build, without a checksum")
)

// partialPath is the checkpoint file of domain i in progress. Like
// statePath, its name holds a hash of the domains up to and including i:
// the method's state in it follows exactly those (SubTTA carries its
// covariance in from the earlier ones).
func (r *methodRun) partialPath(i int) string {
	return filepath.Join(r.cfg.Out, stateDir, fmt.Sprintf("%s.partial.%d.%x.bin", r.name(), i+1, domainsHash(r.domains[:i+1])))
}

// streamPartialPath is the checkpoint file of a continual or mixed stream
// in progress; its name holds the protocol and a hash of every domain, in
// order.
func (r *methodRun) streamPartialPath() string {
	proto, _ := protocol(r.cfg.Protocol)
	return filepath.Join(r.cfg.Out, stateDir, fmt.Sprintf("%s.%s.%x.bin", r.name(), proto, domainsHash(r.domains)))
}

// checkpointEvery is the interval between two checkpoints of a domain or
// stream in progress; ok is false when they are off (a negative interval).
func (r *methodRun) checkpointEvery() (time.Duration, bool) {
	if r.opt.CheckpointEvery < 0 {
		return 0, false
	}
	if r.opt.CheckpointEvery == 0 {
		return DefaultCheckpointEvery, true
	}
	return r.opt.CheckpointEvery, true
}

// loadPartials finds the checkpoints of the domains about to be computed
// and keeps those that agree with the batch log: a checkpoint after k
// batches needs the domain's lines for batches 0…k−1, each once. The
// others, and every checkpoint of a domain not to be computed, are removed.
func (r *methodRun) loadPartials() (map[int]*partialDomain, error) {
	parts := map[int]*partialDomain{}
	keep := map[string]bool{}
	if _, ok := r.checkpointEvery(); ok {
		lines, err := readBatchLines(filepath.Join(r.cfg.Out, BatchesFile), r.name())
		if err != nil {
			return nil, err
		}
		for _, i := range r.todo {
			path := r.partialPath(i)
			p, err := readPartial(path)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				r.logf("warning: %s: ignoring %s (%v): computing %s from its start", r.name(), path, err, r.domains[i].name)
				continue
			}
			if p.lines = batchPrefix(lines[r.domains[i].name], p.batches); p.lines == nil {
				r.logf("%s: ignoring %s: the batch log lacks some of its %d batches", r.name(), path, p.batches)
				continue
			}
			parts[i], keep[path] = p, true
		}
	}
	old, _ := filepath.Glob(filepath.Join(r.cfg.Out, stateDir, r.name()+".partial.*.bin"))
	for _, f := range old {
		if !keep[f] {
			os.Remove(f)
		}
	}
	return parts, nil
}

// loadStreamPartial returns the checkpoint of a continual or mixed stream,
// with the batch lines before it (continual: every batch of the domains
// before its own, and its own first batches; mixed: the stream's first
// batches), or nil when there is none or it disagrees with the batch log
// (then it is removed, and the log says why).
func (r *methodRun) loadStreamPartial(proto online.Protocol) *partialDomain {
	path := r.streamPartialPath()
	if _, ok := r.checkpointEvery(); !ok {
		os.Remove(path)
		return nil
	}
	p, err := readPartial(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil && (p.domain < 0 || p.domain >= len(r.domains)) {
		err = fmt.Errorf("not a stream checkpoint of %d domains (domain %d)", len(r.domains), p.domain)
	}
	var all map[string][]batchLine
	if err == nil {
		all, err = readBatchLines(filepath.Join(r.cfg.Out, BatchesFile), r.name())
	}
	if err == nil && proto == online.Mixed {
		if p.lines = batchPrefix(all[online.MixedStream], p.batches); p.lines == nil {
			err = fmt.Errorf("the batch log lacks some of the stream's %d batches", p.batches)
		}
	}
	for j := 0; err == nil && proto == online.Continual && j <= p.domain; j++ {
		k := r.batchCount(j)
		if j == p.domain {
			k = p.batches
		}
		pre := batchPrefix(all[r.domains[j].name], k)
		if pre == nil {
			err = fmt.Errorf("the batch log lacks some of the %d batches of %s", k, r.domains[j].name)
		}
		p.lines = append(p.lines, pre...)
	}
	if err != nil {
		r.logf("warning: %s: ignoring %s (%v): computing the stream from its start", r.name(), path, err)
		os.Remove(path)
		return nil
	}
	return p
}

// batchPrefix returns the lines of batches 0…k−1, in order, or nil when
// one is missing or repeated.
func batchPrefix(lines []batchLine, k int) []batchLine {
	out := make([]batchLine, k)
	seen := make([]bool, k)
	for _, l := range lines {
		if l.Batch < 0 || l.Batch >= k {
			continue
		}
		if seen[l.Batch] {
			return nil
		}
		out[l.Batch], seen[l.Batch] = l, true
	}
	for _, s := range seen {
		if !s {
			return nil
		}
	}
	return out
}

// readBatchLines returns method's lines of the batch log by stream; lines
// that cannot be read are left out (pruneBatches drops them).
func readBatchLines(path, method string) (map[string][]batchLine, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	out := map[string][]batchLine{}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		var l batchLine
		if !bytes.HasSuffix(line, []byte("\n")) || json.Unmarshal(line, &l) != nil || l.Method != method {
			continue
		}
		out[l.Stream] = append(out[l.Stream], l)
	}
	return out, nil
}

// checkpointDue reports whether the domain in progress is to be
// checkpointed now: the interval has passed since the last checkpoint, or
// the run is being interrupted.
func (r *methodRun) checkpointDue() bool {
	every, ok := r.checkpointEvery()
	return ok && (r.ctx.Err() != nil || time.Since(r.lastCheckpoint) >= every)
}

// checkpoint saves the state of the domain in progress after rec's batch when
// one is due and that state is to be had: saved at its step (the runner
// asks checkpointDue then), or the method's current one, the method not
// having stepped since. Otherwise a later batch's record will do. The
// batch log is synced first, so that the lines the checkpoint counts on
// are on disk before it is.
func (r *methodRun) checkpoint(rec *online.BatchRecord) error {
	if !r.checkpointDue() {
		return nil
	}
	st, err := rec.State()
	if err != nil {
		return fmt.Errorf("eval: %s: %w", r.name(), err)
	}
	if st == nil {
		return nil
	}
	batches := rec.Batch + 1
	if err := r.batches.Sync(); err != nil {
		return fmt.Errorf("eval: %s: %w", BatchesFile, err)
	}
	b := make([]byte, 0, len(streamMagic)+24+len(st)+crcLen)
	path := r.partialPath(r.current)
	if proto, _ := protocol(r.cfg.Protocol); !perDomain(proto) {
		// One file for the stream, which says which domain it is in.
		path = r.streamPartialPath()
		b = append(b, streamMagic...)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.current))
	} else {
		b = append(b, partialMagic...)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(batches))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.priorTime+time.Since(r.started)))
	b = append(b, st...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if err := writeFileAtomic(path, b); err != nil {
		return err
	}
	r.lastCheckpoint = time.Now()
	return nil
}

// readPartial reads the checkpoint at path; one that is damaged or cut
// short (its checksum fails) is an error wrapping errDamagedPartial, one
// of the format before checksums errUncheckedPartial.
func readPartial(path string) (*partialDomain, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var magic, head int // the lengths of the magic, and of it and the fields before the state
	switch {
	case bytes.HasPrefix(b, []byte(streamMagic)):
		magic, head = len(streamMagic), len(streamMagic)+24
	case bytes.HasPrefix(b, []byte(partialMagic)):
		magic, head = len(partialMagic), len(partialMagic)+16
	case bytes.HasPrefix(b, []byte(streamMagicV1)), bytes.HasPrefix(b, []byte(partialMagicV1)):
		return nil, errUncheckedPartial
	default:
		return nil, errors.New("not a partial-domain checkpoint")
	}
	if len(b) < head+crcLen {
		return nil, fmt.Errorf("%w: cut short (%d bytes)", errDamagedPartial, len(b))
	}
	end := len(b) - crcLen
	if crc32.Checksum(b[:end], castagnoli) != binary.BigEndian.Uint32(b[end:]) {
		return nil, fmt.Errorf("%w: its checksum does not match its %d bytes", errDamagedPartial, len(b))
	}
	domain := -1
	f := b[magic:head]
	if bytes.HasPrefix(b, []byte(streamMagic)) {
		i := binary.LittleEndian.Uint64(f)
		if i > 1<<20 {
			return nil, fmt.Errorf("bad domain index %d", i)
		}
		domain, f = int(i), f[8:]
	}
	n := binary.LittleEndian.Uint64(f)
	el := time.Duration(binary.LittleEndian.Uint64(f[8:]))
	if n == 0 || n > 1<<31 || el < 0 {
		return nil, fmt.Errorf("bad batch count %d or time %v", n, el)
	}
	return &partialDomain{domain: domain, batches: int(n), elapsed: el, state: b[head:end]}, nil
}

// resume is the runner's Resume hook: it restores the state of the domain
// in progress, if it was checkpointed, and replays its batch lines into
// the domain's statistics.
func (r *methodRun) resume(stream string) (int, error) {
	p := r.parts[r.current]
	if p == nil {
		return 0, nil
	}
	if err := r.method.UnmarshalBinary(p.state); err != nil {
		return 0, fmt.Errorf("%s: %w (delete the file to compute %s from its start)", r.partialPath(r.current), err, stream)
	}
	for _, l := range p.lines {
		r.addStats(l.BatchRecord)
		r.prior.Samples += l.Size
		r.prior.Correct += l.Correct
	}
	r.priorTime = p.elapsed
	r.progress.Total -= r.prior.Samples // the run has that much less to compute
	r.sum.Continued += p.batches
	r.logf("%s: %s: continuing after batch %d from %s", r.name(), stream, p.batches, r.partialPath(r.current))
	return p.batches, nil
}
