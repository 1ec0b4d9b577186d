package eval

import (
	"context"
	"errors"
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
	clean := base
	clean.Out = t.TempDir()
	ref, err := Run(context.Background(), clean, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	_, err = Run(ctx, cfg, Options{CheckpointEvery: 1, Progress: func(p Progress) {
		if p.Done == cfg.Limit+3 { // second domain, third sample
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want an interruption", err)
	}
	var log strings.Builder
	sum, err := Run(context.Background(), cfg, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Continued != 3 || !strings.Contains(log.String(), "continuing after batch 3") {
		t.Errorf("%d batches continued, log:\n%s", sum.Continued, log.String())
	}
	sameAsUninterrupted(t, sum, ref, cfg.Out, clean.Out)
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
	clean := base
	clean.Out = t.TempDir()
	ref, err := Run(context.Background(), clean, Options{})
	if err != nil {
		t.Fatal(err)
	}
	one := base
	one.Out = t.TempDir()
	prev := runtime.GOMAXPROCS(1)
	single, err := Run(context.Background(), one, Options{})
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	sameAsUninterrupted(t, single, ref, one.Out, clean.Out)

	cfg := base
	cfg.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	_, err = Run(ctx, cfg, Options{CheckpointEvery: 1, Progress: func(p Progress) {
		if p.Method == "dmn" && p.Done == cfg.Limit+2 { // second domain, third image
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want an interruption", err)
	}
	var log strings.Builder
	sum, err := Run(context.Background(), cfg, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Continued != 2 || !strings.Contains(log.String(), "continuing after batch 2") {
		t.Errorf("%d batches continued, log:\n%s", sum.Continued, log.String())
	}
	sameAsUninterrupted(t, sum, ref, cfg.Out, clean.Out)
}
