package feature

import (
	"math"
	"slices"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestTDAAdmit walks one class's cache of capacity 2 through the code's
// update_cache rule.
func TestTDAAdmit(t *testing.T) {
	steps := []struct {
		entropy float64
		kept    bool
		want    []float64 // entropies in the cache afterwards
	}{
		{0.5, true, []float64{0.5}},
		{0.3, true, []float64{0.3, 0.5}},         // appended, then sorted
		{0.4, true, []float64{0.3, 0.4}},         // full: replaces the highest (0.5)
		{0.45, false, []float64{0.3, 0.4}},       // higher than the highest: dropped
		{0.4, false, []float64{0.3, 0.4}},        // equal: dropped (strict <)
		{0.1, true, []float64{0.1, 0.3}},         // replaces 0.4, sorted to the front
		{math.NaN(), false, []float64{0.1, 0.3}}, // NaN compares false
	}
	var list []tdaEntry
	for i, s := range steps {
		var kept bool
		list, kept = admit(list, tdaEntry{entropy: s.entropy, key: []float64{float64(i)}}, 2)
		var got []float64
		for _, e := range list {
			got = append(got, e.entropy)
		}
		if kept != s.kept || !slices.Equal(got, s.want) {
			t.Errorf("step %d (H %v): kept %v, cache %v; want %v, %v", i, s.entropy, kept, got, s.kept, s.want)
		}
	}
	// Stable order: equal entropies keep their arrival order.
	list = nil
	for i := range 3 {
		list, _ = admit(list, tdaEntry{entropy: 1, key: []float64{float64(i)}}, 3)
	}
	for i, e := range list {
		if e.key[0] != float64(i) {
			t.Errorf("equal entropies reordered: entry %d is sample %v", i, e.key[0])
		}
	}
}

// TestTDAHand checks two samples by hand. Head W = I (2 classes, d = 2),
// scale 2, so the normalised entropy is H/log₂2 = H.
//
// Sample 1, z = (1, 0): ℓ = (2, 0), p₀ = e²/(1+e²) ≈ 0.881, H ≈ 0.364, inside
// (0.2, 0.5): it enters both caches of class 0, its mask is (1, 1) (both
// probabilities in (0.03, 1)). Since the code updates before predicting, it
// sees itself at affinity 1: logits = (2 + α⁺ − α⁻, −α⁻).
//
// Sample 2, z = (0.6, 0.8): ℓ = (1.2, 1.6), ŷ = 1, H ≈ 0.673, outside the
// band: only the positive cache of class 1 takes it. Its logits add
// α⁺·exp(−β⁺(1 − 0.6)) to class 0 (sample 1), α⁺ to class 1 (itself), and
// subtract α⁻·exp(−β⁻(1 − 0.6)) from both (sample 1's mask).
func TestTDAHand(t *testing.T) {
	cfg := DefaultTDAConfig()
	cfg.Scale = 2
	ap, bp := cfg.Positive.Alpha, cfg.Positive.Beta
	an, bn := cfg.Negative.Alpha, cfg.Negative.Beta
	head := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	f := mat.NewDense(2, 2, []float64{3, 0, 0.3, 0.4}) // normalised inside
	p0 := math.Exp(2) / (1 + math.Exp(2))
	h1 := -(p0*math.Log(p0) + (1-p0)*math.Log(1-p0))
	q1 := math.Exp(1.2) / (math.Exp(1.2) + math.Exp(1.6))
	h2 := -(q1*math.Log(q1) + (1-q1)*math.Log(1-q1))

	tests := []struct {
		name   string
		before bool
		want   []float64
	}{
		{"update-then-predict", false, []float64{
			2 + ap - an, -an,
			1.2 + ap*math.Exp(-bp*0.4) - an*math.Exp(-bn*0.4), 1.6 + ap - an*math.Exp(-bn*0.4),
		}},
		{"predict-then-update", true, []float64{
			2, 0,
			1.2 + ap*math.Exp(-bp*0.4) - an*math.Exp(-bn*0.4), 1.6 - an*math.Exp(-bn*0.4),
		}},
	}
	for _, tc := range tests {
		c := cfg
		c.PredictBeforeUpdate = tc.before
		tda, err := NewTDACache(head, c)
		if err != nil {
			t.Fatal(err)
		}
		res, err := tda.Update(f)
		if err != nil {
			t.Fatal(err)
		}
		fxt.Compare(t, tc.name+" logits", res.Logits.RawMatrix().Data, tc.want, 1e-15, fxt.Rel)
		fxt.Compare(t, tc.name+" entropy", res.Entropy, []float64{h1, h2}, 1e-15, fxt.Rel)
		if !slices.Equal(res.ZeroShotPreds, []int{0, 1}) || res.PosAdmitted != 2 || res.NegAdmitted != 1 {
			t.Errorf("%s: zero-shot preds %v, admitted %d/%d; want [0 1], 2/1", tc.name, res.ZeroShotPreds, res.PosAdmitted, res.NegAdmitted)
		}
		if p, n := tda.CacheSizes(); p != 2 || n != 1 {
			t.Errorf("%s: cache sizes %d/%d, want 2/1", tc.name, p, n)
		}
		if m := tda.neg[0][0].mask; !slices.Equal(m, []float64{1, 1}) {
			t.Errorf("%s: negative mask %v, want [1 1]", tc.name, m)
		}
		tda.Reset()
		if p, n := tda.CacheSizes(); p != 0 || n != 0 {
			t.Errorf("%s: Reset left %d/%d entries", tc.name, p, n)
		}
	}
}

// TestTDANegativeMask checks the mask bounds (strict on both sides) and the
// entropy band with three classes: log₂3 normalises the entropy.
func TestTDANegativeMask(t *testing.T) {
	cfg := DefaultTDAConfig()
	cfg.Scale = 4
	cfg.Positive.Disabled = true
	head := mat.NewDense(3, 3, []float64{1, 0, 0, 0, 1, 0, 0, 0, 1})
	// ℓ = (4, 0, 0) → p ≈ (0.965, 0.0177, 0.0177): two probabilities below
	// 0.03, so the mask is (1, 0, 0); H ≈ 0.177 nats and H/log₂3 ≈ 0.112 is
	// below the default band, so lower the band to admit it.
	cfg.EntropyLower = 0.1
	tda, err := NewTDACache(head, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tda.Update(mat.NewDense(1, 3, []float64{1, 0, 0}))
	if err != nil {
		t.Fatal(err)
	}
	p := math.Exp(4) / (math.Exp(4) + 2)
	q := 1 / (math.Exp(4) + 2)
	h := -(p*math.Log(p) + 2*q*math.Log(q))
	fxt.Compare(t, "entropy", res.Entropy, []float64{h / math.Log2(3)}, 1e-15, fxt.Rel)
	if res.NegAdmitted != 1 || !slices.Equal(tda.neg[0][0].mask, []float64{1, 0, 0}) {
		t.Fatalf("admitted %d, mask %v; want 1, [1 0 0]", res.NegAdmitted, tda.neg[0])
	}
	want := []float64{4 - cfg.Negative.Alpha, 0, 0}
	fxt.Compare(t, "logits", res.Logits.RawMatrix().Data, want, 1e-15, fxt.Rel)

	// Above the band (uniform-ish), nothing is admitted.
	res, err = tda.Update(mat.NewDense(1, 3, []float64{1, 1, 1}))
	if err != nil {
		t.Fatal(err)
	}
	if res.NegAdmitted != 0 || res.Entropy[0] < cfg.EntropyUpper {
		t.Errorf("entropy %v admitted %d", res.Entropy, res.NegAdmitted)
	}
}
