package feature

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestZeroVoteTTA2 runs ZERO on every pool image from the stored
// encode_image features and ZERO's head (zero.T), then on the synthetic
// cases (cosines given, zero.synthetic.*), and compares with zero.*:
// cosines and probabilities at 1e-5 relative to the max, entropies at 1e-5
// relative (README tolerances, fp32 against our float64); the ordering, the
// view argmaxes, the ties, the tie-break, the votes, the output and the
// prediction exactly. Votes are exact only where every kept view's top-2
// gap is far above ε (one-hot in fp32 and float64 alike); the json gives
// that gap, and an image below 1e-4 has its votes compared at 1e-5 instead.
func TestZeroVoteTTA2(t *testing.T) {
	x, cfg := readTTA2(t)
	head := x.Dense("zero.T")
	scale := x.Scalar("logit_scale_exp")
	gamma := cfg.Config.Zero.Gamma
	if len(cfg.Zero.PerImage) != len(cfg.Config.Zero.Images) {
		t.Fatalf("zero.per_image has %d entries for images %v", len(cfg.Zero.PerImage), cfg.Config.Zero.Images)
	}
	for k, img := range cfg.Config.Zero.Images {
		what := fmt.Sprintf("zero image %d", img)
		fn, _ := NormalizeRows(poolFeatures(x, cfg, "views.image_features", img))
		cos := Logits(fn, head, 1)
		fxt.CompareDense(t, what+" cosines", cos, sliceDense(x, "zero.logits", k), 1e-5, fxt.Rel)
		checkZero(t, x, "zero.", k, what, cos, scale, gamma, cfg.Config.Zero.NKept, cfg.Zero.PerImage[k])
	}
	info, ok := x.Info("zero.synthetic.logits")
	if !ok {
		t.Fatal("no zero.synthetic.logits")
	}
	if info.Shape[0] != len(cfg.Zero.Synthetic) {
		t.Fatalf("zero.synthetic: %d cases, the json describes %d", info.Shape[0], len(cfg.Zero.Synthetic))
	}
	for k, zc := range cfg.Zero.Synthetic {
		what := fmt.Sprintf("zero synthetic case %d", k)
		checkZero(t, x, "zero.synthetic.", k, what, sliceDense(x, "zero.synthetic.logits", k), scale, gamma, len(zc.Kept), zc)
	}
}

// checkZero runs ZeroVote on case k of the tensors under prefix and checks
// it against them and the json's description zc.
func checkZero(t *testing.T, x *fxt.File, prefix string, k int, what string, cos mat.Matrix, scale, gamma float64, nKept int, zc zeroCase) {
	t.Helper()
	r, err := ZeroVote(cos, scale, gamma, ZeroFallbackAsCoded)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Selection.Kept) != nKept {
		t.Errorf("%s: kept %d views, config says %d", what, len(r.Selection.Kept), nKept)
	}
	fxt.CompareDense(t, what+" probs", r.Probs, sliceDense(x, prefix+"probs", k), 1e-5, fxt.Rel)
	want, _ := slice(x, prefix+"entropy", k)
	fxt.Compare(t, what+" entropy", r.Selection.Entropy, want, 1e-5, fxt.Rel)
	fxt.CompareInts(t, what+" sorted views", r.Selection.Order, sliceInts(x, prefix+"sorted_idx", k))
	fxt.CompareInts(t, what+" json sorted views", r.Selection.Order, zc.SortedIdx)
	fxt.CompareInts(t, what+" kept", r.Selection.Kept, zc.Kept)
	if x.Has(prefix + "view_argmax") {
		fxt.CompareInts(t, what+" view argmax", r.ViewArgmax, sliceInts(x, prefix+"view_argmax", k))
	}
	tol := 0.0 // exact: one-hot votes, integer sums
	if zc.MinTop2Gap < 1e-4 {
		tol = 1e-5
		t.Logf("%s: a kept view's top-2 gap %.2g: its vote is not one-hot; compared at %g", what, zc.MinTop2Gap, tol)
	}
	votes, _ := slice(x, prefix+"votes", k)
	fxt.Compare(t, what+" votes", r.Votes, votes, tol, fxt.Abs)
	output, _ := slice(x, prefix+"output", k)
	fxt.Compare(t, what+" output", r.Output, output, tol, fxt.Abs)
	fxt.CompareInts(t, what+" pred", []int{r.Pred}, sliceInts(x, prefix+"pred", k))
	fxt.CompareInts(t, what+" json pred", []int{r.Pred}, []int{zc.Pred})
	fxt.CompareInts(t, what+" ties", r.Ties, zc.Ties)
	if len(zc.Ties) < 2 {
		if r.TieBreak != ZeroNoTie {
			t.Errorf("%s: tie-break %v without a tie", what, r.TieBreak)
		}
		return
	}
	if zc.Discarded != nil {
		fxt.CompareInts(t, what+" discarded", r.Selection.Discarded, zc.Discarded)
		var am []int
		for _, v := range r.Selection.Discarded {
			am = append(am, r.ViewArgmax[v])
		}
		fxt.CompareInts(t, what+" discarded argmax", am, zc.DiscardedArgmax)
	}
	var rank, view int
	switch {
	case strings.HasPrefix(zc.ResolvedBy, "discarded view rank"):
		if _, err := fmt.Sscanf(zc.ResolvedBy, "discarded view rank %d (view %d)", &rank, &view); err != nil {
			t.Fatalf("%s: resolved_by %q: %v", what, zc.ResolvedBy, err)
		}
		if r.TieBreak != ZeroByDiscardedView || r.TieRank != rank || r.TieView != view {
			t.Errorf("%s: tie broken by %v rank %d view %d, want %q", what, r.TieBreak, r.TieRank, r.TieView, zc.ResolvedBy)
		}
		t.Logf("%s: tie %v broken by discarded view %d (rank %d) → class %d", what, r.Ties, r.TieView, r.TieRank, r.TieClass)
	case strings.HasPrefix(zc.ResolvedBy, "fallback"):
		if r.TieBreak != ZeroByFallback || r.TieView != r.Selection.Discarded[0] {
			t.Errorf("%s: tie broken by %v view %d, want the fallback on the first discarded view", what, r.TieBreak, r.TieView)
		}
		// The output above already checks the as-coded +1; the json's
		// fallback_returns and fallback_intended, where given, name both.
		intended, err := ZeroVote(cos, scale, gamma, ZeroFallbackTied)
		if err != nil {
			t.Fatal(err)
		}
		if zc.FallbackReturns != nil {
			fxt.CompareInts(t, what+" fallback as coded", []int{r.TieClass}, []int{*zc.FallbackReturns})
		}
		if zc.FallbackIntends != nil {
			fxt.CompareInts(t, what+" fallback intended", []int{intended.TieClass}, []int{*zc.FallbackIntends})
			wantOut := slices.Clone(votes)
			wantOut[*zc.FallbackIntends]++
			fxt.Compare(t, what+" intended output", intended.Output, wantOut, tol, fxt.Abs)
		}
		t.Logf("%s: tie %v, fallback as coded → +1 on %d (pred %d), intended → %d (pred %d)",
			what, r.Ties, r.TieClass, r.Pred, intended.TieClass, intended.Pred)
	default:
		t.Fatalf("%s: tie %v with an unknown resolved_by %q", what, zc.Ties, zc.ResolvedBy)
	}
}

// TestZeroVote walks the tie paths on hand-made cosines (V = 5, γ = 0.4:
// views 0 and 1 kept, each a clear vote). Each row is one view's cosines
// over C = 4 classes; the entropy order follows the sharpness of the rows.
func TestZeroVote(t *testing.T) {
	sharp := func(y int, gap float64) []float64 { // confident in y
		row := []float64{0, 0, 0, 0}
		row[y] = gap
		return row
	}
	rows := func(rs ...[]float64) *mat.Dense {
		var data []float64
		for _, r := range rs {
			data = append(data, r...)
		}
		return mat.NewDense(len(rs), 4, data)
	}
	tests := []struct {
		name     string
		cos      *mat.Dense
		fallback ZeroFallback
		ties     []int
		how      ZeroTieBreak
		view     int
		class    int
		pred     int
	}{
		{"no tie", rows(sharp(2, 0.5), sharp(2, 0.4), sharp(1, 0.3), sharp(0, 0.2), sharp(3, 0.1)),
			ZeroFallbackAsCoded, []int{2}, ZeroNoTie, -1, -1, 2},
		{"tie, first discarded view decides", rows(sharp(3, 0.5), sharp(1, 0.4), sharp(1, 0.3), sharp(3, 0.2), sharp(0, 0.1)),
			ZeroFallbackAsCoded, []int{1, 3}, ZeroByDiscardedView, 2, 1, 1},
		{"tie, second discarded view decides", rows(sharp(3, 0.5), sharp(1, 0.4), sharp(0, 0.3), sharp(3, 0.2), sharp(1, 0.1)),
			ZeroFallbackAsCoded, []int{1, 3}, ZeroByDiscardedView, 3, 3, 3},
		// Ties {1, 2} of one vote each; no discarded view votes 1 or 2. The
		// first discarded view (2) has cosines (0.35, 0.1, 0.2, 0). As
		// coded, classes C−1−t = 2, 1 are masked and class 0 gets the +1,
		// which lifts it to the tied count: the prediction is class 0, a
		// class outside the tie. Intended, the tied class with the larger
		// cosine, 2, gets it.
		{"fallback as coded", rows(sharp(2, 0.5), sharp(1, 0.4), []float64{0.35, 0.1, 0.2, 0}, sharp(0, 0.05), sharp(3, 0.04)),
			ZeroFallbackAsCoded, []int{1, 2}, ZeroByFallback, 2, 0, 0},
		{"fallback intended", rows(sharp(2, 0.5), sharp(1, 0.4), []float64{0.35, 0.1, 0.2, 0}, sharp(0, 0.05), sharp(3, 0.04)),
			ZeroFallbackTied, []int{1, 2}, ZeroByFallback, 2, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ZeroVote(tc.cos, 100, 0.4, tc.fallback)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Selection.Kept, []int{0, 1}) {
				t.Fatalf("kept %v, want [0 1] (entropy order %v)", r.Selection.Kept, r.Selection.Order)
			}
			if !slices.Equal(r.Ties, tc.ties) || r.TieBreak != tc.how || r.TieView != tc.view || r.TieClass != tc.class || r.Pred != tc.pred {
				t.Errorf("ties %v broken by %v (view %d, +1 on %d), pred %d; want %v %v (view %d, +1 on %d), pred %d",
					r.Ties, r.TieBreak, r.TieView, r.TieClass, r.Pred, tc.ties, tc.how, tc.view, tc.class, tc.pred)
			}
		})
	}
}

// TestZeroVoteEdges: a tie with nothing discarded stays unbroken; a vote
// with a top-2 gap near ε is split; bad input is an error.
func TestZeroVoteEdges(t *testing.T) {
	cos := mat.NewDense(2, 3, []float64{0, 0.5, 0, 0.5, 0, 0})
	r, err := ZeroVote(cos, 100, 1, ZeroFallbackAsCoded)
	if err != nil {
		t.Fatal(err)
	}
	if r.TieBreak != ZeroUnbroken || r.Pred != 0 || !slices.Equal(r.Output, r.Votes) {
		t.Errorf("γ = 1 tie: %v, pred %d, output %v; want unbroken, pred 0, the votes", r.TieBreak, r.Pred, r.Output)
	}
	// Top-2 gap ε·ln 3: the vote is (3/4, 1/4, 0).
	near := mat.NewDense(1, 3, []float64{0.2 + ZeroVoteTemperature*1.0986122886681098, 0.2, 0})
	r, err = ZeroVote(near, 100, 1, ZeroFallbackAsCoded)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Votes[0] - 0.75; d > 1e-6 || d < -1e-6 {
		t.Errorf("vote near ε: %v, want (0.75, 0.25, 0) within the rounding of 0.2 (1e-6)", r.Votes)
	}
	bad := []struct {
		name     string
		cos      mat.Matrix
		scale    float64
		gamma    float64
		fallback ZeroFallback
		err      error
	}{
		{"scale 0", cos, 0, 0.5, ZeroFallbackAsCoded, errAny},
		{"keeps nothing", cos, 100, 0.3, ZeroFallbackAsCoded, ErrEmptySelection},
		{"unknown fallback", cos, 100, 0.5, ZeroFallback(7), errAny},
	}
	for _, b := range bad {
		if _, err := ZeroVote(b.cos, b.scale, b.gamma, b.fallback); err == nil || b.err != errAny && !errors.Is(err, b.err) {
			t.Errorf("%s: err %v, want %v", b.name, err, b.err)
		}
	}
}
