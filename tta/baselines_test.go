package tta

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
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

func TestTentFixture(t *testing.T) {
	x := openFixture(t, "fixtures/baselines.safetensors")
	text := x.dense("T")
	scale := logitScale(t)
	for k := range x.batches("tent.b", "F") {
		b := fmt.Sprintf("tent.b%d.", k)
		res, err := Tent(x.dense(b+"F"), text, scale)
		if err != nil {
			t.Fatal(err)
		}
		compareDense(t, b+"logits", res.Logits, x.dense(b+"logits"), baseTol, relTol)
		compareInts(t, b+"preds", res.Preds, x.ints(b+"preds"))
		compare(t, b+"loss", []float64{res.Loss}, []float64{x.scalar(b + "loss")}, baseTol, relTol)
		compareDense(t, b+"dL_dF", res.DLdF, x.dense(b+"dL_dF"), baseTol, relTol)
	}
}

func TestBATCLIPFixture(t *testing.T) {
	x := openFixture(t, "fixtures/baselines.safetensors")
	text := x.dense("T")
	scale := logitScale(t)
	for k := range x.batches("batclip.b", "F") {
		b := fmt.Sprintf("batclip.b%d.", k)
		res, err := BATCLIP(x.dense(b+"F"), text, scale)
		if err != nil {
			t.Fatal(err)
		}
		compareDense(t, b+"logits", res.Logits, x.dense(b+"logits"), baseTol, relTol)
		compareInts(t, b+"preds", res.Preds, x.ints(b+"preds"))
		for _, s := range []struct {
			name string
			got  float64
		}{{"loss", res.Loss}, {"loss_entropy", res.Entropy}, {"loss_i2t", res.I2T}, {"loss_intermean", res.InterMean}} {
			// InterMean is a sum of 1−cos terms near 0 that torch forms in
			// fp32: compare it in absolute terms (1e-5).
			kind := relTol
			if s.name == "loss_intermean" {
				kind = absTol
			}
			compare(t, b+s.name, []float64{s.got}, []float64{x.scalar(b + s.name)}, baseTol, kind)
		}
		compareDense(t, b+"dL_dF", res.DLdF, x.dense(b+"dL_dF"), baseTol, relTol)
	}
}

func TestMINTFixture(t *testing.T) {
	var js baselinesJSON
	readJSON(t, "fixtures/baselines.json", &js)
	if js.Config.Mint.PriorN <= 0 {
		t.Fatalf("baselines.json: mint prior_n %v", js.Config.Mint.PriorN)
	}
	var scale float64
	if _, err := fmt.Sscanf(js.Config.Mint.Scale, "%g", &scale); err != nil {
		t.Fatalf("baselines.json: mint scale %q: %v", js.Config.Mint.Scale, err)
	}
	x := openFixture(t, "fixtures/baselines.safetensors")
	text := x.dense("T")
	c, d := text.Dims()
	m, err := NewMINT(c, d, scale, js.Config.Mint.PriorN)
	if err != nil {
		t.Fatal(err)
	}
	for k := range x.batches("mint.b", "pre_F") {
		b := fmt.Sprintf("mint.b%d.", k)
		loss, err := m.Loss(x.dense(b+"pre_F"), text)
		if err != nil {
			t.Fatal(err)
		}
		compareInts(t, b+"pre_preds", loss.Preds, x.ints(b+"pre_preds"))
		sums, n := m.ClassSums()
		compareDense(t, b+"pre_class_sums", sums, x.dense(b+"pre_class_sums"), baseTol, relTol)
		compare(t, b+"pre_class_n", n, x.vec(b+"pre_class_n"), 0, absTol)
		compare(t, b+"loss", []float64{loss.Loss}, []float64{x.scalar(b + "loss")}, baseTol, relTol)
		compareDense(t, b+"dL_dFn", loss.DLdFn, x.dense(b+"dL_dFn"), baseTol, relTol)

		pred, err := m.Predict(x.dense(b+"post_F"), text)
		if err != nil {
			t.Fatal(err)
		}
		compareInts(t, b+"post_preds", pred.PostPreds, x.ints(b+"post_preds"))
		compare(t, b+"ratio", []float64{pred.Ratio}, []float64{x.scalar(b + "ratio")}, 1e-15, relTol)
		compareDense(t, b+"mixed_weights", pred.Weights, x.dense(b+"mixed_weights"), baseTol, relTol)
		compareDense(t, b+"logits", pred.Logits, x.dense(b+"logits"), baseTol, relTol)
		compareInts(t, b+"preds", pred.Preds, x.ints(b+"preds"))
	}
	m.Reset()
	if sums, n := m.ClassSums(); mat.Sum(sums) != 0 || n[0] != 0 {
		t.Error("Reset left class sums")
	}
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
	tent, _ := Tent(f, text, 10)
	gradCheck(t, "tent", f, func(f *mat.Dense) float64 { r, _ := Tent(f, text, 10); return r.Loss }, tent.DLdF, 1e-6, 1e-6)
	bc, _ := BATCLIP(f, text, 10)
	t.Logf("batclip random problem: %d classes predicted", len(distinct(bc.Preds)))
	if len(distinct(bc.Preds)) < 2 {
		t.Fatal("random problem predicts one class: InterMean untested")
	}
	gradCheck(t, "batclip", f, func(f *mat.Dense) float64 { r, _ := BATCLIP(f, text, 10); return r.Loss }, bc.DLdF, 1e-6, 1e-6)

	// MINT: with the cumulative means held fixed (they are detached), the loss
	// is a function of Fn, then F.
	m, _ := NewMINT(c, d, 100, 10000)
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
