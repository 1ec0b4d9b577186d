package tta

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
	"gonum.org/v1/gonum/mat"
)

// TestStatefulContinues saves every method after two batches, restores the
// bytes into a freshly built method, and checks that the next two batches
// give the logits of the method that was never interrupted, bit for bit.
func TestStatefulContinues(t *testing.T) {
	tests := []struct {
		method string
		f64    bool
		bank   int
	}{
		{"source", false, 0}, {"tent", false, 0}, {"batclip", false, 0}, {"mint", false, 0},
		{"mint-official", false, 0}, {"tda", false, 0}, {"watt-s", false, 0}, {"ecalp", false, 0}, {"rotta", false, 0},
		{"subtta-s", false, 0}, {"subtta-t", false, 0}, {"subtta-b", false, 0}, {"subtta-m", false, 0},
		{"subtta-m", false, 6}, {"subtta-m", true, 0},
	}
	for _, tc := range tests {
		name := tc.method
		if tc.f64 {
			name += "/float64"
		}
		if tc.bank > 0 {
			name += "/bank"
		}
		t.Run(name, func(t *testing.T) {
			m := fxtmodel.TinyModel(t, tc.f64)
			rng := rand.New(rand.NewPCG(5, 6))
			head, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
			var th []mat.Matrix
			dataset := "cifar10-c"
			if tc.method == "mint-official" {
				dataset = "cifar100-c" // the official code has no CIFAR-10-C setting
			}
			p, err := Lookup(dataset, tc.method)
			if err != nil {
				t.Fatal(err)
			}
			if p.PerTemplateHeads {
				for range WATTTemplates {
					h, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
					th = append(th, h)
				}
				editConfig(&p, func(w *WATTConfig) { w.Steps, w.Rounds = 1, 1 })
			}
			editConfig(&p, func(c *SubTTAConfig) { c.BankSize = tc.bank })
			// RoTTA updates every 3 images, so that the saved state holds
			// a moved teacher, a stepped optimizer and a memory.
			editConfig(&p, func(c *RoTTAConfig) { c.UpdateEvery = 3 })
			var batches [][]float32
			for range 4 {
				batches = append(batches, randPixels(rng, 4, m.Config.Vision.ImageSize))
			}
			step := func(meth Method, px []float32) []float64 {
				t.Helper()
				res, err := meth.Step(px, 4)
				if err != nil {
					t.Fatal(err)
				}
				return res.Logits.RawMatrix().Data
			}

			a, err := p.New(m, Heads{Head: head, PerTemplate: th})
			if err != nil {
				t.Fatal(err)
			}
			step(a, batches[0])
			step(a, batches[1])
			saved, err := a.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			want := [][]float64{step(a, batches[2]), step(a, batches[3])}
			// Reset puts the source LayerNorm values back into the model,
			// which b then takes as its source.
			if err := a.Reset(); err != nil {
				t.Fatal(err)
			}

			b, err := p.New(m, Heads{Head: head, PerTemplate: th})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.UnmarshalBinary(saved); err != nil {
				t.Fatal(err)
			}
			for i, px := range batches[2:] {
				if got := step(b, px); !slices.Equal(got, want[i]) {
					t.Fatalf("batch %d after the restore: logits %v, uninterrupted %v", 2+i, got[:3], want[i][:3])
				}
			}
		})
	}
}

// TestStatefulRefuses restores bytes that do not fit and checks that the
// method reports it, naming the cause, and is left as it was.
func TestStatefulRefuses(t *testing.T) {
	m := fxtmodel.TinyModel(t, false)
	rng := rand.New(rand.NewPCG(7, 8))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
	px := randPixels(rng, 4, m.Config.Vision.ImageSize)
	newMethod := func(method string) Method {
		t.Helper()
		p, err := Lookup("cifar10-c", method)
		if err != nil {
			t.Fatal(err)
		}
		meth, err := p.New(m, Heads{Head: head})
		if err != nil {
			t.Fatal(err)
		}
		return meth
	}
	tent := newMethod("tent")
	if _, err := tent.Step(px, 4); err != nil {
		t.Fatal(err)
	}
	tentState, _ := tent.MarshalBinary()
	if err := tent.Reset(); err != nil {
		t.Fatal(err)
	}
	sub := newMethod("subtta-m")
	before, _ := sub.MarshalBinary()
	head5, _ := feature.NormalizeRows(fxt.RandDense(rng, 5, m.Config.EmbedDim, 1))
	mint10, mint5 := newMethod("mint"), func() Method {
		p, _ := Lookup("cifar10-c", "mint")
		meth, err := p.New(m, Heads{Head: head5})
		if err != nil {
			t.Fatal(err)
		}
		return meth
	}()
	if _, err := mint10.Step(px, 4); err != nil {
		t.Fatal(err)
	}
	mintState, _ := mint10.MarshalBinary()
	if err := mint10.Reset(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		into Method
		data []byte
		want string
	}{
		{"other method", sub, tentState, "saved by tent"},
		{"garbage", sub, []byte("not a state"), "not a saved method state"},
		{"truncated", sub, before[:len(before)/2], "not a saved method state"},
		{"other head", mint5, mintState, "do not fit 5 classes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, _ := tc.into.MarshalBinary()
			err := tc.into.UnmarshalBinary(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if after, _ := tc.into.MarshalBinary(); !slices.Equal(after, snap) {
				t.Error("a refused restore changed the method")
			}
		})
	}
}
