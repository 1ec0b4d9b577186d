package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/textenc"
)

// trainTiny trains a very small CLIP for one epoch on the built-in images
// and exports it, as the README's recipe does in small.
func trainTiny(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.safetensors")
	var out, errb bytes.Buffer
	args := []string{"train", "--data", builtinImages(t), "--epochs", "1", "--width", "32", "--vision-layers", "1",
		"--text-layers", "1", "--heads", "2", "--batch-size", "200", "--out", filepath.Join(dir, "run"), "--export", model, "--quiet"}
	if st := run(args, &out, &errb); st != 0 {
		t.Fatalf("train: status %d: %s", st, errb.String())
	}
	return model
}

// builtinImages writes the built-in CIFAR-10 images (a .tar.gz of class
// folders) to a file and returns its path.
func builtinImages(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cifar10-test-2000.tar.gz")
	if err := os.WriteFile(p, builtin.CIFARSubset(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTrainRecordsLabels: the model train exports records its class
// names and templates; classify and serve use them when no --labels is
// given, and eval names the classes of data that names none with them.
func TestTrainRecordsLabels(t *testing.T) {
	model := trainTiny(t)
	m, err := clip.Load(model, clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Classes, data.CIFAR10Classes) || !slices.Equal(m.Templates, data.CIFAR10Templates) {
		t.Fatalf("the exported model records classes %q and templates %q", m.Classes, m.Templates)
	}

	// classify: the model's classes, in its order, and its templates.
	jpegs, err := builtin.JPEGs(1)
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "img.jpg")
	if err := os.WriteFile(img, jpegs[0], 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if st := run([]string{"classify", "--json", "--model", model, img}, &out, &errb); st != 0 {
		t.Fatalf("classify: status %d: %s", st, errb.String())
	}
	var res []struct {
		Probs []struct {
			Label string
			Prob  float64
		}
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 1 {
		t.Fatalf("classify printed %q: %v", out.String(), err)
	}
	head, err := m.ZeroShotHead(textenc.ByteTokenizer{}, m.Classes, m.Templates)
	if err != nil {
		t.Fatal(err)
	}
	b, err := clip.Create(clip.Spec{Model: model})
	if err != nil {
		t.Fatal(err)
	}
	px, err := preprocessImages(b.Preprocessor, []string{img})
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.EncodeImage(px, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := clip.Softmax(m.Classify(head, f))[0]
	if len(res[0].Probs) != len(want) {
		t.Fatalf("%d probabilities, want %d", len(res[0].Probs), len(want))
	}
	for i, p := range res[0].Probs {
		// classify prints the probabilities it computed with the same
		// calls: equal up to JSON's round trip of a float64 (exact).
		if p.Label != m.Classes[i] || math.Abs(p.Prob-want[i]) > 1e-12 {
			t.Errorf("class %d: %s %g, want %s %g", i, p.Label, p.Prob, m.Classes[i], want[i])
		}
	}

	// serve: the model's classes, even for a dataset whose preset would
	// otherwise want --labels.
	_, stop, log := startServe(t, "--model", model, "--dataset", "imagenet", "--batch-size", "1")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), ", 10 labels;") {
		t.Errorf("serve log: %s", log)
	}
	// A model that records no classes still needs --labels.
	_, _, plain, plainConfig := headsModel(t)
	errb.Reset()
	if st := run([]string{"serve", "--dataset", "imagenet", "--model", plain, "--model-config", plainConfig}, &out, &errb); st != 2 || !strings.Contains(errb.String(), "give --labels") {
		t.Errorf("serve of a model without classes: status %d, stderr %q", st, errb.String())
	}
	errb.Reset()
	if st := run([]string{"classify", "--model", plain, "--model-config", plainConfig, img}, &out, &errb); st != 2 || !strings.Contains(errb.String(), "give --labels") {
		t.Errorf("classify of a model without classes: status %d, stderr %q", st, errb.String())
	}
}

// TestTrainFlagErrors: flags that cannot work are refused before the
// training set is read or the run folder made, not after the training.
func TestTrainFlagErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run0 := filepath.Join(dir, "run")
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"--eval-limit", "5"}, 2, "--eval-limit 5 needs --test"},
		{[]string{"--export", dir}, 2, "--export " + dir + " is a folder: give a file name"},
		{[]string{"--export", filepath.Join(dir, "none", "m.safetensors")}, 1, "folder " + filepath.Join(dir, "none") + " does not exist"},
		{[]string{"--export", filepath.Join(file, "m.safetensors")}, 1, file + " is not a folder"},
		{[]string{"--export", filepath.Join(run0, "checkpoint.safetensors")}, 2, "is the run's checkpoint.safetensors"},
		{[]string{"--export", dir + "/./run/log.jsonl"}, 2, "is the run's log.jsonl"},
	} {
		args := append([]string{"train", "--data", builtinImages(t), "--epochs", "1", "--width", "32", "--vision-layers", "1",
			"--text-layers", "1", "--heads", "2", "--batch-size", "1000", "--out", run0, "--quiet"}, tc.args...)
		var out, errb bytes.Buffer
		if st := run(args, &out, &errb); st != tc.status || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("train %q: status %d, stderr %q; want %d and %q", tc.args, st, errb.String(), tc.status, tc.stderr)
		}
		if _, err := os.Stat(run0); err == nil {
			t.Errorf("train %q made the run folder before failing", tc.args)
			os.RemoveAll(run0)
		}
	}
}

// TestTrainResumeOtherData: a run folder resumes on the same images read
// from another form (the archive extracted), and refuses other images,
// naming both sets.
func TestTrainResumeOtherData(t *testing.T) {
	dir := t.TempDir()
	archive := extractBuiltin(t, dir)
	folder := filepath.Join(dir, "test")
	train := func(data string) (int, string) {
		var out, errb bytes.Buffer
		st := run([]string{"train", "--data", data, "--epochs", "1", "--width", "32", "--vision-layers", "1", "--text-layers", "1",
			"--heads", "2", "--batch-size", "1000", "--out", filepath.Join(dir, "run"), "--quiet"}, &out, &errb)
		return st, errb.String()
	}
	if st, stderr := train(archive); st != 0 {
		t.Fatalf("train: status %d: %s", st, stderr)
	}
	if st, stderr := train(folder); st != 0 {
		t.Fatalf("the same images as a folder: status %d: %s", st, stderr)
	}
	cats, err := filepath.Glob(filepath.Join(folder, "cat", "*"))
	if err != nil || len(cats) == 0 {
		t.Fatalf("no cat in %s: %v", folder, err)
	}
	if err := os.Remove(cats[0]); err != nil {
		t.Fatal(err)
	}
	st, stderr := train(folder)
	for _, want := range []string{"made on other training data", "2000 images", "from " + archive, "1999 images", "from " + folder} {
		if st != 1 || !strings.Contains(stderr, want) {
			t.Errorf("one image fewer: status %d, stderr %q; want 1 and %q", st, stderr, want)
		}
	}
}
