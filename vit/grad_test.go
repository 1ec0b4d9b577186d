package vit

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/weights"
)

// Gradient tolerance: 1e-4 relative to each tensor's max, the fixtures'
// suggested bound (PyTorch's fp32 gradients differ from fp64 by ≤9.1e-6;
// backward sums over 8·50 rows in a different order than ours).
const gradTol = 1e-4

// TestGradientsMatchPyTorch runs both losses of grads.safetensors — TENT's
// mean entropy of 100·cos(f, T) and the linear functional Σ f⊙R — and
// compares the gradients of every visual LayerNorm tensor and of the pixels.
func TestGradientsMatchPyTorch(t *testing.T) {
	ref, err := weights.Open(fixture.Path(t, "fixtures/grads.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	all, _ := pixels(t)
	// The batch is the rows of pixel_values that grads.json lists.
	var meta struct {
		Rows []int `json:"pixel_values_rows"`
	}
	raw, err := os.ReadFile(fixture.Path(t, "fixtures/grads.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatalf("grads.json: %v", err)
	}
	n, width := len(meta.Rows), all.Shape()[1]
	if _, gshape, err := ref.Float32("tent.grad.pixel_values"); err != nil || gshape[0] != n {
		t.Fatalf("tent.grad.pixel_values: shape %v (%v), grads.json lists %d rows", gshape, err, n)
	}
	var rows []float32
	for _, r := range meta.Rows {
		rows = append(rows, all.Data().F32()[r*width:(r+1)*width]...)
	}

	for _, loss := range []string{"tent", "linear"} {
		t.Run(loss, func(t *testing.T) {
			m := loadTiny(t, "clip-tiny.openai.safetensors", Options{})
			m.SetTrainable(true)
			x := smat.NewDense[float32](smat.WithShape(n, width), smat.WithBacking(append([]float32(nil), rows...)), smat.WithGrad(true))
			f := m.Forward(x, nil)
			switch loss {
			case "tent":
				txt, shape, err := ref.Float32("tent.text_features_normalized")
				if err != nil {
					t.Fatal(err)
				}
				T := smat.NewDense[float32](smat.WithShape(shape...), smat.WithBacking(txt))
				logits := autograd.Scale(autograd.MatMul(autograd.L2Normalize(f), T, false, true), 100)
				l := autograd.MeanEntropy(logits)
				want, _, _ := ref.Float32("tent.loss")
				if e := fixture.RelErr(l.Value().Data().F32(), want); e > forwardTol {
					t.Errorf("tent.loss relative error %.2e", e)
				}
				if err := ag.Backward(l); err != nil {
					t.Fatal(err)
				}
			case "linear":
				r, shape, err := ref.Float32("linear.R")
				if err != nil {
					t.Fatal(err)
				}
				f.AccGrad(smat.NewDense[float32](smat.WithShape(shape...), smat.WithBacking(r)))
				if err := ag.Backward(f); err != nil {
					t.Fatal(err)
				}
			}
			names := m.LayerNormNames()
			i := 0
			for _, ln := range m.LayerNorms() {
				for _, p := range ln.Parameters() {
					name := loss + ".grad." + names[i]
					i++
					want, _, err := ref.Float32(name)
					if err != nil {
						t.Fatal(err)
					}
					if p.Grad() == nil {
						t.Fatalf("%s: no gradient", name)
					}
					fixture.CheckRelErr(t, name, p.Grad().Data().F32(), want, gradTol)
				}
			}
			if want, _, err := ref.Float32(loss + ".grad.pixel_values"); err == nil {
				fixture.CheckRelErr(t, loss+".grad.pixel_values", x.Grad().Data().F32(), want, gradTol)
			}
		})
	}
}
