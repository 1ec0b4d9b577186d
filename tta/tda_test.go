package tta

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// tdaStream returns n random features around c class directions (unit
// rows of head), with the spread tuned so that entropies span the
// negative band.
func tdaStream(rng *rand.Rand, n, c, d int) (f, head *mat.Dense) {
	head, _ = feature.NormalizeRows(fxt.RandDense(rng, c, d, 1))
	f = fxt.RandDense(rng, n, d, 0.35)
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
	cfg := feature.DefaultTDAConfig()
	cfg.Scale = 20 // moderate entropies on this synthetic stream
	run := func(bs int) (*mat.Dense, int) {
		tda, err := feature.NewTDACache(head, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out := mat.NewDense(n, 6, nil)
		neg := 0
		for s := 0; s < n; s += bs {
			e := min(s+bs, n)
			res, err := tda.Update(f.Slice(s, e, 0, 16))
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
		fxt.CompareDense(t, "logits", got, one, 0, fxt.Abs)
	}
	// The caches matter: the predictions are not the zero-shot ones.
	tda, _ := feature.NewTDACache(head, cfg)
	res, _ := tda.Update(f)
	if mat.Equal(res.Logits, res.ZeroShot) {
		t.Error("cache logits are zero")
	}
}

// TestTDAMethod runs the TDA method on clip-tiny in batches of 1 and of 5: the
// predictions must agree and the logits to within the forward pass's float32
// rounding (1e-5 relative), and Reset must empty the caches.
func TestTDAMethod(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	rng := rand.New(rand.NewPCG(33, 34))
	const n = 10
	px, fc := randomImageFeatures(t, m, rng, n)
	d := m.Config.EmbedDim
	// A head whose classes lie near the images' centred features, so that
	// the zero-shot predictions and entropies vary.
	head, _ := feature.NormalizeRows(fc.Slice(0, 4, 0, d))
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
	meth, err := NewTDA(m, head, feature.DefaultTDAConfig())
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
	fxt.CompareInts(t, "preds batch 5 vs 1", p5, p1)
	fxt.CompareDense(t, "logits batch 5 vs 1", l5, l1, 1e-5, fxt.Rel)
	if meth.Name() != "tda" {
		t.Errorf("Name() = %q", meth.Name())
	}
	// The entropy diagnostic is the mean zero-shot entropy in nats.
	res, err := meth.Step(px[:5*size], 5)
	if err != nil {
		t.Fatal(err)
	}
	zs, _ := feature.Classify(res.Features, head, 100)
	want, _ := feature.EntropyLoss(zs)
	fxt.Compare(t, "entropy diagnostic", []float64{res.Diag.Losses["entropy"]}, []float64{want}, 1e-12, fxt.Rel)
	if len(fxt.Distinct(p1)) < 2 {
		t.Errorf("predictions %v all agree: the test is too weak", p1)
	}
}

func TestTDAConfigErrors(t *testing.T) {
	head := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	for _, mod := range []func(*feature.TDAConfig){
		func(c *feature.TDAConfig) { c.Positive.Shots = 0 },
		func(c *feature.TDAConfig) { c.Negative.Shots = -1 },
		func(c *feature.TDAConfig) { c.Scale = 0 },
	} {
		c := feature.DefaultTDAConfig()
		mod(&c)
		if _, err := feature.NewTDACache(head, c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	c := feature.DefaultTDAConfig()
	c.Negative.Disabled, c.Negative.Shots = true, 0
	tda, err := feature.NewTDACache(head, c)
	if err != nil {
		t.Fatalf("a disabled cache needs no capacity: %v", err)
	}
	if _, err := tda.Update(mat.NewDense(1, 3, nil)); err == nil {
		t.Error("features of the wrong width accepted")
	}
}

// TDA on a stream of seven features over a two-class head. The last
// sample is zero-shot class 0 by a small margin, but it lies near the
// samples cached for class 1, and class 0's cache is full of more confident
// samples, so it does not enter it: the cache logits flip it to class 1.
func ExampleTDA() {
	head := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	tda, err := feature.NewTDACache(head, feature.DefaultTDAConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	stream := mat.NewDense(7, 2, []float64{
		1, 0, 1, 0.01, 1, -0.01, // confident class 0
		0.55, 0.83, 0.56, 0.83, 0.54, 0.83, // class 1
		0.70, 0.69, // ambiguous, near the class-1 samples
	})
	res, err := tda.Update(stream)
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
	f0, _ := feature.NormalizeRows(mat.NewDense(n, m.Config.EmbedDim, append([]float64(nil), enc.Value().Data().F64()...)))
	fc, _ := feature.CenterRows(f0)
	return px, fc
}
