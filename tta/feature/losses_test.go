package feature

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestStageBFixture checks stage B of every batch from the stored F2: Z,
// logits_proj, pseudo-labels, L_mint, dL/dZ and dL/dF2; and stage C's head
// from F3: logits and predictions.
func TestStageBFixture(t *testing.T) {
	cfg := fxt.ReadSubTTAConfig(t)
	if cfg.LossType != "mint" {
		t.Fatalf("fixture loss_type %q: this test checks the mint loss", cfg.LossType)
	}
	for _, file := range fxt.SubTTAFiles {
		t.Run(file, func(t *testing.T) {
			x := fxt.Open(t, file)
			tol := tolsFor(file)
			ts := textSubspaceFrom(t, x, cfg)
			text := x.Dense("text.T")
			textN, _ := NormalizeRows(text)
			logitScale := x.Scalar("logit_scale_exp")
			for k := range x.Batches("b", "F2") {
				b := fmt.Sprintf("b%d.", k)
				proj, err := Project(x.Dense(b+"F2"), ts.Projector, 0)
				if err != nil {
					t.Fatal(err)
				}
				fxt.CompareDense(t, b+"Z", proj.Z, x.Dense(b+"Z"), tol.forward, fxt.Rel)
				logits := Logits(proj.Z, textN, logitScale)
				fxt.CompareDense(t, b+"logits_proj", logits, x.Dense(b+"logits_proj"), tol.forward, fxt.Rel)
				labels := Argmax(logits)
				fxt.CompareInts(t, b+"pseudo_labels", labels, x.Ints(b+"pseudo_labels"))
				loss, dz, err := BetweenClassScatterLoss(proj.Z, labels)
				if err != nil {
					t.Fatal(err)
				}
				fxt.Compare(t, b+"L_mint", []float64{loss}, []float64{x.Scalar(b + "L_mint")}, tol.loss, fxt.Rel)
				fxt.CompareDense(t, b+"dL_dZ", dz, x.Dense(b+"dL_dZ"), tol.forward, fxt.Rel)
				df, err := proj.Backward(dz)
				if err != nil {
					t.Fatal(err)
				}
				fxt.CompareDense(t, b+"dL_dF2", df, x.Dense(b+"dL_dF2"), tol.forward, fxt.Rel)

				headLogits, preds := Classify(x.Dense(b+"F3"), text, logitScale)
				fxt.CompareDense(t, b+"logits (head)", headLogits, x.Dense(b+"logits"), tol.forward, fxt.Rel)
				fxt.CompareInts(t, b+"preds", preds, x.Ints(b+"preds"))
			}
		})
	}
}

// TestStageBGradCheck compares every stage-B gradient with float64 central
// differences (h = 1e-6; tolerance 1e-6 relative to the max).
func TestStageBGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const b, d, c = 7, 10, 6
	tm, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	ts, err := NewTextSubspace(tm, SubspaceOptions{Rank: 4})
	if err != nil {
		t.Fatal(err)
	}
	f := fxt.RandDense(rng, b, d, 1)
	labels := []int{0, 2, 2, 5, 0, 2, 1}
	const h, tol = 1e-6, 1e-6

	// Z = normalize(F·P (+λF)) followed by a fixed random linear read-out.
	w := fxt.RandDense(rng, b, d, 1)
	for _, soft := range []float64{0, 0.3} {
		pr, _ := Project(f, ts.Projector, soft)
		lin := func(z *mat.Dense) float64 { return mat.Sum(elemMul(z, w)) }
		fxt.GradCheck(t, fmt.Sprintf("projection soft=%v", soft), f, func(f *mat.Dense) float64 {
			p, _ := Project(f, ts.Projector, soft)
			return lin(p.Z)
		}, must(pr.Backward(w)), h, tol)
	}

	z, _ := NormalizeRows(f)
	losses := []struct {
		name string
		fn   func(*mat.Dense) (float64, *mat.Dense)
	}{
		{"mint", func(z *mat.Dense) (float64, *mat.Dense) {
			l, g, _ := BetweenClassScatterLoss(z, labels)
			return l, g
		}},
		{"class-mean cosine (batclip)", func(z *mat.Dense) (float64, *mat.Dense) {
			l, g, _ := ClassMeanCosineLoss(z, labels)
			return l, g
		}},
		{"feature entropy (tent)", func(z *mat.Dense) (float64, *mat.Dense) { return FeatureEntropyLoss(z, 3) }},
	}
	for _, l := range losses {
		_, g := l.fn(z)
		fxt.GradCheck(t, l.name, z, func(z *mat.Dense) float64 { v, _ := l.fn(z); return v }, g, h, tol)
	}

	// The whole chain F → Z → mint loss, as the lead wires it.
	pr, _ := Project(f, ts.Projector, 0)
	_, dz, _ := BetweenClassScatterLoss(pr.Z, labels)
	fxt.GradCheck(t, "F → Z → mint", f, func(f *mat.Dense) float64 {
		p, _ := Project(f, ts.Projector, 0)
		l, _, _ := BetweenClassScatterLoss(p.Z, labels)
		return l
	}, must(pr.Backward(dz)), h, tol)
}

// TestBetweenClassScatterLossIdentity: the code's form mean‖z−μ_y‖² −
// mean‖z−z̄‖² equals −(1/B)Σ_c n_c‖μ_c − z̄‖², and a single class gives
// exactly 0.
func TestBetweenClassScatterLossIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	z := fxt.RandDense(rng, 9, 5, 1)
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
	fxt.Compare(t, "mint loss identity", []float64{got}, []float64{want}, 1e-14, fxt.Rel)
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

func elemMul(a, b mat.Matrix) *mat.Dense {
	var out mat.Dense
	out.MulElem(a, b)
	return &out
}

// must returns the gradient of a Backward that cannot fail on the CPU.
func must(g *mat.Dense, err error) *mat.Dense {
	if err != nil {
		panic(err)
	}
	return g
}
