package eval

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestEpisodicContinuesMidDomain runs SubTTA-S (its feature bank on, as
// the episodic preset has it) and TENT under the episodic protocol,
// cancels in the second domain, and checks that the next run continues
// from the checkpoint with the records of an uninterrupted run: the
// checkpoint holds the bank, which the weight reset before every sample
// does not clear.
func TestEpisodicContinuesMidDomain(t *testing.T) {
	base := testConfig(t, "")
	base.Methods, base.Corruptions = []string{"subtta-s", "tent"}, []string{"gaussian_noise", "contrast"}
	base.Protocol, base.BatchSize, base.Limit = "episodic", 0, 6
	// Second domain, third sample; with two diagnostic workers the method
	// has stepped on two more.
	for _, workers := range []int{-1, 2} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			interruptAndResume(t, base, workers, func(p Progress) bool { return p.Done == base.Limit+3 }, 3+max(workers, 0))
		})
	}
}

// interruptAndResume runs base uninterrupted (without diagnostic
// workers), then again into another folder with the given diagnostic
// workers, cancelled when stop first holds (checkpointing every batch),
// and resumes that run: it must continue after the checkpoint's continued
// batches and end with the uninterrupted run's records. It returns the
// uninterrupted run and its folder.
func interruptAndResume(t *testing.T, base Config, workers int, stop func(Progress) bool, continued int) (*Summary, string) {
	t.Helper()
	clean := base
	clean.Out = t.TempDir()
	ref, err := Run(context.Background(), clean, Options{DiagnosticWorkers: -1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	_, err = Run(ctx, cfg, Options{DiagnosticWorkers: workers, CheckpointEvery: 1, Progress: func(p Progress) {
		if stop(p) {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want an interruption", err)
	}
	var log strings.Builder
	sum, err := Run(context.Background(), cfg, Options{DiagnosticWorkers: workers, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("continuing after batch %d", continued); sum.Continued != continued || !strings.Contains(log.String(), want) {
		t.Errorf("%d batches continued, want %d; log:\n%s", sum.Continued, continued, log.String())
	}
	sameAsUninterrupted(t, sum, ref, cfg.Out, clean.Out)
	return ref, clean.Out
}

// TestEpisodicNeedsBatchOne: the episodic protocol refuses a batch size
// other than 1, naming both.
func TestEpisodicNeedsBatchOne(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Protocol, cfg.BatchSize = "episodic", 4
	_, err := Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "episodic") || !strings.Contains(err.Error(), "batch size 4") {
		t.Fatalf("err = %v, want a refusal naming the protocol and the batch size", err)
	}
}

// TestMultiViewContinuesMidDomain: DMN (64 views cut to 10, a memory that
// grows through the domain) and MEMO (AugMix views) interrupted in the
// second domain continue from the checkpoint with the records of an
// uninterrupted run; and the uninterrupted run gives the same records on
// one thread as on two (views are seeded per image, not per worker).
func TestMultiViewContinuesMidDomain(t *testing.T) {
	base := testConfig(t, "")
	base.Methods, base.Corruptions = []string{"dmn", "memo"}, []string{"gaussian_noise", "contrast"}
	base.BatchSize, base.Limit, base.Views = 0, 5, 10
	// DMN's second domain, third image.
	// With one diagnostic worker the method has stepped on one more.
	ref, refOut := interruptAndResume(t, base, 1, func(p Progress) bool { return p.Method == "dmn" && p.Done == base.Limit+2 }, 3)

	one := base
	one.Out = t.TempDir()
	prev := runtime.GOMAXPROCS(1)
	single, err := Run(context.Background(), one, Options{})
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	sameAsUninterrupted(t, single, ref, one.Out, refOut)
}
