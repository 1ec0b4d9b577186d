package tta

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
)

// Baseline fixtures are fp32 torch; our float64 computation is held to the
// README's forward tolerance (1e-5 relative to the max of each tensor) for
// logits, losses and feature gradients.
const baseTol = 1e-5

type baselinesJSON struct {
	Config struct {
		Mint struct {
			PriorN float64 `json:"prior_n"`
			Scale  string  `json:"scale"`
		} `json:"mint"`
	} `json:"config"`
}

// logitScale reads exp(logit_scale) of the fixture model from
// subtta.safetensors; the baselines file, made with the same model, does not
// store it.
func logitScale(t *testing.T) float64 {
	t.Helper()
	return openFixture(t, "fixtures/subtta.safetensors").scalar("logit_scale_exp")
}

// TestBaselineGradCheck: TENT and BATCLIP feature gradients against float64
// central differences (h = 1e-6, tolerance 1e-6 relative to the max). The
// pseudo-labels come from argmax inside the loss; h is far too small to flip
// them on these random features.
func TestBaselineGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const b, d, c = 8, 10, 5
	text, _ := NormalizeRows(randDense(rng, c, d, 1))
	f := randDense(rng, b, d, 1)
	tent, _ := TentLoss(f, text, 10)
	gradCheck(t, "tent", f, func(f *mat.Dense) float64 { r, _ := TentLoss(f, text, 10); return r.Loss }, tent.DLdF, 1e-6, 1e-6)
	bc, _ := BATCLIPLoss(f, text, 10)
	t.Logf("batclip random problem: %d classes predicted", len(distinct(bc.Preds)))
	if len(distinct(bc.Preds)) < 2 {
		t.Fatal("random problem predicts one class: InterMean untested")
	}
	gradCheck(t, "batclip", f, func(f *mat.Dense) float64 { r, _ := BATCLIPLoss(f, text, 10); return r.Loss }, bc.DLdF, 1e-6, 1e-6)

	// MINT: with the cumulative means held fixed (they are detached), the loss
	// is a function of Fn, then F.
	m, _ := NewMINTState(c, d, 100, 10000)
	m.Loss(randDense(rng, b, d, 1), text) // some history
	mint, _ := m.Loss(f, text)
	sums, n := m.ClassSums()
	frozen := func(f *mat.Dense) float64 {
		fn, _ := NormalizeRows(f)
		mu := make([]float64, d)
		var tot float64
		for k := range c {
			tot += n[k]
			for j := range d {
				mu[j] += sums.At(k, j)
			}
		}
		scale(mu, 1/tot)
		classes, rows := classGroups(mint.Preds)
		var l float64
		for i, y := range mint.Preds {
			w := 1 / (float64(len(classes)) * float64(len(rows[y])))
			for j := range d {
				x, my := fn.At(i, j), sums.At(y, j)/n[y]
				l -= w * ((x-mu[j])*(x-mu[j]) - (x-my)*(x-my))
			}
		}
		return l
	}
	gradCheck(t, "mint (means frozen)", f, frozen, mint.DLdF, 1e-6, 1e-6)
}

func distinct(a []int) map[int]bool {
	m := map[int]bool{}
	for _, v := range a {
		m[v] = true
	}
	return m
}

// TestBaselinesEndToEnd runs TENT, BATCLIP and MINT (SubTTA-repo variants)
// through the fp32 model over every batch of baselines.safetensors from the
// initial weights: features and logits 1e-5 relative, LayerNorm gradients
// 1e-4, parameters after each step 1e-6 absolute (README: 1.2e-7 between
// thread counts).
func TestBaselinesEndToEnd(t *testing.T) {
	var js struct {
		Config map[string]fixturefile.Optimizer `json:"config"`
	}
	fixturefile.ReadJSON(t, "fixtures/baselines.json", &js)
	var bj baselinesJSON
	fixturefile.ReadJSON(t, "fixtures/baselines.json", &bj)
	x := openFixture(t, "fixtures/baselines.safetensors")
	head := x.dense("T")
	for _, name := range []string{"tent", "batclip", "mint"} {
		t.Run(name, func(t *testing.T) {
			m := tinyModel(t, false)
			opt := optim.Config{Adam: js.Config[name].Adam(t)}
			var meth Method
			var err error
			switch name {
			case "tent":
				meth, err = NewTENT(m, head, opt)
			case "batclip":
				meth, err = NewBATCLIP(m, head, opt)
			case "mint":
				var scale float64
				fmt.Sscanf(bj.Config.Mint.Scale, "%g", &scale)
				meth, err = NewMINT(m, head, MINTConfig{Optimizer: opt, Scale: scale, PriorN: bj.Config.Mint.PriorN})
			}
			if err != nil {
				t.Fatal(err)
			}
			var tr trainer
			switch mm := meth.(type) {
			case *TENT:
				tr = mm.tr
			case *BATCLIP:
				tr = mm.tr
			case *MINT:
				tr = mm.tr
			}
			names := tr.names()
			first := "F"
			if name == "mint" {
				first = "pre_F"
			}
			bsz, _ := x.dense(name + ".b0." + first).Dims()
			px := ttaPixels(t, bsz)
			for k := range x.Batches(name+".b", first) {
				b := fmt.Sprintf("%s.b%d.", name, k)
				res, err := meth.Step(px[k], bsz)
				if err != nil {
					t.Fatal(err)
				}
				if res.Diag.Steps != 1 || res.Diag.Skipped != 0 {
					t.Errorf("%s: %d steps, %d skipped", b, res.Diag.Steps, res.Diag.Skipped)
				}
				compareDense(t, b+"logits", res.Logits, x.dense(b+"logits"), 1e-5, relTol)
				compareInts(t, b+"preds", res.Preds, x.ints(b+"preds"))
				switch name {
				case "tent", "batclip":
					compareDense(t, b+"F", res.Features, x.dense(b+"F"), 1e-5, relTol)
					compare(t, b+"loss", []float64{res.Diag.Losses[name]}, []float64{x.scalar(b + "loss")}, 1e-5, relTol)
					compareParams(t, "", tr.grads(), names, x, b+"grad.", 1e-4, relTol, nil)
					compareParams(t, "", tr.values(), names, x, b+"param.", 1e-6, absTol, nil)
				case "mint":
					mm := meth.(*MINT)
					compareInts(t, b+"pre_preds", res.Diag.PseudoLabels, x.ints(b+"pre_preds"))
					compare(t, b+"loss", []float64{res.Diag.Losses["mint"]}, []float64{x.scalar(b + "loss")}, 1e-5, relTol)
					// The gradients of this batch stay on the tensors after
					// the step; the parameters are back at the source.
					compareParams(t, "", tr.grads(), names, x, b+"batch_grad.", 1e-4, relTol, nil)
					agg := make([][]float64, len(names))
					for i, p := range names {
						agg[i] = mm.agg.MeanFloat64(p)
					}
					compareParams(t, "", agg, names, x, b+"agg_grad.", 1e-4, relTol, nil)
					compareParams(t, "", tr.values(), names, x, "init.param.", 0, absTol, nil)
					compareDense(t, b+"post_F", res.Features, x.dense(b+"post_F"), 1e-5, relTol)
				}
			}
		})
	}
}
