package feature

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
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
	if math.Abs(res.Loss-want) > 1e-15 || !slices.Equal(res.Preds, []int{0, 1}) {
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
		u := fxt.RandDense(rng, 1, tc.d, 1).RawRowView(0)
		f := fxt.RandDense(rng, tc.b, tc.d, tc.spread)
		for i := range tc.b {
			row := f.RawRowView(i)
			for j := range row {
				row[j] += u[j]
			}
		}
		text := fxt.RandDense(rng, tc.c, tc.d, 0.1*tc.spread)
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
		if len(fxt.Distinct(res.Preds)) < 2 {
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
		worst = math.Max(worst, fxt.GradCheck(t, name, f, loss, res.DLdF, tc.h, 1e-6))
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
	f := fxt.RandDense(rng, 5, 8, 1)
	text, _ := NormalizeRows(fxt.RandDense(rng, 1, 8, 1))
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
