package tta

import (
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// wattFixture is clip-tiny (float32) with six random images and heads whose
// class rows lie near the images' centred source features, so that the
// pseudo-labels differ within the batch (WATT's gradient vanishes when they
// all agree; see TestWATTLossAgreeingLabels).
func wattFixture(t *testing.T, nHeads int) (*WATT, []mat.Matrix, []float32, WATTConfig) {
	t.Helper()
	const n, classes = 6, 10
	m := fxtmodel.TinyModel(t, false)
	rng := rand.New(rand.NewPCG(21, 22))
	size := m.Config.Vision.ImageSize
	candidates := func(yield func([]float32) bool) {
		if !yield(randPixels(rng, n, size)) {
			return
		}
		for _, px := range fxtmodel.Pixels(t, n) {
			if len(px) != n*3*size*size {
				t.Logf("tta_inputs.safetensors: images of %d values, the model takes %d×%d", len(px)/n/3, size, size)
				return
			}
			if !yield(px) {
				return
			}
		}
	}
	cfg := WATTConfig{Optimizer: optim.AdamL2(1e-3, 0), Steps: 2, Rounds: 2}
	for px := range candidates {
		enc, err := m.EncodeImage(px, n)
		if err != nil {
			t.Fatal(err)
		}
		f0, _ := feature.NormalizeRows(mat.NewDense(n, m.Config.EmbedDim, append([]float64(nil), enc.Value().Data().F64()...)))
		fc, _ := feature.CenterRows(f0)
		d := m.Config.EmbedDim
		fc, _ = feature.NormalizeRows(fc)
		near := func() *mat.Dense {
			h := fxt.RandDense(rng, classes, d, 0.2)
			for k := range classes {
				row := h.RawRowView(k)
				for j := range row {
					row[j] += fc.At(k%n, j)
				}
			}
			h, _ = feature.NormalizeRows(h)
			return h
		}
		var heads []mat.Matrix
		for range nHeads {
			heads = append(heads, near())
		}
		w, err := NewWATT(m, near(), heads, cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, f, err := w.forward(px, n, false)
		if err != nil {
			t.Fatal(err)
		}
		l, err := feature.WATTLoss(f, heads[0], w.scale, feature.WATTTemperature)
		if err != nil {
			t.Fatal(err)
		}
		if len(fxt.Distinct(l.Preds)) >= 2 {
			return w, heads, px, cfg
		}
		t.Logf("pseudo-labels %v all agree: trying the next batch", l.Preds)
	}
	t.Skipf("fixtures/clip-tiny.openai.safetensors: the first pseudo-labels agree on every batch tried (random, tta_inputs.safetensors): WATT's gradient vanishes")
	return nil, nil, nil, cfg
}

// TestWATTSchedule replays WATT-S's schedule by hand from the method's own
// pieces (forward, WATTLoss, backward, one optimizer that is never reset)
// and checks the prediction: M rounds, each visiting the heads in order for
// L steps, the LayerNorm weights replaced by the float32 mean of the
// templates' snapshots after each round. Both sides run the same float32
// operations in the same order, so they must agree exactly.
func TestWATTSchedule(t *testing.T) {
	w, heads, px, cfg := wattFixture(t, 3)
	const n = 6
	res, err := w.Step(px, n)
	if err != nil {
		t.Fatal(err)
	}
	if want := cfg.Rounds * len(heads) * cfg.Steps; res.Diag.Steps != want || res.Diag.Skipped != 0 {
		t.Errorf("%d steps, %d skipped; want %d, 0", res.Diag.Steps, res.Diag.Skipped, want)
	}

	w.reset()
	tr := w.tr.(*lnTrainer[float32])
	var snaps [][][]float32
	average := func() {
		for i, p := range tr.params {
			for j := range p.Value {
				var s float32
				for _, sn := range snaps {
					s += sn[i][j]
				}
				p.Value[j] = s / float32(len(snaps))
			}
		}
	}
	var sum, first float64
	steps := 0
	for r := range cfg.Rounds {
		if r > 0 {
			average()
		}
		snaps = nil
		for _, h := range heads {
			for range cfg.Steps {
				node, f, err := w.forward(px, n, true)
				if err != nil {
					t.Fatal(err)
				}
				l, err := feature.WATTLoss(f, h, w.scale, feature.WATTTemperature)
				if err != nil {
					t.Fatal(err)
				}
				if steps == 0 {
					first = l.Loss
					if len(fxt.Distinct(l.Preds)) < 2 {
						t.Fatalf("first step's pseudo-labels %v all agree: the test sees no gradient", l.Preds)
					}
				}
				sum += l.Loss
				steps++
				if err := w.backward(node, l.DLdF); err != nil {
					t.Fatal(err)
				}
				if ok, err := tr.step(); !ok || err != nil {
					t.Fatalf("step: %v, %v", ok, err)
				}
			}
			snap := make([][]float32, len(tr.params))
			for i, p := range tr.params {
				snap[i] = append([]float32(nil), p.Value...)
			}
			snaps = append(snaps, snap)
		}
	}
	average()
	_, f, err := w.forward(px, n, false)
	if err != nil {
		t.Fatal(err)
	}
	logits, preds := w.classify(f)
	fxt.CompareDense(t, "logits", res.Logits, logits, 0, fxt.Abs)
	fxt.CompareInts(t, "preds", res.Preds, preds)
	fxt.Compare(t, "watt loss", []float64{res.Diag.Losses["watt"], res.Diag.Losses["watt_first"]}, []float64{sum / float64(steps), first}, 0, fxt.Abs)

	// The adapted prediction differs from the source one, or the test
	// above would not see the schedule.
	w.reset()
	_, f0, err := w.forward(px, n, false)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := w.classify(f0)
	_, rel := fixturefile.ErrStats(mat.DenseCopyOf(res.Logits).RawMatrix().Data, src.RawMatrix().Data)
	t.Logf("adapted vs source logits: rel-to-max difference %.3g", rel)
	if rel < 1e-4 {
		t.Errorf("adapted logits barely differ from the source logits (%.2g)", rel)
	}
}

// TestWATTEpisodic checks that every batch starts from the source weights
// and a fresh optimizer: a batch's result does not depend on the batches
// before it, and the snapshots are averaged in float32 for a float32 model.
func TestWATTEpisodic(t *testing.T) {
	w, heads, px, cfg := wattFixture(t, 2)
	size := len(px) / 6
	a, b := px[:3*size], px[3*size:]
	first, err := w.Step(b, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Step(a, 3); err != nil {
		t.Fatal(err)
	}
	again, err := w.Step(b, 3)
	if err != nil {
		t.Fatal(err)
	}
	fxt.CompareDense(t, "logits after another batch", again.Logits, first.Logits, 0, fxt.Abs)
	if w.Name() != "watt-s" {
		t.Errorf("Name() = %q", w.Name())
	}

	cfg.Name = "watt-lite"
	if _, err := NewWATT(w.model, w.text, nil, cfg); err == nil {
		t.Error("no template heads accepted")
	}
	bad := cfg
	bad.Steps = 0
	if _, err := NewWATT(w.model, w.text, heads, bad); err == nil {
		t.Error("zero steps accepted")
	}
	if _, err := NewWATT(w.model, w.text, []mat.Matrix{mat.NewDense(3, 2, nil)}, cfg); err == nil {
		t.Error("a template head of the wrong shape accepted")
	}
	lite, err := NewWATT(w.model, w.text, heads, cfg)
	if err != nil || lite.Name() != "watt-lite" {
		t.Errorf("Name() = %q, %v", lite.Name(), err)
	}
}

// TestLNAveragerFloat32 checks the averaging arithmetic in float32: the
// sum is formed in template order and rounded to float32 at every step, as
// torch's sum(...)/K on float32 tensors.
func TestLNAveragerFloat32(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	tr, err := newLNTrainer[float32](m, optim.AdamL2(1e-3, 0))
	if err != nil {
		t.Fatal(err)
	}
	a := &lnAverager[float32]{tr: tr}
	vals := []float32{1e8, 1, -1e8}
	for _, v := range vals {
		for _, p := range tr.params {
			for j := range p.Value {
				p.Value[j] = v
			}
		}
		a.add()
	}
	a.load()
	// (1e8 + 1) rounds to 1e8 in float32, so the float32 mean is 0; in
	// exact arithmetic it is 1/3.
	if got := tr.params[0].Value[0]; got != 0 {
		t.Errorf("float32 mean %v, want 0", got)
	}
	a.clear()
	tr.params[0].Value[0] = 7
	a.add()
	tr.params[0].Value[0] = 5
	a.load()
	if got := tr.params[0].Value[0]; got != 7 {
		t.Errorf("after clear: %v, want the single snapshot's 7", got)
	}
}
