package pretrain

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/internal/dirlock"
)

// RunOptions control Run.
type RunOptions struct {
	// Dir is the run folder: CheckpointFile, ModelFile and LogFile. A
	// checkpoint found there is resumed.
	Dir string
	// Test, if not nil, is classified zero-shot after every epoch (its
	// first EvalLimit images when EvalLimit > 0).
	Test      *Images
	EvalLimit int
	// CheckpointEvery > 0 also writes a checkpoint every that many steps
	// (one is always written at the end of each epoch and on interruption).
	CheckpointEvery int
	// StopAfter > 0 stops after that many steps of this call, with a
	// checkpoint (for tests of resumption).
	StopAfter int
	// Progress, if not nil, is called after every step.
	Progress func(Progress)
	// Epoch, if not nil, is called with each epoch's record.
	Epoch func(EpochRecord)
	// Warn, if not nil, is called with what the caller should be told
	// but that does not stop the run: that a checkpoint of an earlier
	// build, which records no training set, is resumed unchecked.
	Warn func(string)
}

// Progress describes the run after a step.
type Progress struct {
	Step, Total int
	Epoch       int // 1-based
	Loss        float64
	LR          float64
	// Resumed is the step the run started from in this process.
	Resumed int
}

// EpochRecord is one line of the log: the figures of an epoch.
type EpochRecord struct {
	Epoch      int     `json:"epoch"` // 1-based
	Step       int     `json:"step"`
	TrainLoss  float64 `json:"train_loss"`
	TrainAcc   float64 `json:"train_acc"` // on augmented images, against one caption per class
	TestAcc    float64 `json:"test_acc,omitempty"`
	TestImages int     `json:"test_images,omitempty"`
	LR         float64 `json:"lr"`
	LogitScale float64 `json:"logit_scale"`
	// Seconds is the run's wall time so far, summed over every process that ran part of it.
	Seconds float64 `json:"seconds"`
}

// Open returns the trainer of the run in dir: resumed from its checkpoint
// if there is one (its settings must equal cfg, its training set train),
// else new. A checkpoint of an earlier build, which records no training
// set, is resumed without that check (Run warns of it).
func Open(dir string, cfg Config, train *Images) (*Trainer, error) {
	t, _, err := open(dir, cfg, train)
	return t, err
}

func open(dir string, cfg Config, train *Images) (*Trainer, progress, error) {
	if err := cfg.Validate(); err != nil {
		return nil, progress{}, err
	}
	if train == nil {
		return nil, progress{}, errors.New("pretrain: no training images")
	}
	ck := filepath.Join(dir, CheckpointFile)
	if fileExists(ck) {
		return loadCheckpoint(ck, cfg, train, train.Identity())
	}
	t, err := NewTrainer(cfg, train)
	return t, progress{}, err
}

// TestInterruptedError is Run's error when its context ends during an
// epoch's test pass: the epoch is trained and its checkpoint written, but
// not yet logged; the run resumed from that checkpoint tests it first,
// then logs it, so that no epoch is logged without its test accuracy.
// It wraps the context's error.
type TestInterruptedError struct {
	Epoch int // 1-based
	Err   error
}

func (e *TestInterruptedError) Error() string {
	return fmt.Sprintf("pretrain: epoch %d's test pass interrupted (the resumed run does it first): %v", e.Epoch, e.Err)
}

func (e *TestInterruptedError) Unwrap() error { return e.Err }

// Run trains the run in opt.Dir to its last epoch, resuming from the
// checkpoint there. After every epoch it evaluates, appends a record to
// the log and writes a checkpoint and the model; when ctx is cancelled it
// writes a checkpoint at the current step and returns ctx's error, so that
// the same call resumes where it stopped. Cancelled during an epoch's test
// pass, it records the epoch in the checkpoint as trained but untested and
// returns a *TestInterruptedError; the resumed run tests and logs that
// epoch before it trains on, so that its log equals an uninterrupted
// run's. A training set smaller than one batch is refused before opt.Dir
// is made, and a folder this call made is removed again when it fails
// before writing a checkpoint. It returns the trainer.
func Run(ctx context.Context, cfg Config, train *Images, opt RunOptions) (*Trainer, error) {
	if opt.Dir == "" {
		return nil, errors.New("pretrain: no run folder")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if train == nil {
		return nil, errors.New("pretrain: no training images")
	}
	if train.Len() < cfg.BatchSize {
		return nil, fmt.Errorf("pretrain: %d images make no batch of %d", train.Len(), cfg.BatchSize)
	}
	_, statErr := os.Stat(opt.Dir)
	made := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	lock, err := dirlock.Acquire(opt.Dir)
	if err != nil {
		return nil, fmt.Errorf("pretrain: %w", err)
	}
	ck := filepath.Join(opt.Dir, CheckpointFile)
	defer func() {
		// A folder made here that holds nothing of the run is not left
		// behind (an empty folder, or one with only its lock file).
		if made && !fileExists(ck) && lock.Remove() == nil {
			os.Remove(opt.Dir)
			return
		}
		lock.Unlock()
	}()
	t, pr, err := open(opt.Dir, cfg, train)
	if err != nil {
		return nil, err
	}
	if pr.legacyData && opt.Warn != nil {
		opt.Warn(fmt.Sprintf("%s records no training set (an earlier build wrote it): resuming at step %d on %s unchecked; make sure it is the data the run began with (the next checkpoint records it)",
			ck, t.Step, t.dataIdentity()))
	}
	start, resumed := time.Now(), t.Step
	save := func() error {
		p := pr
		p.Elapsed += time.Since(start).Seconds()
		return t.saveCheckpoint(ck, p)
	}
	// endEpoch tests the epoch of rec (when there is a test set), logs it
	// and writes the model and the checkpoint. Interrupted in the test, it
	// keeps rec in the checkpoint as the untested epoch instead.
	endEpoch := func(rec EpochRecord) error {
		if opt.Test != nil {
			acc, err := t.Accuracy(ctx, opt.Test, opt.EvalLimit)
			if err != nil && ctx.Err() == nil {
				return err
			}
			if err != nil {
				pr.Untested = &rec
				if serr := save(); serr != nil {
					return errors.Join(err, serr)
				}
				return &TestInterruptedError{Epoch: rec.Epoch, Err: err}
			}
			rec.TestAcc, rec.TestImages = acc, opt.Test.Len()
			if opt.EvalLimit > 0 {
				rec.TestImages = min(opt.EvalLimit, opt.Test.Len())
			}
		}
		rec.Seconds = pr.Elapsed + time.Since(start).Seconds()
		if err := appendLog(filepath.Join(opt.Dir, LogFile), rec); err != nil {
			return err
		}
		if err := t.SaveModel(filepath.Join(opt.Dir, ModelFile)); err != nil {
			return err
		}
		pr.Untested = nil
		if err := save(); err != nil {
			return err
		}
		if opt.Epoch != nil {
			opt.Epoch(rec)
		}
		return nil
	}
	if pr.Untested != nil {
		// The checkpoint is at the end of an epoch whose test pass was
		// interrupted: that epoch is tested and logged first.
		if opt.Test == nil && opt.Warn != nil {
			opt.Warn(fmt.Sprintf("epoch %d's test pass was interrupted and this run has no test set: it is logged without test accuracy", pr.Untested.Epoch))
		}
		if err := endEpoch(*pr.Untested); err != nil {
			return t, err
		}
	}
	total, spe := t.TotalSteps(), t.StepsPerEpoch()
	for t.Step < total {
		if err := ctx.Err(); err != nil {
			if serr := save(); serr != nil {
				return t, errors.Join(err, serr)
			}
			return t, err
		}
		res, err := t.TrainStep()
		if err != nil {
			return t, err
		}
		if math.IsNaN(res.Loss) {
			return t, fmt.Errorf("pretrain: step %d: the loss is NaN", t.Step)
		}
		pr.EpochLoss += res.Loss
		pr.EpochCorrect += res.Correct
		pr.EpochImages += res.Images
		if opt.Progress != nil {
			opt.Progress(Progress{Step: t.Step, Total: total, Epoch: (t.Step-1)/spe + 1, Loss: res.Loss, LR: res.LR, Resumed: resumed})
		}
		switch {
		case t.Step%spe == 0:
			rec := EpochRecord{Epoch: t.Step / spe, Step: t.Step, TrainLoss: pr.EpochLoss / float64(spe),
				TrainAcc: float64(pr.EpochCorrect) / float64(pr.EpochImages), LR: res.LR, LogitScale: t.LogitScale()}
			pr.EpochLoss, pr.EpochCorrect, pr.EpochImages = 0, 0, 0
			if err := endEpoch(rec); err != nil {
				return t, err
			}
		case opt.CheckpointEvery > 0 && t.Step%opt.CheckpointEvery == 0:
			if err := save(); err != nil {
				return t, err
			}
		}
		if opt.StopAfter > 0 && t.Step-resumed >= opt.StopAfter && t.Step < total {
			return t, save()
		}
	}
	return t, nil
}

// appendLog appends rec to the JSONL log at path, dropping any record of
// the same or a later epoch first (left by a run interrupted between the
// log and its checkpoint).
func appendLog(path string, rec EpochRecord) error {
	recs, err := ReadLog(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var kept []EpochRecord
	for _, r := range recs {
		if r.Epoch < rec.Epoch {
			kept = append(kept, r)
		}
	}
	kept = append(kept, rec)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range kept {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if err := atomicfile.Write(path, b.Bytes()); err != nil {
		return fmt.Errorf("pretrain: %w", err)
	}
	return nil
}

// ReadLog reads the epoch records of a run's log.
func ReadLog(path string) ([]EpochRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []EpochRecord
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		var r EpochRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("pretrain: %s:%d: %w", path, line, err)
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}
