package feature

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// ZeroVoteTemperature is the temperature of a ZERO vote: the float32
// machine epsilon 2⁻²³, torch.finfo(float32).eps in [ZERO] ttas/zero.py.
// A kept view's vote softmax(l/ε) is one-hot at its argmax unless its top
// two cosines are within about 1e-5 (fixtures README section 7, and
// correction 1 of the baselines spec).
const ZeroVoteTemperature = 0x1p-23

// ZeroFallback chooses how ZERO breaks a tie that no discarded view
// resolves ([ZERO] utils/tools.py break_sample_tie, on the first discarded
// view's logits).
type ZeroFallback int

const (
	// ZeroFallbackAsCoded computes what break_sample_tie computes where its
	// int32 index is accepted (or cast to int64, as the fixtures do): ~t =
	// −t−1 masks the classes C−1−t for the tied t, not the non-tied ones,
	// and the argmax of the rest gets the +1, which may land on a class
	// outside the tie. The prediction, argmax of the votes plus that +1,
	// is then the smallest tied class, or the outside class itself when
	// its +1 reaches the tied count. It reproduces the stored outputs
	// (tta2.json:zero.synthetic case 1).
	ZeroFallbackAsCoded ZeroFallback = iota
	// ZeroFallbackTied is the intended reading (spec §2.5): the +1 goes to
	// the tied class with the largest logit in the first discarded view.
	ZeroFallbackTied
)

// ZeroTieBreak says how ZERO settled its prediction.
type ZeroTieBreak int

const (
	// ZeroNoTie: one class had the most votes.
	ZeroNoTie ZeroTieBreak = iota
	// ZeroByDiscardedView: the first discarded view (by ascending entropy)
	// whose argmax is a tied class decided.
	ZeroByDiscardedView
	// ZeroByFallback: no discarded view's argmax was tied; the fallback
	// (ZeroFallback) on the first discarded view decided.
	ZeroByFallback
	// ZeroUnbroken: a tie with no discarded view at all (γ = 1), where the
	// code fails on an empty index; here the votes stay as they are and the
	// prediction is the smallest tied class.
	ZeroUnbroken
)

func (b ZeroTieBreak) String() string {
	switch b {
	case ZeroNoTie:
		return "no tie"
	case ZeroByDiscardedView:
		return "discarded view"
	case ZeroByFallback:
		return "fallback"
	case ZeroUnbroken:
		return "unbroken"
	}
	return fmt.Sprintf("ZeroTieBreak(%d)", int(b))
}

// ZeroResult is ZeroVote's result for one image.
type ZeroResult struct {
	// Probs are softmax(scale·l) (V×C), whose entropies rank the views.
	Probs     *mat.Dense
	Selection *Selection
	// ViewArgmax is each view's argmax class.
	ViewArgmax []int
	// Votes is Σ over the kept views of softmax(l/ε) (C).
	Votes []float64
	// Ties lists the classes with the most votes: the first of them, then
	// the others in index order (as the code builds the list). One entry
	// means no tie.
	Ties []int
	// TieBreak says how a tie was settled; TieRank and TieView are the
	// position among the discarded views and the view that settled it
	// (ZeroByDiscardedView; the first discarded view for ZeroByFallback),
	// −1 otherwise; TieClass got the +1 (−1 without a tie).
	TieBreak         ZeroTieBreak
	TieRank, TieView int
	TieClass         int
	// Output is Votes plus 1 at TieClass after a tie (the code's p_bar);
	// Pred is its argmax, the first on ties.
	Output []float64
	Pred   int
}

// ZeroVote is ZERO's training-free prediction for one image (spec §2 with
// correction 1; [ZERO] ttas/zero.py Zero.zero, ttas/base.py
// confidence_filter, utils/tools.py greedy_break and break_sample_tie).
// cos holds the views' unscaled cosine logits l_v = normalize(f_v)·tᵀ
// (V×C, row 0 the base view; [Classify](f, t, 1) computes them from view
// features); scale is exp(logit_scale).
//
//  1. Every view's exact entropy of softmax(scale·l_v) (no epsilon inside
//     the log) ranks the views; the int(V·γ) lowest are kept
//     ([SelectLowestEntropy]).
//  2. Each kept view votes softmax(l_v/ε), ε = [ZeroVoteTemperature]; the
//     votes are summed.
//  3. Ties (exactly equal top vote sums, as the code compares them) are
//     broken by walking the discarded views in ascending entropy and
//     taking the first whose argmax is tied; if none is, fallback decides
//     on the first discarded view. The chosen class gets +1 and the
//     prediction is the argmax of the result.
func ZeroVote(cos mat.Matrix, scale, gamma float64, fallback ZeroFallback) (*ZeroResult, error) {
	v, c := cos.Dims()
	if v < 1 || c < 1 {
		return nil, fmt.Errorf("feature: zero: empty logits (%d×%d)", v, c)
	}
	if !(scale > 0) {
		return nil, fmt.Errorf("feature: zero: logit scale %v must be positive", scale)
	}
	if fallback != ZeroFallbackAsCoded && fallback != ZeroFallbackTied {
		return nil, fmt.Errorf("feature: zero: unknown fallback %d", fallback)
	}
	keep, err := KeepCount(v, gamma)
	if err != nil {
		return nil, fmt.Errorf("feature: zero: %w", err)
	}
	var scaled mat.Dense
	scaled.Scale(scale, cos)
	h, err := SoftmaxEntropies(&scaled, 0)
	if err != nil {
		return nil, fmt.Errorf("feature: zero: %w", err)
	}
	sel, err := SelectLowestEntropy(h, keep)
	if err != nil {
		return nil, fmt.Errorf("feature: zero: %w", err)
	}
	probs := mat.NewDense(v, c, nil)
	for i := range v {
		row := probs.RawRowView(i)
		mat.Row(row, i, &scaled)
		softmaxInPlace(row)
	}
	res := &ZeroResult{
		Probs:      probs,
		Selection:  sel,
		ViewArgmax: Argmax(cos),
		Votes:      make([]float64, c),
		TieRank:    -1,
		TieView:    -1,
		TieClass:   -1,
	}
	vote := make([]float64, c)
	for _, i := range sel.Kept {
		for k := range c {
			vote[k] = cos.At(i, k) / ZeroVoteTemperature
		}
		softmaxInPlace(vote)
		for k, p := range vote {
			res.Votes[k] += p
		}
	}
	res.Ties = zeroTies(res.Votes)
	res.Output = slices.Clone(res.Votes)
	if len(res.Ties) > 1 {
		res.breakTie(cos, fallback)
	}
	res.Pred = argmaxSlice(res.Output)
	return res, nil
}

// zeroTies returns the class of most votes (the first on ties) followed by
// every other class with exactly as many, in index order.
func zeroTies(votes []float64) []int {
	top := argmaxSlice(votes)
	ties := []int{top}
	for k, n := range votes {
		if k != top && n == votes[top] {
			ties = append(ties, k)
		}
	}
	return ties
}

// breakTie is greedy_break: the first discarded view whose argmax is tied,
// else the fallback on the first discarded view; the chosen class gets +1.
func (r *ZeroResult) breakTie(cos mat.Matrix, fallback ZeroFallback) {
	if len(r.Selection.Discarded) == 0 {
		r.TieBreak = ZeroUnbroken
		return
	}
	for rank, view := range r.Selection.Discarded {
		if y := r.ViewArgmax[view]; slices.Contains(r.Ties, y) {
			r.TieBreak, r.TieRank, r.TieView, r.TieClass = ZeroByDiscardedView, rank, view, y
			r.Output[y]++
			return
		}
	}
	view := r.Selection.Discarded[0]
	_, c := cos.Dims()
	logit := make([]float64, c)
	mat.Row(logit, view, cos)
	switch fallback {
	case ZeroFallbackAsCoded:
		for _, t := range r.Ties {
			logit[c-1-t] = math.Inf(-1)
		}
	case ZeroFallbackTied:
		for k := range logit {
			if !slices.Contains(r.Ties, k) {
				logit[k] = math.Inf(-1)
			}
		}
	}
	y := argmaxSlice(logit)
	r.TieBreak, r.TieRank, r.TieView, r.TieClass = ZeroByFallback, 0, view, y
	r.Output[y]++
}

// argmaxSlice is the index of the largest entry, the first on ties, 0 when
// every entry is −Inf or NaN (torch.argmax on CPU over all −Inf gives 0).
func argmaxSlice(x []float64) int {
	best, at := math.Inf(-1), 0
	for i, v := range x {
		if v > best {
			best, at = v, i
		}
	}
	return at
}
