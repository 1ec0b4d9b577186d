package tta

import (
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// viewConfig is the part of a tta2.json method block the multi-view tests
// read.
type viewConfig struct {
	Images     []int   `json:"images"`
	V          int     `json:"V"`
	Rho        float64 `json:"rho"`
	Gamma      float64 `json:"gamma"`
	SelectionP float64 `json:"selection_p"`
	MemorySize int     `json:"memory_size"`
	Beta       float64 `json:"beta"`
	WeightMem  float64 `json:"weight_mem"`
}

// viewStream returns the views of the images a method's fixture block
// names, as one batch, checking that the pool holds them with V views.
func viewStream(t *testing.T, c viewConfig) []float32 {
	t.Helper()
	pool, v := fxtmodel.Views(t)
	if v != c.V {
		t.Fatalf("tta2: the pool has %d views per image, the method's block %d", v, c.V)
	}
	var px []float32
	for _, i := range c.Images {
		if i >= len(pool) {
			t.Fatalf("tta2: image %d outside the pool of %d", i, len(pool))
		}
		px = append(px, pool[i]...)
	}
	return px
}

// TestMultiViewMethodsFixture runs VTE, ZERO and DMN on the fixture model
// over tta2's stored views (the official code's, so that no random numbers
// need to match) and compares their outputs with the official ones: the
// logits at the forward's fp32 tolerance (1e-5 relative to each tensor's
// max) and the predictions exactly.
func TestMultiViewMethodsFixture(t *testing.T) {
	var js struct {
		VTE, Zero, DMN struct {
			Config viewConfig `json:"config"`
		}
	}
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	m := fxtmodel.TinyModel(t, false)

	t.Run("vte", func(t *testing.T) {
		c := js.VTE.Config
		meth, err := NewVTE(m, x.Dense("vte.T"), c.V, VTEConfig{Rho: c.Rho})
		if err != nil {
			t.Fatal(err)
		}
		res, err := meth.StepViews(viewStream(t, c), len(c.Images), c.V)
		if err != nil {
			t.Fatal(err)
		}
		fxt.CompareDense(t, "vte.output", res.Logits, x.Dense("vte.output"), 1e-5, fxt.Rel)
		fxt.CompareInts(t, "vte.pred", res.Preds, x.Ints("vte.pred"))
	})
	t.Run("zero", func(t *testing.T) {
		c := js.Zero.Config
		meth, err := NewZero(m, x.Dense("zero.T"), c.V, ZeroConfig{Gamma: c.Gamma, Fallback: feature.ZeroFallbackAsCoded})
		if err != nil {
			t.Fatal(err)
		}
		res, err := meth.StepViews(viewStream(t, c), len(c.Images), c.V)
		if err != nil {
			t.Fatal(err)
		}
		// Votes are near one-hot: absolute 1e-5.
		fxt.CompareDense(t, "zero.output", res.Logits, x.Dense("zero.output"), 1e-5, fxt.Abs)
		fxt.CompareInts(t, "zero.pred", res.Preds, x.Ints("zero.pred"))
	})
	t.Run("dmn", func(t *testing.T) {
		c := js.DMN.Config
		cfg := feature.DMNConfig{Capacity: c.MemorySize, Beta: c.Beta, SelectionP: c.SelectionP, Weight: c.WeightMem}
		meth, err := NewDMN(m, x.Dense("dmn.T"), c.V, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// One image at a time, as the code streams them; the memory
		// carries from one to the next.
		px := viewStream(t, c)
		per := len(px) / len(c.Images)
		var preds []int
		var final []float64
		for i := range c.Images {
			res, err := meth.StepViews(px[i*per:(i+1)*per], 1, c.V)
			if err != nil {
				t.Fatal(err)
			}
			preds = append(preds, res.Preds...)
			final = append(final, res.Logits.RawMatrix().Data...)
		}
		fxt.Compare(t, "dmn.final", final, x.Vec("dmn.final"), 1e-5, fxt.Rel)
		fxt.CompareInts(t, "dmn.pred", preds, x.Ints("dmn.pred"))
	})
}
