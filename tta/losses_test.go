package tta

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// TestStageBFixture checks stage B of every batch from the stored F2: Z,
// logits_proj, pseudo-labels, L_mint, dL/dZ and dL/dF2; and stage C's head
// from F3: logits and predictions.
func TestStageBFixture(t *testing.T) {
	cfg := readSubTTAConfig(t)
	if cfg.LossType != "mint" {
		t.Fatalf("fixture loss_type %q: this test checks the mint loss", cfg.LossType)
	}
	for _, file := range subttaFiles {
		t.Run(file, func(t *testing.T) {
			x := openFixture(t, file)
			tol := tolsFor(file)
			ts := textSubspaceFrom(t, x, cfg)
			text := x.dense("text.T")
			textN, _ := NormalizeRows(text)
			logitScale := x.scalar("logit_scale_exp")
			for k := range x.Batches("b", "F2") {
				b := fmt.Sprintf("b%d.", k)
				proj, err := Project(x.dense(b+"F2"), ts.Projector, 0)
				if err != nil {
					t.Fatal(err)
				}
				compareDense(t, b+"Z", proj.Z, x.dense(b+"Z"), tol.forward, relTol)
				logits := Logits(proj.Z, textN, logitScale)
				compareDense(t, b+"logits_proj", logits, x.dense(b+"logits_proj"), tol.forward, relTol)
				labels := Argmax(logits)
				compareInts(t, b+"pseudo_labels", labels, x.ints(b+"pseudo_labels"))
				loss, dz, err := BetweenClassScatterLoss(proj.Z, labels)
				if err != nil {
					t.Fatal(err)
				}
				compare(t, b+"L_mint", []float64{loss}, []float64{x.scalar(b + "L_mint")}, tol.loss, relTol)
				compareDense(t, b+"dL_dZ", dz, x.dense(b+"dL_dZ"), tol.forward, relTol)
				compareDense(t, b+"dL_dF2", proj.Backward(dz), x.dense(b+"dL_dF2"), tol.forward, relTol)

				headLogits, preds := Head(x.dense(b+"F3"), text, logitScale)
				compareDense(t, b+"logits (head)", headLogits, x.dense(b+"logits"), tol.forward, relTol)
				compareInts(t, b+"preds", preds, x.ints(b+"preds"))
			}
		})
	}
}

// TestStageBGradCheck compares every stage-B gradient with float64 central
// differences (h = 1e-6; tolerance 1e-6 relative to the max).
func TestStageBGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const b, d, c = 7, 10, 6
	tm, _ := NormalizeRows(randDense(rng, c, d, 1))
	ts, err := NewTextSubspace(tm, SubspaceOptions{Rank: 4})
	if err != nil {
		t.Fatal(err)
	}
	f := randDense(rng, b, d, 1)
	labels := []int{0, 2, 2, 5, 0, 2, 1}
	const h, tol = 1e-6, 1e-6

	// Z = normalize(F·P (+λF)) followed by a fixed random linear read-out.
	w := randDense(rng, b, d, 1)
	for _, soft := range []float64{0, 0.3} {
		pr, _ := Project(f, ts.Projector, soft)
		lin := func(z *mat.Dense) float64 { return mat.Sum(elemMul(z, w)) }
		gradCheck(t, fmt.Sprintf("projection soft=%v", soft), f, func(f *mat.Dense) float64 {
			p, _ := Project(f, ts.Projector, soft)
			return lin(p.Z)
		}, pr.Backward(w), h, tol)
	}

	z, _ := NormalizeRows(f)
	losses := []struct {
		name string
		fn   func(*mat.Dense) (float64, *mat.Dense)
	}{
		{"mint", func(z *mat.Dense) (float64, *mat.Dense) { l, g, _ := BetweenClassScatterLoss(z, labels); return l, g }},
		{"class-mean cosine (batclip)", func(z *mat.Dense) (float64, *mat.Dense) {
			l, g, _ := ClassMeanCosineLoss(z, labels)
			return l, g
		}},
		{"feature entropy (tent)", func(z *mat.Dense) (float64, *mat.Dense) { return FeatureEntropyLoss(z, 3) }},
	}
	for _, l := range losses {
		_, g := l.fn(z)
		gradCheck(t, l.name, z, func(z *mat.Dense) float64 { v, _ := l.fn(z); return v }, g, h, tol)
	}

	// The whole chain F → Z → mint loss, as the lead wires it.
	pr, _ := Project(f, ts.Projector, 0)
	_, dz, _ := BetweenClassScatterLoss(pr.Z, labels)
	gradCheck(t, "F → Z → mint", f, func(f *mat.Dense) float64 {
		p, _ := Project(f, ts.Projector, 0)
		l, _, _ := BetweenClassScatterLoss(p.Z, labels)
		return l
	}, pr.Backward(dz), h, tol)
}

// TestBetweenClassScatterLossIdentity: the code's form mean‖z−μ_y‖² −
// mean‖z−z̄‖² equals −(1/B)Σ_c n_c‖μ_c − z̄‖², and a single class gives
// exactly 0.
func TestBetweenClassScatterLossIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	z := randDense(rng, 9, 5, 1)
	labels := []int{3, 1, 3, 3, 7, 1, 7, 7, 7}
	got, _, _ := BetweenClassScatterLoss(z, labels)
	zbar := colMean(z, nil)
	classes, rows := classGroups(labels)
	var want float64
	for _, c := range classes {
		mu := colMean(z, rows[c])
		for j := range mu {
			want -= float64(len(rows[c])) * (mu[j] - zbar[j]) * (mu[j] - zbar[j])
		}
	}
	want /= 9
	compare(t, "mint loss identity", []float64{got}, []float64{want}, 1e-14, relTol)
	for _, fn := range []func(mat.Matrix, []int) (float64, *mat.Dense, error){BetweenClassScatterLoss, ClassMeanCosineLoss} {
		l, g, err := fn(z, make([]int, 9))
		if err != nil || l != 0 || mat.Sum(g) != 0 || mat.Norm(g, 2) != 0 {
			t.Errorf("one class: loss %v, |grad| %v, err %v", l, mat.Norm(g, 2), err)
		}
		if _, _, err := fn(z, labels[:3]); err == nil {
			t.Error("too few labels: no error")
		}
	}
}

func TestParseSubTTALoss(t *testing.T) {
	for _, s := range []string{"mint", "batclip", "tent", "source"} {
		l, err := ParseSubTTALoss(s)
		if err != nil || l.String() != s {
			t.Errorf("%q: %v %v", s, l, err)
		}
	}
	if _, err := ParseSubTTALoss("entropy"); err == nil {
		t.Error("unknown loss: no error")
	}
}

func elemMul(a, b mat.Matrix) *mat.Dense {
	var out mat.Dense
	out.MulElem(a, b)
	return &out
}
