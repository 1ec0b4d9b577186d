package tta

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// unheld is a Model whose vision tower reads a fresh copy of its images
// at every pass, so that no pass reads a held tensor: a method built on it
// uploads its batch at each pass, as the methods did before they held it.
type unheld struct{ Model }

func (u unheld) ImageFeatures(x smat.Tensor) smat.Tensor {
	return u.Model.ImageFeatures(x.(smat.Matrix).Clone())
}

// wideFeatures is a Model whose vision tower runs (reading its images
// through the seam) and then returns features one column too wide, so
// that the step fails after its first pass.
type wideFeatures struct{ Model }

func (w wideFeatures) ImageFeatures(x smat.Tensor) smat.Tensor {
	f := w.Model.ImageFeatures(x)
	s := f.Value().Shape()
	return smat.NewDense[float32](smat.WithShape(s[0], s[1]+1), smat.WithBacking(make([]float32, s[0]*(s[1]+1))))
}

// stepRecord is what a step returns and leaves behind, for a comparison
// bit for bit.
type stepRecord struct {
	logits, features []float64
	preds            []int
	losses           map[string]float64
	params           [][]float64
}

// TestMethodsHoldImages runs each method that encodes a batch in several
// passes of one step (MINT: the adaptation's and the prediction's; WATT:
// Rounds·templates·Steps adaptation passes and the prediction's) over its
// batches with a device set, counting the uploads of the batch's images
// (devicetest.Float64Host on kernel.Host, the only copies of their size):
// once a step, the copy freed when the step ends, where the same method on
// a model that copies the images at each pass (unheld, the way every pass
// wrapped the batch anew) uploads them once a pass. The logits, features,
// predictions, losses and LayerNorm values after each step equal, bit for
// bit, those of the unheld method on the same seam (the held copy holds
// the values a fresh upload would), and without a device (the hold does
// nothing there) those of the unheld method on the CPU. A step that fails
// after its first pass frees the copy too.
func TestMethodsHoldImages(t *testing.T) {
	type tcase struct {
		name   string
		passes int // the tower's passes a step
		// build returns the method on m and its trainer, and the batches.
		build   func(t *testing.T, m Model) (Method, trainer)
		batches func(t *testing.T) ([][]float32, int)
	}
	// MINT: the SubTTA repo's setting over the baselines fixture's head.
	bx := fxt.Open(t, "fixtures/baselines.safetensors")
	mintBsz, _ := bx.Dense("mint.b0.pre_F").Dims()
	mint := tcase{
		name:   "mint",
		passes: 2,
		build: func(t *testing.T, m Model) (Method, trainer) {
			meth, err := NewMINT(m, bx.Dense("T"), MINTConfig{Optimizer: optim.AdamL2(1e-2, 0.01), Scale: 100, PriorN: 10000})
			if err != nil {
				t.Fatal(err)
			}
			return meth, meth.tr
		},
		batches: func(t *testing.T) ([][]float32, int) { return fxtmodel.Pixels(t, mintBsz), mintBsz },
	}
	// WATT with two templates, two rounds of two steps: nine passes.
	watt := tcase{name: "watt", passes: 2*2*2 + 1}
	var wattOnce struct {
		heads []mat.Matrix
		text  mat.Matrix
		px    []float32
		cfg   WATTConfig
	}
	watt.batches = func(t *testing.T) ([][]float32, int) {
		w, heads, px, cfg := wattFixture(t, 2)
		wattOnce.heads, wattOnce.text, wattOnce.px, wattOnce.cfg = heads, w.text, px, cfg
		if cfg.Rounds*len(heads)*cfg.Steps+1 != 2*2*2+1 {
			t.Fatalf("wattFixture: %d rounds, %d heads, %d steps; the test counts 2, 2, 2", cfg.Rounds, len(heads), cfg.Steps)
		}
		// WATT starts every step from the source weights: two steps on
		// the batch, and one on its images in reverse order.
		n := 6
		per := len(px) / n
		rev := make([]float32, 0, len(px))
		for i := n - 1; i >= 0; i-- {
			rev = append(rev, px[i*per:(i+1)*per]...)
		}
		return [][]float32{px, px, rev}, n
	}
	watt.build = func(t *testing.T, m Model) (Method, trainer) {
		w, err := NewWATT(m, wattOnce.text, wattOnce.heads, wattOnce.cfg)
		if err != nil {
			t.Fatal(err)
		}
		return w, w.tr
	}

	for _, tc := range []tcase{mint, watt} {
		t.Run(tc.name, func(t *testing.T) {
			px, n := tc.batches(t)
			run := func(hold bool, d kernel.Device, count func(step int)) []stepRecord {
				var m Model = fxtmodel.TinyModel(t, false)
				if !hold {
					m = unheld{m}
				}
				meth, tr := tc.build(t, m)
				autograd.SetDevice(d)
				defer autograd.SetDevice(nil)
				var out []stepRecord
				for k, b := range px {
					res, err := meth.Step(b, n)
					if err != nil {
						t.Fatalf("step %d: %v", k, err)
					}
					if count != nil {
						count(k)
					}
					out = append(out, stepRecord{
						logits: res.Logits.RawMatrix().Data, features: res.Features.RawMatrix().Data,
						preds: res.Preds, losses: res.Diag.Losses, params: tr.values(),
					})
				}
				return out
			}
			counted := func(hold bool, want int) []stepRecord {
				dev := &imageCounter{Float64Host: &devicetest.Float64Host{Device: kernel.Host}, size: len(px[0])}
				return run(hold, dev, func(k int) {
					if dev.uploads != want*(k+1) {
						t.Errorf("hold %v, step %d: the images uploaded %d times in all, want %d a step", hold, k, dev.uploads, want)
					}
					if dev.live != 0 {
						t.Errorf("hold %v, step %d: %d buffers of the images' size live after the step, want 0", hold, k, dev.live)
					}
				})
			}
			held := counted(true, 1)
			unheldRun := counted(false, tc.passes)
			sameRecords(t, "on the device, held and unheld", held, unheldRun)
			sameRecords(t, "on the CPU, held and unheld", run(true, nil, nil), run(false, nil, nil))

			// A step that fails after its first pass still frees the copy.
			dev := &imageCounter{Float64Host: &devicetest.Float64Host{Device: kernel.Host}, size: len(px[0])}
			meth, _ := tc.build(t, wideFeatures{fxtmodel.TinyModel(t, false)})
			autograd.SetDevice(dev)
			_, err := meth.Step(px[0], n)
			autograd.SetDevice(nil)
			if err == nil {
				t.Fatal("a step on features one column too wide: no error")
			}
			if dev.uploads != 1 || dev.live != 0 {
				t.Errorf("a failed step: the images uploaded %d times, %d copies live after it; want 1 and 0", dev.uploads, dev.live)
			}
		})
	}
}

// sameRecords fails unless two runs' steps agree bit for bit.
func sameRecords(t *testing.T, what string, a, b []stepRecord) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d and %d steps", what, len(a), len(b))
	}
	for k := range a {
		at := fmt.Sprintf("%s, step %d", what, k)
		sameBits(t, at+", logits", a[k].logits, b[k].logits)
		sameBits(t, at+", features", a[k].features, b[k].features)
		if !slices.Equal(a[k].preds, b[k].preds) {
			t.Fatalf("%s, predictions: %v and %v", at, a[k].preds, b[k].preds)
		}
		keys := slices.Sorted(maps.Keys(a[k].losses))
		if !slices.Equal(keys, slices.Sorted(maps.Keys(b[k].losses))) {
			t.Fatalf("%s, losses: %v and %v", at, a[k].losses, b[k].losses)
		}
		for _, l := range keys {
			sameBits(t, at+", loss "+l, []float64{a[k].losses[l]}, []float64{b[k].losses[l]})
		}
		if len(a[k].params) != len(b[k].params) {
			t.Fatalf("%s: %d and %d parameters", at, len(a[k].params), len(b[k].params))
		}
		for i := range a[k].params {
			sameBits(t, fmt.Sprintf("%s, parameter %d", at, i), a[k].params[i], b[k].params[i])
		}
	}
}
