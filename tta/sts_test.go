package tta

import (
	"math"
	"slices"
	"testing"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestSTS runs STS (no official code or fixture exists) on the fixture
// model over tta2's stored views and checks what its reading promises: a
// step lowers the marginal entropy of the confident views against the
// steered prototypes, the shift lies in the head's top singular
// directions (so γ = 0 gives the zero-shot logits), and every image starts
// afresh (an image gives the same result alone and after another).
func TestSTS(t *testing.T) {
	pool, v := fxtmodel.Views(t)
	if len(pool) < 2 {
		t.Skipf("tta2's view pool holds %d images", len(pool))
	}
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	m := fxtmodel.TinyModel(t, false)
	head := x.Dense("text.T")
	keep, err := feature.KeepCount(v, 0.34)
	if err != nil || keep < 1 {
		t.Skipf("%d views keep none at ρ 0.34", v)
	}
	cfg := STSConfig{Directions: 4, Rho: 0.34, Optimizer: optim.AdamW(5e-2, 0), Steps: 3}
	s, err := NewSTS(m, head, v, cfg)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := s.StepViews(pool[1], 1, v)
	if err != nil {
		t.Fatal(err)
	}
	both, err := s.StepViews(append(slices.Clone(pool[0]), pool[1]...), 2, v)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(alone.Logits.RawRowView(0), both.Logits.RawRowView(1)) || alone.Preds[0] != both.Preds[1] {
		t.Error("image 1 gives another result after image 0: the coefficients carried over")
	}
	if alone.Diag.Steps != cfg.Steps {
		t.Errorf("%d steps taken, want %d", alone.Diag.Steps, cfg.Steps)
	}
	// The loss before (γ = 0) and after the steps, on image 1's views.
	_, f, err := s.forward(pool[1], v, false)
	if err != nil {
		t.Fatal(err)
	}
	fv, _ := feature.NormalizeRows(f)
	sel, err := feature.SelectConfident(feature.Logits(fv, s.text, s.scale), cfg.Rho)
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.spectrum.SteeringLoss(fv, s.text, make([]float64, len(s.gamma)), s.scale, sel.Kept)
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.spectrum.SteeringLoss(fv, s.text, s.gamma, s.scale, sel.Kept)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("marginal entropy %.6g → %.6g, γ = %v", before.Marginal.Loss, after.Marginal.Loss, s.gamma)
	if !(after.Marginal.Loss < before.Marginal.Loss) {
		t.Errorf("the steps did not lower the marginal entropy: %.6g → %.6g", before.Marginal.Loss, after.Marginal.Loss)
	}
	zs, _ := feature.Classify(f.Slice(0, 1, 0, m.Config.EmbedDim), s.text, s.scale)
	// The steered prototypes are renormalised: the head's float32 rows
	// move by rounding, 1e-7 relative.
	if math.Abs(before.Logits.At(0, 0)-zs.At(0, 0)) > 1e-6*math.Abs(zs.At(0, 0)) {
		t.Errorf("γ = 0 gives logit %g, the zero-shot head %g", before.Logits.At(0, 0), zs.At(0, 0))
	}
}
