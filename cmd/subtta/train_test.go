package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/pretrain"
)

// tinyTrainArgs are the flags of a very small run on data into out (one
// epoch of two steps), for the tests of train's refusals and resumption.
func tinyTrainArgs(data, out string, more ...string) []string {
	return append([]string{"train", "--data", data, "--epochs", "1", "--width", "32", "--vision-layers", "1",
		"--text-layers", "1", "--heads", "2", "--batch-size", "1000", "--out", out, "--quiet"}, more...)
}

// TestTrainRefusedBeforeReading: an --out that is a file or lies under
// one, a --batch-size larger than the training set and an --export that
// is another run's checkpoint are usage errors said before the data is
// decoded, leaving nothing behind; the other run's checkpoint is kept
// as it was and an earlier model may be replaced.
func TestTrainRefusedBeforeReading(t *testing.T) {
	dir := t.TempDir()
	images := builtinImages(t)
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if st, _, stderr := runCLI(tinyTrainArgs(images, other, "--export", filepath.Join(dir, "earlier.safetensors"))...); st != 0 {
		t.Fatalf("train: status %d: %s", st, stderr)
	}
	ck := filepath.Join(other, pretrain.CheckpointFile)
	before, err := os.ReadFile(ck)
	if err != nil {
		t.Fatal(err)
	}
	run0 := filepath.Join(dir, "run")
	for _, tc := range []struct {
		name   string
		out    string
		more   []string
		stderr string
	}{
		{"--out a file", file, nil, "--out " + file + " is a file: give a folder"},
		{"--out under a file", filepath.Join(file, "sub"), nil, "--out " + filepath.Join(file, "sub") + ": " + file + " is a file, not a folder"},
		{"--batch-size over the images", run0, []string{"--batch-size", "5000"}, "--batch-size 5000: the training set " + images + " holds 2000 images, fewer than one batch"},
		{"--export another run's checkpoint", run0, []string{"--export", ck}, "--export " + ck + " is a training run's checkpoint"},
	} {
		args := tinyTrainArgs(images, tc.out, tc.more...)
		args = slicesDelete(args, "--quiet") // the decoding's progress shows
		st, _, stderr := runCLI(args...)
		if st != 2 || !strings.Contains(stderr, tc.stderr) || strings.Contains(stderr, "decoding") {
			t.Errorf("%s: status %d, stderr %q; want 2 and %q before any decoding", tc.name, st, stderr, tc.stderr)
		}
		if _, err := os.Stat(run0); err == nil {
			t.Errorf("%s: the run folder %s is left behind", tc.name, run0)
			os.RemoveAll(run0)
		}
	}
	if after, err := os.ReadFile(ck); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the other run's checkpoint changed (%v)", err)
	}
	// An earlier model, the other run's own, is replaced.
	model := filepath.Join(other, pretrain.ModelFile)
	if st, _, stderr := runCLI(tinyTrainArgs(images, run0, "--export", model)...); st != 0 || !strings.Contains(stderr, "model written to "+model) {
		t.Errorf("--export over a model: status %d, stderr %q", st, stderr)
	}
}

// slicesDelete returns args without the argument drop.
func slicesDelete(args []string, drop string) []string {
	var out []string
	for _, a := range args {
		if a != drop {
			out = append(out, a)
		}
	}
	return out
}

// TestTrainExportCheckedAsConvert: train's --export and convert's DST
// refuse the same files with the same status and reason (one check,
// checkModelFile), before any work.
func TestTrainExportCheckedAsConvert(t *testing.T) {
	dir := t.TempDir()
	images := builtinImages(t)
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{dir, filepath.Join(dir, "nodir", "m.safetensors"), filepath.Join(file, "m.safetensors")} {
		ts, _, terr := runCLI(tinyTrainArgs(images, filepath.Join(dir, "run"), "--export", dst)...)
		cs, _, cerr := runCLI("convert", images, dst)
		_, treason, _ := strings.Cut(terr, "--export "+dst)
		_, creason, _ := strings.Cut(cerr, "DST "+dst)
		if ts == 0 || ts != cs || treason == "" || treason != creason {
			t.Errorf("%s: train status %d, %q; convert status %d, %q; want the same refusal", dst, ts, terr, cs, cerr)
		}
	}
}

// TestTrainPlotFinishedRun: --plot on a run already finished draws
// accuracy.png from its log (no epoch runs to draw it).
func TestTrainPlotFinishedRun(t *testing.T) {
	dir := t.TempDir()
	images, out := builtinImages(t), filepath.Join(dir, "run")
	if st, _, stderr := runCLI(tinyTrainArgs(images, out)...); st != 0 {
		t.Fatalf("train: status %d: %s", st, stderr)
	}
	png := filepath.Join(out, "accuracy.png")
	if _, err := os.Stat(png); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("accuracy.png without --plot: %v", err)
	}
	if st, _, stderr := runCLI(tinyTrainArgs(images, out, "--plot")...); st != 0 {
		t.Fatalf("train --plot on the finished run: status %d: %s", st, stderr)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("train --plot on the finished run: no accuracy.png (%v)", err)
	}
}

// TestTrainOtherSettingsNamed: a run folder resumed with other settings
// is refused before the data is decoded, naming each differing flag with
// both values, not the whole configuration.
func TestTrainOtherSettingsNamed(t *testing.T) {
	dir := t.TempDir()
	images, out := builtinImages(t), filepath.Join(dir, "run")
	if st, _, stderr := runCLI(tinyTrainArgs(images, out, "--epochs", "2")...); st != 0 {
		t.Fatalf("train: status %d: %s", st, stderr)
	}
	args := slicesDelete(tinyTrainArgs(images, out, "--heads", "4", "--lr", "0.002", "--width", "64", "--epochs", "2"), "--quiet")
	st, _, stderr := runCLI(args...)
	want := "--out " + out + " holds a run begun with other settings (" + filepath.Join(out, pretrain.CheckpointFile) + "): --lr 0.002, was 0.001; --width 64, was 32; --heads 4, was 2; give the same settings"
	if st != 1 || !strings.Contains(stderr, want) || strings.Contains(stderr, "{") || strings.Contains(stderr, "decoding") {
		t.Errorf("other settings: status %d, stderr %q; want 1 and %q, before any decoding", st, stderr, want)
	}
}

// TestTrainFolderReadAsArchive: the built-in archive extracted (a folder
// holding test/<class>/) trains as the archive does: the same images, so
// that a run begun on one resumes on the other.
func TestTrainFolderReadAsArchive(t *testing.T) {
	dir := t.TempDir()
	archive := extractBuiltin(t, dir)
	out := filepath.Join(t.TempDir(), "run")
	if st, _, stderr := runCLI(tinyTrainArgs(dir, out, "--epochs", "2")...); st != 0 {
		t.Fatalf("train --data %s (the archive extracted): status %d: %s", dir, st, stderr)
	}
	if st, _, stderr := runCLI(tinyTrainArgs(archive, out, "--epochs", "2")...); st != 0 {
		t.Fatalf("the same run on the archive: status %d: %s", st, stderr)
	}
}

// manyImages writes a .tar of the built-in images copied times times,
// test/<class>/<copy>-<file>: a training set that takes a while to
// decode.
func manyImages(t *testing.T, times int) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "builtin.tar.gz")
	if err := os.WriteFile(src, builtin.CIFARSubset(), 0o644); err != nil {
		t.Fatal(err)
	}
	names, blobs := archiveFiles(t, src)
	p := filepath.Join(t.TempDir(), "many.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for k := range times {
		for i, src := range names {
			name := filepath.ToSlash(filepath.Join(filepath.Dir(src), fmt.Sprintf("%d-%s", k, filepath.Base(src))))
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(blobs[i]))})
			tw.Write(blobs[i])
		}
	}
	if err := errors.Join(tw.Close(), f.Close()); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTrainInterruptedDecoding: SIGINT or SIGTERM while the training set
// is decoded stops train with status 130, saying so, with nothing
// written.
func TestTrainInterruptedDecoding(t *testing.T) {
	images := manyImages(t, 15)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			var stdout, stderr syncBuffer
			stop := signalWhen(t, sig, 2*time.Millisecond, func() bool {
				return strings.Contains(stderr.String(), "decoding the training set")
			})
			st := run(slicesDelete(tinyTrainArgs(images, out), "--quiet"), &stdout, &stderr)
			stop()
			if want := "interrupted while decoding the training set " + images + "; nothing was written"; st != 130 || !strings.Contains(stderr.String(), want) {
				t.Errorf("status %d, stderr %q; want 130 and %q", st, stderr.String(), want)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the run folder is made (%v)", err)
			}
		})
	}
}

// TestInterruptedOnly: an interruption whose checkpoint could not be
// written is not said as a plain interruption (whose message says the
// checkpoint is there).
func TestInterruptedOnly(t *testing.T) {
	saveErr := errors.New("disk full")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.Canceled, true},
		{&pretrain.TestInterruptedError{Epoch: 1, Err: context.Canceled}, true},
		{errors.Join(context.Canceled, saveErr), false},
		{errors.Join(&pretrain.TestInterruptedError{Epoch: 1, Err: context.Canceled}, saveErr), false},
	} {
		if got := interruptedOnly(tc.err); got != tc.want {
			t.Errorf("interruptedOnly(%q) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
