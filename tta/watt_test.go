package tta

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
)

// TestWATTLossHand checks a case small enough to do by hand: F = T = I (2×2),
// scale 1, temperature 1. Then ŷ = (0, 1), T̂ = Ẑ = I, Q = [[e,1],[1,e]]/(e+1)
// and log softmax(P_0) = (1 − log(e+1), −log(e+1)), so L = log(e+1) − e/(e+1).
func TestWATTLossHand(t *testing.T) {
	id := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	res, err := WATTLoss(id, id, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := math.Log(math.E+1) - math.E/(math.E+1)
	if math.Abs(res.Loss-want) > 1e-15 || !equalInts(res.Preds, []int{0, 1}) {
		t.Errorf("loss %.17g, preds %v; want %.17g, [0 1]", res.Loss, res.Preds, want)
	}
	q := math.E / (math.E + 1)
	if !mat.EqualApprox(res.Targets, mat.NewDense(2, 2, []float64{q, 1 - q, 1 - q, q}), 1e-15) {
		t.Errorf("Q = %v", mat.Formatted(res.Targets))
	}
}

// wattLossLiteral transcribes [W]'s loss op by op, transposes included:
// logits = scale·T̂·Ẑᵀ ([text, image]), targets = softmax((ẐẐᵀ + T̂T̂ᵀ)/2/τ,
// dim=-1), loss = cross_entropy(logits.t(), targets.t(), "mean").
func wattLossLiteral(f, t *mat.Dense, scale, temp float64) float64 {
	z, _ := NormalizeRows(f)
	b, d := z.Dims()
	var cos mat.Dense
	cos.Mul(z, t.T())
	that := mat.NewDense(b, d, nil)
	for i, y := range Argmax(&cos) {
		that.SetRow(i, t.RawRowView(y))
	}
	var logits, is, ts mat.Dense
	logits.Mul(that, z.T())
	logits.Scale(scale, &logits)
	is.Mul(z, z.T())
	ts.Mul(that, that.T())
	targets := mat.NewDense(b, b, nil)
	for r := range b {
		for c := range b {
			targets.Set(r, c, (is.At(r, c)+ts.At(r, c))/2/temp)
		}
		softmaxInPlace(targets.RawRowView(r))
	}
	preds := mat.DenseCopyOf(logits.T())
	tgt := mat.DenseCopyOf(targets.T())
	var loss float64
	for r := range b {
		row := preds.RawRowView(r)
		logSoftmaxInPlace(row)
		for c := range b {
			loss += -tgt.At(r, c) * row[c]
		}
	}
	return loss / float64(b)
}

// TestWATTLossGrad checks the loss against the literal transcription and
// ∂L/∂F against float64 central differences, relative error below 1e-6 of
// the largest gradient entry. The inputs mimic CLIP's geometry: features
// share a common direction (pairwise cosines ≈ 0.9) and class k lies near
// sample k mod B, so the pseudo-labels differ. With independent random
// vectors the code's setting (scale 100, temperature 0.01) saturates both
// softmaxes, the loss falls to ~1e-26 and the gradient drowns in the
// rounding of Q ≈ 1 − S·w, in any implementation.
func TestWATTLossGrad(t *testing.T) {
	tests := []struct {
		b, d, c     int
		scale, temp float64
		spread      float64 // of the samples around the common direction
		h           float64
	}{
		{2, 3, 2, 5, 0.5, 1, 1e-6},
		{5, 8, 4, 10, 0.1, 0.5, 1e-6},
		{6, 16, 10, 100, WATTTemperature, 0.35, 1e-6},
		{12, 32, 7, 100, WATTTemperature, 0.35, 1e-6},
		{16, 64, 20, 100, WATTTemperature, 0.25, 1e-6},
	}
	rng := rand.New(rand.NewPCG(11, 12))
	var worst float64
	for _, tc := range tests {
		name := fmt.Sprintf("B%d-d%d-C%d-s%g-τ%g", tc.b, tc.d, tc.c, tc.scale, tc.temp)
		u := randDense(rng, 1, tc.d, 1).RawRowView(0)
		f := randDense(rng, tc.b, tc.d, tc.spread)
		for i := range tc.b {
			row := f.RawRowView(i)
			for j := range row {
				row[j] += u[j]
			}
		}
		text := randDense(rng, tc.c, tc.d, 0.1*tc.spread)
		for k := range tc.c {
			row := text.RawRowView(k)
			for j := range row {
				row[j] += f.At(k%tc.b, j)
			}
		}
		text, _ = NormalizeRows(text)
		res, err := WATTLoss(f, text, tc.scale, tc.temp)
		if err != nil {
			t.Fatal(err)
		}
		if len(distinct(res.Preds)) < 2 {
			t.Fatalf("%s: pseudo-labels %v all agree", name, res.Preds)
		}
		lit := wattLossLiteral(f, text, tc.scale, tc.temp)
		t.Logf("%s: loss %.6g, literal transcription differs by %.2g", name, res.Loss, res.Loss-lit)
		if e := math.Abs(res.Loss-lit) / math.Max(math.Abs(lit), 1); e > 1e-12 {
			t.Errorf("%s: loss %.17g, literal transcription %.17g", name, res.Loss, lit)
		}
		loss := func(x *mat.Dense) float64 {
			r, err := WATTLoss(x, text, tc.scale, tc.temp)
			if err != nil {
				t.Fatal(err)
			}
			return r.Loss
		}
		worst = math.Max(worst, gradCheck(t, name, f, loss, res.DLdF, tc.h, 1e-6))
	}
	t.Logf("worst gradcheck error %.3g", worst)
}

// TestWATTLossAgreeingLabels checks a property of the code's loss: when all
// pseudo-labels agree, T̂ has equal rows, every logit row is constant and
// the targets' gradient cancels, so the loss is log B and ∂L/∂F = 0. The
// cancelling terms carry the factors scale = 100 and 1/(2τ) = 50, so what
// remains is rounding of order 1e-13; a real gradient here is ~1e-2.
func TestWATTLossAgreeingLabels(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	f := randDense(rng, 5, 8, 1)
	text, _ := NormalizeRows(randDense(rng, 1, 8, 1))
	res, err := WATTLoss(f, text, 100, WATTTemperature)
	if err != nil {
		t.Fatal(err)
	}
	g := mat.Norm(res.DLdF, math.Inf(1))
	t.Logf("loss %.17g (log 5 = %.17g), ‖∂L/∂F‖∞ %.3g", res.Loss, math.Log(5), g)
	if math.Abs(res.Loss-math.Log(5)) > 1e-14 || g > 1e-10 {
		t.Errorf("loss %v, ‖∂L/∂F‖∞ %v; want log 5 and 0", res.Loss, g)
	}
}

func TestWATTLossErrors(t *testing.T) {
	f := mat.NewDense(2, 3, nil)
	if _, err := WATTLoss(f, mat.NewDense(4, 2, nil), 100, 0.01); err == nil {
		t.Error("mismatched dims accepted")
	}
	if _, err := WATTLoss(f, mat.NewDense(4, 3, nil), 100, 0); err == nil {
		t.Error("zero temperature accepted")
	}
}

// wattFixture is the fixture model (float32) with six images and heads
// whose class rows lie near the images' centred source features, so that
// the pseudo-labels differ within the batch (WATT's gradient vanishes when
// they all agree; see TestWATTLossAgreeingLabels). The images are the first
// batch whose first pseudo-labels (the source model's, under the first
// head) disagree among: six random images, then the batches of six of
// tta_inputs.safetensors; the test is skipped, naming the fixture, when
// none does.
func wattFixture(t *testing.T, nHeads int) (*WATT, []mat.Matrix, []float32, WATTConfig) {
	t.Helper()
	const n, classes = 6, 10
	m := tinyModel(t, false)
	rng := rand.New(rand.NewPCG(21, 22))
	size := m.Config.Vision.ImageSize
	candidates := func(yield func([]float32) bool) {
		if !yield(randPixels(rng, n, size)) {
			return
		}
		for _, px := range ttaPixels(t, n) {
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
		f0, _ := NormalizeRows(mat.NewDense(n, m.Config.EmbedDim, append([]float64(nil), enc.Value().Data().F64()...)))
		fc, _ := centerRows(f0)
		d := m.Config.EmbedDim
		fc, _ = NormalizeRows(fc)
		near := func() *mat.Dense {
			h := randDense(rng, classes, d, 0.2)
			for k := range classes {
				row := h.RawRowView(k)
				for j := range row {
					row[j] += fc.At(k%n, j)
				}
			}
			h, _ = NormalizeRows(h)
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
		l, err := WATTLoss(f, heads[0], w.scale, WATTTemperature)
		if err != nil {
			t.Fatal(err)
		}
		if len(distinct(l.Preds)) >= 2 {
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
				l, err := WATTLoss(f, h, w.scale, WATTTemperature)
				if err != nil {
					t.Fatal(err)
				}
				if steps == 0 {
					first = l.Loss
					if len(distinct(l.Preds)) < 2 {
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
	logits, preds := w.head(f)
	compareDense(t, "logits", res.Logits, logits, 0, absTol)
	compareInts(t, "preds", res.Preds, preds)
	compare(t, "watt loss", []float64{res.Diag.Losses["watt"], res.Diag.Losses["watt_first"]}, []float64{sum / float64(steps), first}, 0, absTol)

	// The adapted prediction differs from the source one, or the test
	// above would not see the schedule.
	w.reset()
	_, f0, err := w.forward(px, n, false)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := w.head(f0)
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
	compareDense(t, "logits after another batch", again.Logits, first.Logits, 0, absTol)
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
	m := tinyModel(t, false)
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
