package tta

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/clip"
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
		res, err := tda.Step(f)
		if err != nil {
			t.Fatal(err)
		}
		compare(t, tc.name+" logits", res.Logits.RawMatrix().Data, tc.want, 1e-15, relTol)
		compare(t, tc.name+" entropy", res.Entropy, []float64{h1, h2}, 1e-15, relTol)
		if !equalInts(res.ZeroShotPreds, []int{0, 1}) || res.PosAdmitted != 2 || res.NegAdmitted != 1 {
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
	res, err := tda.Step(mat.NewDense(1, 3, []float64{1, 0, 0}))
	if err != nil {
		t.Fatal(err)
	}
	p := math.Exp(4) / (math.Exp(4) + 2)
	q := 1 / (math.Exp(4) + 2)
	h := -(p*math.Log(p) + 2*q*math.Log(q))
	compare(t, "entropy", res.Entropy, []float64{h / math.Log2(3)}, 1e-15, relTol)
	if res.NegAdmitted != 1 || !slices.Equal(tda.neg[0][0].mask, []float64{1, 0, 0}) {
		t.Fatalf("admitted %d, mask %v; want 1, [1 0 0]", res.NegAdmitted, tda.neg[0])
	}
	want := []float64{4 - cfg.Negative.Alpha, 0, 0}
	compare(t, "logits", res.Logits.RawMatrix().Data, want, 1e-15, relTol)

	// Above the band (uniform-ish), nothing is admitted.
	res, err = tda.Step(mat.NewDense(1, 3, []float64{1, 1, 1}))
	if err != nil {
		t.Fatal(err)
	}
	if res.NegAdmitted != 0 || res.Entropy[0] < cfg.EntropyUpper {
		t.Errorf("entropy %v admitted %d", res.Entropy, res.NegAdmitted)
	}
}

// tdaStream returns n random features around c class directions (unit
// rows of head), with the spread tuned so that entropies span the
// negative band.
func tdaStream(rng *rand.Rand, n, c, d int) (f, head *mat.Dense) {
	head, _ = NormalizeRows(randDense(rng, c, d, 1))
	f = randDense(rng, n, d, 0.35)
	for i := range n {
		row := f.RawRowView(i)
		for j := range row {
			row[j] += head.At(rng.IntN(c), j)
		}
	}
	return f, head
}

// TestTDABatchSizeIndependent feeds one stream in batches of 1, 5 and all
// at once: the logits must be identical, bit for bit, because every sample
// is processed alone, in order.
func TestTDABatchSizeIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	const n = 40
	f, head := tdaStream(rng, n, 6, 16)
	cfg := DefaultTDAConfig()
	cfg.Scale = 20 // moderate entropies on this synthetic stream
	run := func(bs int) (*mat.Dense, int) {
		tda, err := NewTDACache(head, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out := mat.NewDense(n, 6, nil)
		neg := 0
		for s := 0; s < n; s += bs {
			e := min(s+bs, n)
			res, err := tda.Step(f.Slice(s, e, 0, 16))
			if err != nil {
				t.Fatal(err)
			}
			for i := s; i < e; i++ {
				out.SetRow(i, res.Logits.RawRowView(i-s))
			}
			neg += res.NegAdmitted
		}
		return out, neg
	}
	one, neg := run(1)
	t.Logf("%d of %d samples entered the negative cache", neg, n)
	if neg == 0 {
		t.Fatal("the stream never used the negative cache")
	}
	for _, bs := range []int{5, 7, n} {
		got, _ := run(bs)
		compareDense(t, "logits", got, one, 0, absTol)
	}
	// The caches matter: the predictions are not the zero-shot ones.
	tda, _ := NewTDACache(head, cfg)
	res, _ := tda.Step(f)
	if mat.Equal(res.Logits, res.ZeroShot) {
		t.Error("cache logits are zero")
	}
}

// TestTDAMethod runs the TDA method on clip-tiny in batches of 1 and of 5: the
// predictions must agree and the logits to within the forward pass's float32
// rounding (1e-5 relative), and Reset must empty the caches.
func TestTDAMethod(t *testing.T) {
	m := tinyModel(t, false)
	rng := rand.New(rand.NewPCG(33, 34))
	const n = 10
	px, fc := randomImageFeatures(t, m, rng, n)
	d := m.Config.EmbedDim
	// A head whose classes lie near the images' centred features, so that
	// the zero-shot predictions and entropies vary.
	head, _ := NormalizeRows(fc.Slice(0, 4, 0, d))
	size := len(px) / n
	run := func(meth *TDA, bs int) ([]int, *mat.Dense) {
		var preds []int
		logits := mat.NewDense(n, 4, nil)
		for s := 0; s < n; s += bs {
			res, err := meth.Step(px[s*size:(s+bs)*size], bs)
			if err != nil {
				t.Fatal(err)
			}
			preds = append(preds, res.Preds...)
			for i := range bs {
				logits.SetRow(s+i, res.Logits.RawRowView(i))
			}
		}
		return preds, logits
	}
	meth, err := NewTDA(m, head, DefaultTDAConfig())
	if err != nil {
		t.Fatal(err)
	}
	p1, l1 := run(meth, 1)
	pos, neg := meth.cache.CacheSizes()
	t.Logf("after %d samples: %d positive, %d negative cache entries", n, pos, neg)
	if err := meth.Reset(); err != nil {
		t.Fatal(err)
	}
	if p, q := meth.cache.CacheSizes(); p != 0 || q != 0 {
		t.Errorf("Reset left %d/%d cache entries", p, q)
	}
	p5, l5 := run(meth, 5)
	compareInts(t, "preds batch 5 vs 1", p5, p1)
	compareDense(t, "logits batch 5 vs 1", l5, l1, 1e-5, relTol)
	if meth.Name() != "tda" {
		t.Errorf("Name() = %q", meth.Name())
	}
	// The entropy diagnostic is the mean zero-shot entropy in nats.
	res, err := meth.Step(px[:5*size], 5)
	if err != nil {
		t.Fatal(err)
	}
	zs, _ := Head(res.Features, head, 100)
	want, _ := EntropyLoss(zs)
	compare(t, "entropy diagnostic", []float64{res.Diag.Losses["entropy"]}, []float64{want}, 1e-12, relTol)
	if len(distinct(p1)) < 2 {
		t.Errorf("predictions %v all agree: the test is too weak", p1)
	}
}

func TestTDAConfigErrors(t *testing.T) {
	head := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	for _, mod := range []func(*TDAConfig){
		func(c *TDAConfig) { c.Positive.Shots = 0 },
		func(c *TDAConfig) { c.Negative.Shots = -1 },
		func(c *TDAConfig) { c.Scale = 0 },
	} {
		c := DefaultTDAConfig()
		mod(&c)
		if _, err := NewTDACache(head, c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	c := DefaultTDAConfig()
	c.Negative.Disabled, c.Negative.Shots = true, 0
	tda, err := NewTDACache(head, c)
	if err != nil {
		t.Fatalf("a disabled cache needs no capacity: %v", err)
	}
	if _, err := tda.Step(mat.NewDense(1, 3, nil)); err == nil {
		t.Error("features of the wrong width accepted")
	}
}

// TDA on a stream of seven features over a two-class head. The last
// sample is zero-shot class 0 by a small margin, but it lies near the
// samples cached for class 1, and class 0's cache is full of more confident
// samples, so it does not enter it: the cache logits flip it to class 1.
func ExampleTDA() {
	head := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	tda, err := NewTDACache(head, DefaultTDAConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	stream := mat.NewDense(7, 2, []float64{
		1, 0, 1, 0.01, 1, -0.01, // confident class 0
		0.55, 0.83, 0.56, 0.83, 0.54, 0.83, // class 1
		0.70, 0.69, // ambiguous, near the class-1 samples
	})
	res, err := tda.Step(stream)
	if err != nil {
		fmt.Println(err)
		return
	}
	pos, neg := tda.CacheSizes()
	fmt.Println("zero-shot:", res.ZeroShotPreds)
	fmt.Println("TDA:      ", res.Preds)
	fmt.Printf("last sample: zero-shot logits %.2f, TDA %.2f\n", res.ZeroShot.RawRowView(6), res.Logits.RawRowView(6))
	fmt.Println("cached:", pos, "positive,", neg, "negative")
	// Output:
	// zero-shot: [0 0 0 1 1 1 0]
	// TDA:       [0 0 0 1 1 1 1]
	// last sample: zero-shot logits [71.22 70.20], TDA [72.64 75.59]
	// cached: 6 positive, 0 negative
}

// randomImageFeatures encodes n random images and returns their pixels and
// their normalised image features with the batch mean removed: directions
// that make heads whose predictions vary.
func randomImageFeatures(tb testing.TB, m *clip.Model, rng *rand.Rand, n int) ([]float32, *mat.Dense) {
	tb.Helper()
	px := randPixels(rng, n, m.Config.Vision.ImageSize)
	enc, err := m.EncodeImage(px, n)
	if err != nil {
		tb.Fatal(err)
	}
	f0, _ := NormalizeRows(mat.NewDense(n, m.Config.EmbedDim, append([]float64(nil), enc.Value().Data().F64()...)))
	fc, _ := centerRows(f0)
	return px, fc
}
