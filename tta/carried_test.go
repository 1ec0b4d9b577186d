package tta

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
	"gonum.org/v1/gonum/mat"
)

// TestCarriedIsAllThatSurvivesReset runs every method on a first domain,
// resets it and runs a second; a freshly built method given only the
// carried state (MarshalCarried after the first domain) must give the
// second domain's logits bit for bit. An evaluation that resumes, or a
// shard that starts, between two domains relies on it: whatever survives
// Reset and is not in the carried state would make the later domains
// depend on how the run was cut.
func TestCarriedIsAllThatSurvivesReset(t *testing.T) {
	for _, method := range []string{"source", "tent", "batclip", "mint", "mint-official", "tda", "watt-s", "ecalp",
		"rotta", "subtta-s", "subtta-t", "subtta-b", "subtta-m"} {
		t.Run(method, func(t *testing.T) {
			m := fxtmodel.TinyModel(t, false)
			rng := rand.New(rand.NewPCG(7, 8))
			head, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
			dataset := "cifar10-c"
			if method == "mint-official" {
				dataset = "cifar100-c"
			}
			p, err := Lookup(dataset, method)
			if err != nil {
				t.Fatal(err)
			}
			var th []mat.Matrix
			if p.PerTemplateHeads {
				for range WATTTemplates {
					h, _ := feature.NormalizeRows(fxt.RandDense(rng, 10, m.Config.EmbedDim, 1))
					th = append(th, h)
				}
				editConfig(&p, func(w *WATTConfig) { w.Steps, w.Rounds = 1, 1 })
			}
			// RoTTA updates (drawing augmentations) every 3 images.
			editConfig(&p, func(c *RoTTAConfig) { c.UpdateEvery = 3 })
			var first, second [][]float32
			for range 2 {
				first = append(first, randPixels(rng, 4, m.Config.Vision.ImageSize))
				second = append(second, randPixels(rng, 4, m.Config.Vision.ImageSize))
			}
			run := func(meth Method, batches [][]float32) [][]float64 {
				t.Helper()
				var out [][]float64
				for _, px := range batches {
					res, err := meth.Step(px, 4)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, slices.Clone(res.Logits.RawMatrix().Data))
				}
				return out
			}
			a, err := p.New(m, Heads{Head: head, PerTemplate: th})
			if err != nil {
				t.Fatal(err)
			}
			run(a, first)
			if err := a.Reset(); err != nil {
				t.Fatal(err)
			}
			carried, err := a.MarshalCarried()
			if err != nil {
				t.Fatal(err)
			}
			want := run(a, second)
			if err := a.Reset(); err != nil {
				t.Fatal(err)
			}

			b, err := p.New(m, Heads{Head: head, PerTemplate: th})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.UnmarshalCarried(carried); err != nil {
				t.Fatal(err)
			}
			if err := b.Reset(); err != nil {
				t.Fatal(err)
			}
			for i, got := range run(b, second) {
				if !slices.Equal(got, want[i]) {
					t.Fatalf("second domain, batch %d: from the carried state (%d bytes) logits %v, after the first domain %v", i, len(carried), got[:3], want[i][:3])
				}
			}
		})
	}
}
