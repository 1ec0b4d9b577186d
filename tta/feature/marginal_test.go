package feature

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestMarginalEntropyTTA2 compares the loss, log p̄ and ∂L/∂logits with
// TPT's (selected views) and MEMO's (all views) on their stored logits.
// Tolerance 1e-5 relative (to each tensor's max) for all three: the inputs
// are the same fp32 logits, so only torch's fp32 arithmetic differs (the
// README reports the closed-form gradient within 2e-6 of tpt.dL_dlogits).
func TestMarginalEntropyTTA2(t *testing.T) {
	x, cfg := readTTA2(t)
	for k, img := range cfg.Config.TPT.Images {
		what := fmt.Sprintf("tpt image %d", img)
		r, err := MarginalEntropy(sliceDense(x, "tpt.logits", k), sliceInts(x, "tpt.selected", k))
		if err != nil {
			t.Fatal(err)
		}
		loss, _ := slice(x, "tpt.loss", k)
		fxt.Compare(t, what+" loss", []float64{r.Loss}, loss, 1e-5, fxt.Rel)
		fxt.CompareDense(t, what+" dL/dlogits", r.DLdLogits, sliceDense(x, "tpt.dL_dlogits", k), 1e-5, fxt.Rel)
	}
	info, _ := x.Info("memo.logits")
	for k := range info.Shape[0] {
		what := fmt.Sprintf("memo image %d", k)
		r, err := MarginalEntropy(sliceDense(x, "memo.logits", k), nil)
		if err != nil {
			t.Fatal(err)
		}
		loss, _ := slice(x, "memo.loss", k)
		fxt.Compare(t, what+" loss", []float64{r.Loss}, loss, 1e-5, fxt.Rel)
		ell, _ := slice(x, "memo.avg_log_probs", k)
		fxt.Compare(t, what+" log p̄", r.LogMean, ell, 1e-5, fxt.Rel)
		fxt.CompareDense(t, what+" dL/dlogits", r.DLdLogits, sliceDense(x, "memo.dL_dlogits", k), 1e-5, fxt.Rel)
	}
}

// TestMarginalEntropyLossTTA2 recomputes MEMO's view logits from the
// stored unnormalised features (memo.image_features) and the head text.T,
// and its loss from them: 1e-5 relative to the max, as for every fp32
// forward tensor against our float64 on the same inputs.
func TestMarginalEntropyLossTTA2(t *testing.T) {
	x, _ := readTTA2(t)
	head := x.Dense("text.T")
	scale := x.Scalar("logit_scale_exp")
	info, _ := x.Info("memo.image_features")
	for k := range info.Shape[0] {
		what := fmt.Sprintf("memo image %d", k)
		r, err := MarginalEntropyLoss(sliceDense(x, "memo.image_features", k), head, scale, nil)
		if err != nil {
			t.Fatal(err)
		}
		fxt.CompareDense(t, what+" logits from features", r.Logits, sliceDense(x, "memo.logits", k), 1e-5, fxt.Rel)
		loss, _ := slice(x, "memo.loss", k)
		fxt.Compare(t, what+" loss from features", []float64{r.Marginal.Loss}, loss, 1e-5, fxt.Rel)
	}
}

// TestMarginalEntropyLossGradCheck: ∂L/∂F through the logits and the
// normalisation against float64 central differences (h = 1e-6, tolerance
// 1e-6 relative to the max, as for the other feature losses).
func TestMarginalEntropyLossGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 29))
	const v, d, c = 6, 8, 5
	text, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	f := fxt.RandDense(rng, v, d, 1)
	for _, rows := range [][]int{nil, {3, 0}} {
		r, err := MarginalEntropyLoss(f, text, 10, rows)
		if err != nil {
			t.Fatal(err)
		}
		loss := func(f *mat.Dense) float64 {
			r, err := MarginalEntropyLoss(f, text, 10, rows)
			if err != nil {
				t.Fatal(err)
			}
			return r.Marginal.Loss
		}
		fxt.GradCheck(t, fmt.Sprintf("marginal entropy dF rows %v", rows), f, loss, r.DLdF, 1e-6, 1e-6)
	}
	if _, err := MarginalEntropyLoss(f, mat.NewDense(c, d+1, nil), 10, nil); err == nil {
		t.Error("width mismatch: no error")
	}
}

// TestMarginalEntropyGradCheck: ∂H/∂z against float64 central differences
// (h = 1e-6; truncation O(h²) and rounding O(1e-16/h) are both far below
// the 1e-6 relative tolerance) on random logits, for all views, a subset,
// a subset with a repeated row, and logits at CLIP's scale (sd 5).
func TestMarginalEntropyGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 6))
	tests := []struct {
		name string
		sd   float64
		rows []int
	}{
		{"all views", 1, nil},
		{"selected", 1, []int{4, 1, 6}},
		{"repeated row", 1, []int{2, 2, 5}},
		{"CLIP-scale logits", 5, []int{0, 3}},
	}
	for _, tc := range tests {
		z := fxt.RandDense(rng, 7, 5, tc.sd)
		r, err := MarginalEntropy(z, tc.rows)
		if err != nil {
			t.Fatal(err)
		}
		f := func(z *mat.Dense) float64 {
			r, err := MarginalEntropy(z, tc.rows)
			if err != nil {
				t.Fatal(err)
			}
			return r.Loss
		}
		fxt.GradCheck(t, "marginal entropy "+tc.name, z, f, r.DLdLogits, 1e-6, 1e-6)
	}
}

// TestMarginalEntropyEdges: saturated and −Inf logits give finite values
// (log space and the finfo.min clamp), a class no view can pick adds
// nothing, and bad input is an error.
func TestMarginalEntropyEdges(t *testing.T) {
	inf := math.Inf(1)
	// Two views, each certain of a different class; class 2 impossible.
	z := mat.NewDense(2, 3, []float64{0, -1e4, -inf, -1e4, 0, -inf})
	r, err := MarginalEntropy(z, nil)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Loss-math.Log(2)) > 1e-15 {
		t.Errorf("two certain, disagreeing views: H = %v, want log 2", r.Loss)
	}
	if r.LogMean[2] != -math.MaxFloat64 {
		t.Errorf("impossible class: log p̄ = %v, want the clamp −MaxFloat64", r.LogMean[2])
	}
	for _, v := range r.DLdLogits.RawMatrix().Data {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("non-finite gradient %v", mat.Formatted(r.DLdLogits))
		}
	}
	bad := []struct {
		name string
		z    *mat.Dense
		rows []int
		err  error
	}{
		{"no rows", mat.NewDense(2, 2, nil), []int{}, ErrEmptySelection},
		{"row out of range", mat.NewDense(2, 2, nil), []int{2}, errAny},
		{"NaN", mat.NewDense(1, 2, []float64{0, math.NaN()}), nil, errAny},
		{"+Inf", mat.NewDense(1, 2, []float64{0, inf}), nil, errAny},
	}
	for _, b := range bad {
		if _, err := MarginalEntropy(b.z, b.rows); err == nil || b.err != errAny && !errors.Is(err, b.err) {
			t.Errorf("%s: err %v, want %v", b.name, err, b.err)
		}
	}
}
