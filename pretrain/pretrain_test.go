package pretrain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/dirlock"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// tinyConfig is a CLIP small enough for float64 gradient checks: 8×8
// images in 4×4 patches, towers of width 8 with 2 heads.
func tinyConfig() Config {
	cfg := DefaultConfig([]string{"cat", "dog", "ship"}, []string{"a {}.", "the {} here"})
	cfg.Model = weights.CLIPConfig{
		EmbedDim:      6,
		Vision:        weights.VisionConfig{Width: 8, Layers: 2, Heads: 2, MLPWidth: 12, PatchSize: 4, ImageSize: 8},
		Text:          weights.TextConfig{Width: 8, Layers: 1, Heads: 2, MLPWidth: 12, ContextLength: 16, VocabSize: textenc.ByteVocabSize},
		HasLogitScale: true,
		LayerNormEps:  weights.DefaultLayerNormEps,
		Activation:    weights.QuickGELU,
	}
	cfg.Epochs, cfg.BatchSize, cfg.WarmupSteps, cfg.Pad = 2, 4, 2, 2
	return cfg
}

// gradTol bounds |analytic − numeric| / max(1, |numeric|) in float64 with
// step 1e-5 (see autograd.GradcheckStep): about 1e-9 on a graph this size;
// a wrong index, sign or factor gives 1e-2 or more.
const gradTol = 1e-6

// TestLossGradients checks the gradient of the training loss with respect
// to every tensor of the model (both towers' linear weights and biases,
// LayerNorms, patch projection, class and positional embeddings, token
// embedding, projections and the logit scale) against central differences.
func TestLossGradients(t *testing.T) {
	cfg := tinyConfig()
	s, err := RandomState(&cfg.Model, 3)
	if err != nil {
		t.Fatal(err)
	}
	// The text embeddings start at std 0.01–0.02, where ln_1's curvature
	// makes the central difference's truncation error (∝ (step/std)²)
	// reach 2e-5 (it falls 100× with a 10× smaller step). Larger values
	// keep the check at the house step and tolerance.
	for _, name := range []string{"token_embedding.weight", "positional_embedding"} {
		p, _ := s.Param(name)
		for i := range p.Data {
			p.Data[i] *= 20
		}
	}
	m, err := clip.New(s, &cfg.Model, clip.Options{Float64: true})
	if err != nil {
		t.Fatal(err)
	}
	scale := smat.NewDense[float64](smat.WithShape(1, 1), smat.WithBacking([]float64{initialLogitScale}))
	params, err := Params(m, scale)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(params), len(cfg.Model.Names()); got != want {
		t.Fatalf("%d parameters, the configuration names %d", got, want)
	}
	var inputs []*smat.Dense[float64]
	for _, p := range params {
		p.Value.SetRequiresGrad(true)
		inputs = append(inputs, p.Value.(*smat.Dense[float64]))
	}
	r := rand.New(rand.NewPCG(5, 5))
	n, size := 3, cfg.Model.Vision.ImageSize
	px := make([]float64, n*3*size*size)
	for i := range px {
		px[i] = r.NormFloat64()
	}
	images := smat.NewDense[float64](smat.WithShape(n, 3*size*size), smat.WithBacking(px))
	var tok textenc.ByteTokenizer
	caps, err := tok.TokenizeBatch([]string{"a cat.", "the dog here", "a ship."}, cfg.Model.Text.ContextLength, false)
	if err != nil {
		t.Fatal(err)
	}
	labels := []int{2, 0, 1}
	res, err := autograd.Gradcheck(func() smat.Tensor {
		loss, _, err := Loss(m, scale, images, caps, labels, 0.1)
		if err != nil {
			panic(err)
		}
		return loss
	}, inputs, 0)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for _, e := range res {
		p := params[e.Input]
		worst = max(worst, e.Err)
		if e.Err > gradTol || e.Index < 0 {
			t.Errorf("%s: element %d: analytic %.10g, numeric %.10g (err %.3g)", p.Name, e.Index, e.Analytic, e.Numeric, e.Err)
		}
		if e.Analytic == 0 && e.Numeric == 0 {
			t.Errorf("%s: no gradient reaches it", p.Name)
		}
	}
	t.Logf("worst gradient error %.3g over %d tensors", worst, len(res))
}

// TestResumeEqualsUninterrupted stops a run twice (once mid-epoch) and
// resumes it from its checkpoint; the weights, optimizer moments and log
// must equal those of a run never stopped.
func TestResumeEqualsUninterrupted(t *testing.T) {
	cfg := tinyConfig()
	cfg.Epochs = 3
	train := syntheticImages(13, cfg.Model.Vision.ImageSize, len(cfg.Classes), 9) // 3 steps per epoch
	test := syntheticImages(7, cfg.Model.Vision.ImageSize, len(cfg.Classes), 10)

	whole := t.TempDir()
	tw, err := Run(context.Background(), cfg, train, RunOptions{Dir: whole, Test: test})
	if err != nil {
		t.Fatal(err)
	}
	parts := t.TempDir()
	for _, stop := range []int{4, 2} { // stops at step 4 (mid-epoch 2), then 6
		if _, err := Run(context.Background(), cfg, train, RunOptions{Dir: parts, Test: test, StopAfter: stop}); err != nil {
			t.Fatal(err)
		}
	}
	tp, err := Run(context.Background(), cfg, train, RunOptions{Dir: parts, Test: test})
	if err != nil {
		t.Fatal(err)
	}
	if tw.Step != 9 || tp.Step != 9 {
		t.Fatalf("steps: %d uninterrupted, %d resumed; want 9", tw.Step, tp.Step)
	}
	for i, p := range tw.Params {
		if !reflect.DeepEqual(p.Value.Data().F32(), tp.Params[i].Value.Data().F32()) {
			t.Errorf("%s differs after resuming", p.Name)
		}
	}
	if !reflect.DeepEqual(tw.opt.State(), tp.opt.State()) || !reflect.DeepEqual(tw.optPlain.State(), tp.optPlain.State()) {
		t.Error("optimizer state differs after resuming")
	}
	lw, err := ReadLog(filepath.Join(whole, LogFile))
	if err != nil {
		t.Fatal(err)
	}
	lp, err := ReadLog(filepath.Join(parts, LogFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(lw) != 3 || len(lp) != 3 {
		t.Fatalf("log lines: %d and %d, want 3", len(lw), len(lp))
	}
	for i := range lw {
		lw[i].Seconds, lp[i].Seconds = 0, 0
		if lw[i] != lp[i] {
			t.Errorf("epoch %d: uninterrupted %+v, resumed %+v", i+1, lw[i], lp[i])
		}
	}
	// The exported model loads as a CLIP checkpoint with its configuration.
	m, err := clip.Load(filepath.Join(parts, ModelFile), clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*m.Config, cfg.Model) {
		t.Errorf("exported config %+v, want %+v", *m.Config, cfg.Model)
	}
	if got, want := m.LogitScale, tp.LogitScale(); math.Abs(got-want) > 1e-5*want {
		t.Errorf("exported logit scale %v, trainer's %v", got, want)
	}
}

// TestInterruptedTestResumes interrupts runs during an epoch's test pass
// (the context ends once the epoch's last step is taken) and resumes
// them: the interruption is a *TestInterruptedError, the epoch is not
// logged without its test accuracy, and the resumed run's log equals the
// uninterrupted run's, every epoch with its test accuracy.
func TestInterruptedTestResumes(t *testing.T) {
	cfg := tinyConfig()
	cfg.Epochs = 3
	train := syntheticImages(13, cfg.Model.Vision.ImageSize, len(cfg.Classes), 9) // 3 steps per epoch
	test := syntheticImages(7, cfg.Model.Vision.ImageSize, len(cfg.Classes), 10)
	whole := t.TempDir()
	if _, err := Run(context.Background(), cfg, train, RunOptions{Dir: whole, Test: test}); err != nil {
		t.Fatal(err)
	}
	want, err := ReadLog(filepath.Join(whole, LogFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stopAt int  // the step whose epoch's test pass is interrupted
		again  bool // the resumed test pass is interrupted too (the context ended before Run)
	}{
		{"first epoch", 3, false},
		{"last epoch", 9, false},
		{"twice", 6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			var logged []int
			opt := RunOptions{Dir: dir, Test: test, Epoch: func(r EpochRecord) { logged = append(logged, r.Epoch) },
				Progress: func(p Progress) {
					if p.Step == tc.stopAt {
						cancel()
					}
				}}
			_, err := Run(ctx, cfg, train, opt)
			var ti *TestInterruptedError
			if !errors.As(err, &ti) || ti.Epoch != tc.stopAt/3 || !errors.Is(err, context.Canceled) {
				t.Errorf("interrupted in epoch %d's test: error %v, want a TestInterruptedError of that epoch", tc.stopAt/3, err)
			}
			if recs, _ := ReadLog(filepath.Join(dir, LogFile)); len(recs) != tc.stopAt/3-1 {
				t.Errorf("%d epochs logged after the interruption, want %d (the untested epoch is not)", len(recs), tc.stopAt/3-1)
			}
			if tc.again {
				if _, err := Run(ctx, cfg, train, opt); !errors.As(err, &ti) || ti.Epoch != tc.stopAt/3 {
					t.Fatalf("resumed with the context ended: %v, want epoch %d's test interrupted again", err, tc.stopAt/3)
				}
			}
			opt.Progress = nil
			if _, err := Run(context.Background(), cfg, train, opt); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(logged, []int{1, 2, 3}) {
				t.Errorf("epochs reported %v, want each once: 1, 2, 3", logged)
			}
			got, err := ReadLog(filepath.Join(dir, LogFile))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d epochs logged, want %d", len(got), len(want))
			}
			for i := range want {
				w, g := want[i], got[i]
				w.Seconds, g.Seconds = 0, 0
				if g != w || g.TestImages != test.Len() {
					t.Errorf("epoch %d: resumed %+v, uninterrupted %+v", i+1, g, w)
				}
			}
		})
	}
}

// TestRunLeavesNothingOnRefusal: a run refused before it trains (a
// training set smaller than one batch, images of another size) makes no
// run folder, and one refused in a folder it made leaves nothing there.
func TestRunLeavesNothingOnRefusal(t *testing.T) {
	cfg := tinyConfig()
	size, k := cfg.Model.Vision.ImageSize, len(cfg.Classes)
	for _, tc := range []struct {
		name  string
		train *Images
		want  string
	}{
		{"fewer images than a batch", syntheticImages(cfg.BatchSize-1, size, k, 1), "3 images make no batch of 4"},
		{"other image size", syntheticImages(8, size*2, k, 1), "images are 16×16, the model takes 8×8"},
	} {
		dir := filepath.Join(t.TempDir(), "run")
		_, err := Run(context.Background(), cfg, tc.train, RunOptions{Dir: dir})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the run folder is left behind (%v)", tc.name, err)
		}
	}
}

// TestResumeRefusesOtherSettings resumes a run folder with other
// settings: refused, naming each setting that differs with both values,
// and nothing else of the configuration.
func TestResumeRefusesOtherSettings(t *testing.T) {
	cfg := tinyConfig()
	train := syntheticImages(8, cfg.Model.Vision.ImageSize, len(cfg.Classes), 1)
	dir := t.TempDir()
	if _, err := Run(context.Background(), cfg, train, RunOptions{Dir: dir, StopAfter: 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []SettingDiff
	}{
		{"learning rate", func(c *Config) { c.LR *= 2 }, []SettingDiff{{"lr", "0.001", "0.002"}}},
		{"heads and epochs", func(c *Config) { c.Model.Vision.Heads, c.Model.Text.Heads, c.Epochs = 4, 4, 5 },
			[]SettingDiff{{"epochs", "2", "5"}, {"model.text.heads", "2", "4"}, {"model.vision.heads", "2", "4"}}},
		{"classes", func(c *Config) { c.Classes = []string{"cat", "dog", "car"} },
			[]SettingDiff{{"classes", `["cat","dog","ship"]`, `["cat","dog","car"]`}}},
	} {
		other := tinyConfig()
		tc.change(&other)
		_, err := Run(context.Background(), other, train, RunOptions{Dir: dir})
		var se *SettingsError
		if !errors.As(err, &se) || !errors.Is(err, errConfigDiffers) {
			t.Errorf("%s: error %v, want a SettingsError", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(se.Diffs, tc.want) {
			t.Errorf("%s: differences %q, want %q", tc.name, se.Diffs, tc.want)
		}
		if msg := err.Error(); strings.Contains(msg, "model=") || strings.Contains(msg, "{") {
			t.Errorf("%s: the error holds more than the differing settings: %s", tc.name, msg)
		}
		// CheckSettings says the same from the checkpoint's header.
		if cerr := CheckSettings(dir, other); !errors.As(cerr, &se) || !reflect.DeepEqual(se.Diffs, tc.want) {
			t.Errorf("%s: CheckSettings: %v, want the differences %q", tc.name, cerr, tc.want)
		}
	}
	if err := CheckSettings(dir, cfg); err != nil {
		t.Errorf("CheckSettings with the same settings: %v", err)
	}
	if err := CheckSettings(t.TempDir(), cfg); err != nil {
		t.Errorf("CheckSettings of a folder without a checkpoint: %v", err)
	}
}

// TestIsCheckpoint: a run's checkpoint is told from its model, and from
// files that are no safetensors or absent.
func TestIsCheckpoint(t *testing.T) {
	cfg := tinyConfig()
	train := syntheticImages(8, cfg.Model.Vision.ImageSize, len(cfg.Classes), 1)
	dir := t.TempDir()
	if _, err := Run(context.Background(), cfg, train, RunOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.safetensors")
	if err := os.WriteFile(junk, []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{{CheckpointFile, true}, {ModelFile, false}, {LogFile, false}, {"junk.safetensors", false}, {"absent.safetensors", false}} {
		if got := IsCheckpoint(filepath.Join(dir, tc.name)); got != tc.want {
			t.Errorf("IsCheckpoint(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestResumeRefusesOtherData resumes a run folder on other images: of
// another number, or as many but others, or the same in another order.
// The same images read again (another Images, another source) resume.
func TestResumeRefusesOtherData(t *testing.T) {
	cfg := tinyConfig()
	size, k := cfg.Model.Vision.ImageSize, len(cfg.Classes)
	train := syntheticImages(8, size, k, 1)
	train.Source = "first/set"
	dir := t.TempDir()
	if _, err := Run(context.Background(), cfg, train, RunOptions{Dir: dir, StopAfter: 1}); err != nil {
		t.Fatal(err)
	}
	reordered := syntheticImages(8, size, k, 1)
	n := 3 * size * size
	reordered.Pix = append(slices.Clone(train.Pix[n:]), train.Pix[:n]...)
	reordered.Labels = append(slices.Clone(train.Labels[1:]), train.Labels[0])
	for _, tc := range []struct {
		name  string
		other *Images
	}{
		{"fewer images", syntheticImages(4, size, k, 1)},
		{"other images", syntheticImages(8, size, k, 2)},
		{"other labels", func() *Images { s := syntheticImages(8, size, k, 1); s.Labels[0] = (s.Labels[0] + 1) % k; return s }()},
		{"another order", reordered},
	} {
		tc.other.Source = "second/set"
		_, err := Run(context.Background(), cfg, tc.other, RunOptions{Dir: dir})
		if !errors.Is(err, errDataDiffers) {
			t.Errorf("%s: error %v, want %v", tc.name, err, errDataDiffers)
			continue
		}
		for _, want := range []string{"8 images", "from first/set", fmt.Sprintf("%d images", tc.other.Len()), "from second/set"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", tc.name, err, want)
			}
		}
	}
	same := syntheticImages(8, size, k, 1)
	same.Source = "a/copy"
	tr, err := Run(context.Background(), cfg, same, RunOptions{Dir: dir, StopAfter: 1, Warn: func(m string) { t.Errorf("warning %q", m) }})
	if err != nil || tr.Step != 2 {
		t.Fatalf("resuming on the same images: error %v, want step 2", err)
	}
}

// TestResumeLegacyCheckpoint resumes a checkpoint that records no
// training set (as earlier builds wrote them): with a warning, and the
// next checkpoint records the set.
func TestResumeLegacyCheckpoint(t *testing.T) {
	cfg := tinyConfig()
	train := syntheticImages(8, cfg.Model.Vision.ImageSize, len(cfg.Classes), 1)
	dir := t.TempDir()
	if _, err := Run(context.Background(), cfg, train, RunOptions{Dir: dir, StopAfter: 1}); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, CheckpointFile)
	stripDataRecord(t, ck)
	var warned []string
	tr, err := Run(context.Background(), cfg, train, RunOptions{Dir: dir, StopAfter: 1, Warn: func(m string) { warned = append(warned, m) }})
	if err != nil || tr.Step != 2 {
		t.Fatalf("resuming a checkpoint without a data record: error %v, want step 2", err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "records no training set") || !strings.Contains(warned[0], "8 images") {
		t.Errorf("warnings %q", warned)
	}
	raw, err := weights.Load(ck)
	if err != nil {
		t.Fatal(err)
	}
	var id DataIdentity
	if err := json.Unmarshal([]byte(raw.Metadata[dataMetadata]), &id); err != nil || !id.Same(train.Identity()) {
		t.Errorf("the next checkpoint records %q (%v), want %v", raw.Metadata[dataMetadata], err, train.Identity())
	}
}

// stripDataRecord rewrites the checkpoint at path without its record of
// the training set.
func stripDataRecord(t *testing.T, path string) {
	t.Helper()
	raw, err := weights.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.Metadata[dataMetadata]; !ok {
		t.Fatalf("%s records no training set", path)
	}
	meta := maps.Clone(raw.Metadata)
	delete(meta, dataMetadata)
	var ts []weights.Tensor
	for _, name := range raw.Names() {
		p, err := raw.Param(name)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, weights.Tensor{Name: name, DType: weights.F32, Shape: p.Shape, Data: p.Data})
	}
	if err := weights.WriteFile(path, ts, meta); err != nil {
		t.Fatal(err)
	}
}

// TestInterruptSavesCheckpoint cancels a run; it must leave a checkpoint
// at the step it reached.
func TestInterruptSavesCheckpoint(t *testing.T) {
	cfg := tinyConfig()
	train := syntheticImages(8, cfg.Model.Vision.ImageSize, len(cfg.Classes), 1)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	steps := 0
	tr, err := Run(ctx, cfg, train, RunOptions{Dir: dir, Progress: func(Progress) {
		if steps++; steps == 3 {
			cancel()
		}
	}})
	if err == nil || tr == nil || tr.Step != 3 {
		t.Fatalf("cancelled run: step %v, error %v; want step 3 and an error", tr, err)
	}
	back, err := Open(dir, cfg, train)
	if err != nil {
		t.Fatal(err)
	}
	if back.Step != 3 {
		t.Errorf("checkpoint at step %d, want 3", back.Step)
	}
}

func TestAugment(t *testing.T) {
	const size = 4
	src := data.NewRGB(size, size)
	for i := range src.Pix {
		src.Pix[i] = uint8(i/3 + 1) // pixel index + 1, never 0
	}
	dst := data.NewRGB(size, size)
	r := rand.New(rand.NewPCG(1, 1))
	for range 50 {
		Augment(dst, src, 1, true, r)
		// Every output pixel is a source pixel of the same row offset or
		// padding, and the picture is a shift of the source, possibly
		// mirrored: consecutive non-padding pixels of a row step by ±1.
		for y := range size {
			prev := -1
			for x := range size {
				v := int(dst.Pix[3*(y*size+x)])
				if v == 0 {
					continue
				}
				if prev >= 0 && v-prev != 1 && prev-v != 1 {
					t.Fatalf("row %d: pixels %d then %d are not neighbours", y, prev, v)
				}
				prev = v
			}
		}
	}
	Augment(dst, src, 0, false, r)
	if !reflect.DeepEqual(dst.Pix, src.Pix) {
		t.Error("no padding and no flip changed the image")
	}
}

func TestLearningRate(t *testing.T) {
	cfg := Config{LR: 1e-3, MinLR: 1e-5, WarmupSteps: 10}
	for _, c := range []struct {
		step int
		want float64
	}{{0, 1e-4}, {9, 1e-3}, {10, 1e-3}, {55, 1e-5 + (1e-3-1e-5)/2}, {100, 1e-5}} {
		if got := cfg.LearningRate(c.step, 100); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("step %d: lr %v, want %v", c.step, got, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
	}{
		{"epochs", func(c *Config) { c.Epochs = 0 }},
		{"batch", func(c *Config) { c.BatchSize = -1 }},
		{"lr", func(c *Config) { c.LR = math.NaN() }},
		{"min lr", func(c *Config) { c.MinLR = 1 }},
		{"beta2", func(c *Config) { c.Beta2 = 1 }},
		{"smoothing", func(c *Config) { c.LabelSmoothing = 1 }},
		{"pad", func(c *Config) { c.Pad = c.Model.Vision.ImageSize }},
		{"classes", func(c *Config) { c.Classes = c.Classes[:1] }},
		{"templates", func(c *Config) { c.Templates = nil }},
		{"vocabulary", func(c *Config) { c.Model.Text.VocabSize = 49408 }},
	} {
		cfg := tinyConfig()
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	cfg := tinyConfig()
	if err := cfg.Validate(); err != nil {
		t.Errorf("the tiny configuration is refused: %v", err)
	}
}

// TestOneWriterPerFolder starts a second run in a folder a run is using.
func TestOneWriterPerFolder(t *testing.T) {
	cfg := tinyConfig()
	train := syntheticImages(8, cfg.Model.Vision.ImageSize, len(cfg.Classes), 1)
	dir := t.TempDir()
	var second error
	_, err := Run(context.Background(), cfg, train, RunOptions{Dir: dir, StopAfter: 1, Progress: func(Progress) {
		_, second = Run(context.Background(), cfg, train, RunOptions{Dir: dir})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(second, dirlock.ErrLocked) {
		t.Fatalf("a second run in the same folder: %v; want it refused", second)
	}
	t.Log(second)
}

// TestParamsDecay: Params gives every tensor of the model once, as the
// model's own matrix, and weight decay applies to exactly the linear
// layers' weights (the patch projection included) and the two projections,
// found here by the model's structure rather than by name.
func TestParamsDecay(t *testing.T) {
	cfg := tinyConfig()
	s, err := RandomState(&cfg.Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := clip.New(s, &cfg.Model, clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	decays := map[smat.Matrix]bool{m.Vision.Patch.Weight: true, m.Vision.Proj: true, m.Text.Proj: true}
	for _, bs := range [][]*autograd.BlockParams{m.Vision.Blocks, m.Text.Blocks} {
		for _, b := range bs {
			for _, l := range []*autograd.LinearParams{b.QKV, b.Out, b.FC, b.Proj} {
				decays[l.Weight] = true
			}
		}
	}
	params, err := Params(m, smat.NewDense[float32](smat.WithShape(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	seen, decayed := map[smat.Matrix]bool{}, 0
	for _, p := range params {
		if seen[p.Value] {
			t.Errorf("%s: a matrix listed twice", p.Name)
		}
		seen[p.Value] = true
		if p.Decay != decays[p.Value] {
			t.Errorf("%s: decay %v, the model's structure says %v", p.Name, p.Decay, decays[p.Value])
		}
		if p.Decay {
			decayed++
		}
	}
	if decayed != len(decays) || len(params) != len(cfg.Model.Names()) {
		t.Errorf("%d of %d parameters decay; want %d of %d", decayed, len(params), len(decays), len(cfg.Model.Names()))
	}
}
