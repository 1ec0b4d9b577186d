package tta

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestPresetTable checks the transcription of spec §1.5 and §2.
func TestPresetTable(t *testing.T) {
	tests := []struct {
		dataset, method string
		batch           int
		opt             string
		rank            int
		alpha           float64
	}{
		{"imagenet-c", "subtta-m", 64, "AdamW(lr=0.0005, wd=0.01)", 256, 0.5},
		{"cifar10-c", "subtta-b", 200, "AdamW(lr=0.001, wd=0.01)", 256, 0.1},
		{"cifar100-c", "subtta-t", 200, "Adam(lr=0.0005, wd=0.01)", 64, 0.5},
		{"imagenet-c", "tent", 64, "SGD(lr=0.00025, momentum=0.9, nesterov=true, wd=0)", 0, 0},
		{"cifar10-c", "tent", 200, "Adam(lr=0.001, wd=0)", 0, 0},
		{"cifar100-c", "batclip", 200, "Adam(lr=0.0005, wd=0.01)", 0, 0},
		{"imagenet-c", "mint", 64, "Adam(lr=0.01, wd=0.01)", 0, 0},
		{"cifar100-c", "mint-official", 20, "Adam(lr=0.007, wd=0)", 0, 0},
		{"imagenet-c", "watt-s", 128, "Adam(lr=0.001, wd=0)", 0, 0},
		{"cifar10-c", "watt-lite", 128, "Adam(lr=0.001, wd=0)", 0, 0},
		{"cifar100-c", "tda", 1, "Adam(lr=0, wd=0)", 0, 0},
	}
	for _, tc := range tests {
		p, err := Lookup(tc.dataset, tc.method)
		if err != nil {
			t.Fatal(err)
		}
		if p.BatchSize != tc.batch || p.Optimizer.String() != tc.opt || subttaConfig(p).Subspace.Rank != tc.rank || subttaConfig(p).Alpha != tc.alpha {
			t.Errorf("%s/%s: batch %d, %s, R %d, α %v", tc.dataset, tc.method, p.BatchSize, p.Optimizer, subttaConfig(p).Subspace.Rank, subttaConfig(p).Alpha)
		}
	}
	for _, d := range PresetDatasets {
		for _, tc := range []struct {
			method       string
			steps, round int
		}{{"watt-s", 2, 5}, {"watt-lite", 1, 2}} {
			p, err := Lookup(d, tc.method)
			if err != nil {
				t.Fatal(err)
			}
			w := p.Config.(WATTConfig)
			if w.Steps != tc.steps || w.Rounds != tc.round || w.Optimizer != (optim.Config{}) || w.Name != tc.method ||
				!p.PerTemplateHeads || len(p.Templates) != 8 || p.Templates[0] != "a photo of a {}" {
				t.Errorf("%s/%s: %+v, templates %q", d, tc.method, w, p.Templates)
			}
		}
		// VTE's head is CLIP's prompt ensemble of the dataset (spec §1).
		want := CIFARTemplates
		if d == "imagenet-c" {
			want = ImageNetTemplates
		}
		p, err := Lookup(d, "vte")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Templates, want) {
			t.Errorf("%s/vte: %d templates, want %d", d, len(p.Templates), len(want))
		}
		p, err = Lookup(d, "tda")
		if err != nil {
			t.Fatal(err)
		}
		c := p.Config.(feature.TDAConfig)
		if c.Positive != (feature.TDACacheConfig{Shots: 3, Alpha: 2, Beta: 5}) || c.Negative != (feature.TDACacheConfig{Shots: 2, Alpha: 0.117, Beta: 1}) ||
			c.EntropyLower != 0.2 || c.EntropyUpper != 0.5 || c.MaskLower != 0.03 || c.MaskUpper != 1 || c.Scale != 100 || c.PredictBeforeUpdate {
			t.Errorf("%s/tda: %+v", d, c)
		}
	}
	for _, bad := range []struct {
		dataset, method string
		want            error
	}{{"cifar10-c", "mint-official", ErrUnknownDataset}, {"mnist-c", "tent", ErrUnknownDataset}, {"cifar10-c", "cotta", ErrUnknownMethod}} {
		if _, err := Lookup(bad.dataset, bad.method); !errors.Is(err, bad.want) {
			t.Errorf("Lookup(%q, %q): err = %v, want %v", bad.dataset, bad.method, err, bad.want)
		}
	}
}

// TestPresetsRun builds every preset on clip-tiny and runs one batch.
func TestPresetsRun(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	snap := m.Vision.Snapshot()
	rng := rand.New(rand.NewPCG(3, 4))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
	var templateHeads []mat.Matrix
	for range WATTTemplates {
		h, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
		templateHeads = append(templateHeads, h)
	}
	px := randPixels(rng, 4, m.Config.Vision.ImageSize)
	seen := map[string]bool{}
	for _, p := range Presets() {
		if err := m.Vision.Restore(snap); err != nil {
			t.Fatal(err)
		}
		// WATT's settings are the same on every dataset and WATT-S takes 80
		// steps a batch: run its full schedule once per method only.
		if seen[p.Method] && p.PerTemplateHeads {
			editConfig(&p, func(w *WATTConfig) { w.Steps, w.Rounds = 1, 1 })
		}
		seen[p.Method] = true
		var th []mat.Matrix
		if p.PerTemplateHeads {
			if _, err := p.New(m, Heads{Head: head}); err == nil {
				t.Errorf("%s/%s: New without template heads succeeded", p.Dataset, p.Method)
			}
			th = templateHeads
		}
		classes := []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"}
		heads := Heads{Head: head, PerTemplate: th, Classes: classes, Tokenizer: textenc.ByteTokenizer{}}
		meth, err := p.New(m, heads)
		if err != nil {
			t.Fatalf("%s/%s: %v", p.Dataset, p.Method, err)
		}
		if meth.Name() != p.Method && !strings.HasPrefix(p.Method, "mint") {
			t.Errorf("%s/%s: method named %q", p.Dataset, p.Method, meth.Name())
		}
		var res *Result
		if _, ok := meth.(MultiView); ok {
			// The fewest views the method works with, 4 images of them.
			if _, err := meth.Step(px, 4); !errors.Is(err, ErrNeedsViews) {
				t.Errorf("%s/%s: Step without views: err = %v", p.Dataset, p.Method, err)
			}
			if err := p.SetViews(p.MinViews); err != nil {
				t.Fatal(err)
			}
			if meth, err = p.New(m, heads); err != nil {
				t.Fatal(err)
			}
			res, err = meth.(MultiView).StepViews(randPixels(rng, 4*p.MinViews, m.Config.Vision.ImageSize), 4, p.MinViews)
		} else {
			res, err = meth.Step(px, 4)
		}
		if err != nil {
			t.Fatalf("%s/%s: %v", p.Dataset, p.Method, err)
		}
		if r, c := res.Logits.Dims(); r != 4 || c != 10 || len(res.Preds) != 4 || res.Diag.Skipped != 0 {
			t.Errorf("%s/%s: logits %d×%d, %d preds, %d skipped", p.Dataset, p.Method, r, c, len(res.Preds), res.Diag.Skipped)
		}
	}
}

// TestPresetHeads builds WATT's heads on clip-tiny with the byte tokenizer
// (any tokenizer works for the check): the ensemble head is the
// normalised mean of the per-template heads' unnormalised sum, as
// ZeroShotHead averages normalised prompt embeddings.
func TestPresetHeads(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	classes := []string{"cat", "aquarium_fish", "dog"}
	p, err := Lookup("cifar100-c", "watt-s")
	if err != nil {
		t.Fatal(err)
	}
	hs, err := p.Heads(m, textenc.ByteTokenizer{}, classes)
	head, th := hs.Head, hs.PerTemplate
	if err != nil {
		t.Fatal(err)
	}
	if len(th) != len(WATTTemplates) {
		t.Fatalf("%d template heads, want %d", len(th), len(WATTTemplates))
	}
	c, d := head.Dims()
	sum := mat.NewDense(c, d, nil)
	for _, h := range th {
		sum.Add(sum, h)
	}
	want, _ := feature.NormalizeRows(sum)
	// The heads are float32 (the model's type): 1e-6 relative.
	fxt.CompareDense(t, "ensemble head", head, want, 1e-6, fxt.Rel)
	if mat.EqualApprox(th[0], th[1], 1e-3) {
		t.Error("the first two templates give the same head")
	}
	p, _ = Lookup("cifar100-c", "tda")
	hs, err = p.Heads(m, textenc.ByteTokenizer{}, classes)
	head1, th := hs.Head, hs.PerTemplate
	if err != nil || th != nil {
		t.Fatalf("tda heads: %v, %d template heads", err, len(th))
	}
	z, err := m.ZeroShotHead(textenc.ByteTokenizer{}, classes, []string{"a photo of a {}."})
	if err != nil {
		t.Fatal(err)
	}
	fxt.CompareDense(t, "tda head", head1, HeadMatrix(z.Weights), 0, fxt.Abs)
}

func randPixels(rng *rand.Rand, n, size int) []float32 {
	px := make([]float32, n*3*size*size)
	for i := range px {
		px[i] = float32(rng.NormFloat64())
	}
	return px
}

// TestSubTTAOptions exercises the switches on clip-tiny.
func TestSubTTAOptions(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	snap := m.Vision.Snapshot()
	rng := rand.New(rand.NewPCG(5, 6))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
	px := randPixels(rng, 4, m.Config.Vision.ImageSize)
	base := SubTTAConfig{Subspace: feature.SubspaceOptions{Rank: 4}, Alpha: 0.5, Optimizer: optim.AdamW(1e-3, 0.01), EntropyScale: 0.05}
	run := func(cfg SubTTAConfig, n int) (*SubTTA, *Result) {
		t.Helper()
		if err := m.Vision.Restore(snap); err != nil {
			t.Fatal(err)
		}
		s, err := NewSubTTA(m, head, cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Step(px[:n*len(px)/4], n)
		if err != nil {
			t.Fatal(err)
		}
		return s, res
	}

	t.Run("no-align", func(t *testing.T) {
		cfg := base
		cfg.NoAlign = true
		_, res := run(cfg, 4)
		if _, ok := res.Diag.Losses["align"]; ok || res.Diag.Steps != 1 || res.Diag.Alignment != nil {
			t.Errorf("alignment ran: %+v", res.Diag)
		}
	})
	t.Run("source-loss", func(t *testing.T) {
		cfg := base
		cfg.Loss = LossSource
		_, res := run(cfg, 4)
		if res.Diag.Steps != 1 || len(res.Diag.PseudoLabels) != 0 {
			t.Errorf("SubTTA-S took a second step: %+v", res.Diag)
		}
	})
	t.Run("projected-prediction", func(t *testing.T) {
		cfg := base
		cfg.Prediction = PredictProjected
		_, res := run(cfg, 4)
		if !equalInts(res.Preds, res.Diag.PseudoLabels) {
			t.Errorf("preds %v, pseudo-labels %v", res.Preds, res.Diag.PseudoLabels)
		}
	})
	t.Run("no-projection", func(t *testing.T) {
		cfg := base
		cfg.NoProjection, cfg.NoAlign, cfg.Loss, cfg.Prediction = true, true, LossTent, PredictProjected
		_, res := run(cfg, 4)
		// Without alignment F2 is the source features: the pseudo-labels
		// are the zero-shot predictions.
		_, want := feature.Classify(res.Features, head, m.LogitScale)
		if !equalInts(res.Diag.PseudoLabels, want) {
			t.Errorf("pseudo-labels %v, zero-shot %v", res.Diag.PseudoLabels, want)
		}
	})
	t.Run("soft", func(t *testing.T) {
		cfg := base
		cfg.Soft, cfg.Loss = 0.3, LossBATCLIP
		if _, res := run(cfg, 4); res.Diag.Steps != 2 {
			t.Errorf("%+v", res.Diag)
		}
	})
	t.Run("bank", func(t *testing.T) {
		cfg := base
		cfg.BankSize = 3
		s, _ := run(cfg, 1)
		size := len(px) / 4
		var last *feature.Alignment
		for i := 1; i < 4; i++ {
			res, err := s.Step(px[i*size:(i+1)*size], 1)
			if err != nil {
				t.Fatal(err)
			}
			last = res.Diag.Alignment
		}
		if len(s.bank) != 3 {
			t.Fatalf("bank holds %d rows, want 3", len(s.bank))
		}
		// S of the last step is the covariance of the three banked rows.
		rows := mat.NewDense(3, len(s.bank[0]), nil)
		for i, r := range s.bank {
			rows.SetRow(i, r)
		}
		want, _ := feature.BatchCovariance(rows)
		if !mat.EqualApprox(last.S, want, 1e-12) {
			t.Error("S is not the covariance of the bank")
		}
		if err := s.Reset(); err != nil || len(s.bank) != 0 {
			t.Errorf("Reset left %d banked rows (%v)", len(s.bank), err)
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// subttaConfig returns p's SubTTAConfig (the zero value for other methods).
func subttaConfig(p Preset) SubTTAConfig {
	c, _ := p.Config.(SubTTAConfig)
	return c
}

// editConfig applies f to p's config when it is a C.
func editConfig[C any](p *Preset, f func(*C)) {
	if c, ok := p.Config.(C); ok {
		f(&c)
		p.Config = c
	}
}

// TestPresetHeadsRefusesNil: heads without a model or a tokenizer are an
// error, not a panic.
func TestPresetHeadsRefusesNil(t *testing.T) {
	p, err := Lookup("cifar10-c", "tent")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Heads(nil, nil, []string{"cat", "dog"}); err == nil || !strings.Contains(err.Error(), "need a model and a tokenizer") {
		t.Errorf("err = %v", err)
	}
}
