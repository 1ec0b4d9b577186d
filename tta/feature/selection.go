package feature

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// ErrEmptySelection is returned when a confidence selection would keep no
// view: ⌊V·ρ⌋ = 0, where the official code averages over an empty set and
// gets NaN. A multi-view method run with too few views (--views) meets it.
var ErrEmptySelection = errors.New("feature: confidence selection keeps no view")

// Selection is a confidence selection over the V views of one image: the
// views ordered by ascending entropy, the first Keep of them kept.
type Selection struct {
	// Entropy is each view's entropy, by view index.
	Entropy []float64
	// Order lists every view by ascending entropy. Views of equal entropy
	// keep their index order (a stable sort); NaN entropies come last, as
	// torch.sort puts them.
	Order []int
	// Kept is Order[:Keep], the confident views; Discarded is Order[Keep:],
	// in the same order (ZERO's tie-break walks them).
	Kept, Discarded []int
}

// KeepCount returns how many of views views a selection with ratio rho
// keeps: int(V·ρ) as the official code computes it in double precision
// ([TPT] tpt_classification.py select_confident_samples, [H]
// methods/vte.py, [ZERO] ttas/base.py confidence_filter, [DMN]
// dmn_main.py select_confident_samples), so 6·0.34 keeps 2 and 64·0.1
// keeps 6. It returns ErrEmptySelection when that is 0, and an error for
// a ratio outside (0, 1] or no views.
func KeepCount(views int, rho float64) (int, error) {
	if views < 1 {
		return 0, fmt.Errorf("feature: selection over %d views", views)
	}
	if !(rho > 0 && rho <= 1) {
		return 0, fmt.Errorf("feature: selection ratio %v outside (0, 1]", rho)
	}
	k := int(float64(views) * rho)
	if k < 1 {
		return 0, fmt.Errorf("%w: int(%d·%v) = 0", ErrEmptySelection, views, rho)
	}
	return k, nil
}

// SoftmaxEntropies returns, for every row of logits, the entropy of its
// softmax. With eps = 0 it is the exact H = −Σ p·log p computed in log
// space (TPT, VTE and ZERO: −Σ softmax·log_softmax); with eps > 0 it is
// −Σ p·log(p + eps), DMN's view entropy (eps 1e-6, [DMN] dmn_main.py
// select_confident_samples). Rows with NaN or +Inf, or with no finite
// entry, are an error.
func SoftmaxEntropies(logits mat.Matrix, eps float64) ([]float64, error) {
	r, c := logits.Dims()
	if r < 1 || c < 1 {
		return nil, fmt.Errorf("feature: entropies of empty logits (%d×%d)", r, c)
	}
	if !(eps >= 0) {
		return nil, fmt.Errorf("feature: entropy epsilon %v is negative", eps)
	}
	out := make([]float64, r)
	logp := make([]float64, c)
	for i := range r {
		if err := logSoftmaxRow(logp, logits, i); err != nil {
			return nil, err
		}
		var h float64
		for _, lp := range logp {
			p := math.Exp(lp)
			if eps == 0 {
				if p > 0 {
					h -= p * lp
				}
				continue
			}
			h -= p * math.Log(p+eps)
		}
		out[i] = h
	}
	return out, nil
}

// logSoftmaxRow writes log softmax of row i of logits into dst after
// checking that the row has no NaN or +Inf and at least one finite entry
// (−Inf entries are allowed: their probability is 0).
func logSoftmaxRow(dst []float64, logits mat.Matrix, i int) error {
	finite := false
	for j := range dst {
		v := logits.At(i, j)
		if math.IsNaN(v) || math.IsInf(v, 1) {
			return fmt.Errorf("feature: logit %v at row %d, column %d", v, i, j)
		}
		finite = finite || !math.IsInf(v, -1)
		dst[j] = v
	}
	if !finite {
		return fmt.Errorf("feature: row %d of the logits is all −Inf", i)
	}
	logSoftmaxInPlace(dst)
	return nil
}

// SelectLowestEntropy orders the views by ascending entropy and keeps the
// first keep of them (1 ≤ keep ≤ V). The official code uses torch.argsort,
// which does not promise an order among equal entropies; this sort is
// stable, so equal entropies keep view-index order, and NaN sorts last.
func SelectLowestEntropy(entropy []float64, keep int) (*Selection, error) {
	v := len(entropy)
	if v < 1 {
		return nil, errors.New("feature: selection over no views")
	}
	if keep < 1 {
		return nil, fmt.Errorf("%w: keep %d of %d", ErrEmptySelection, keep, v)
	}
	if keep > v {
		return nil, fmt.Errorf("feature: selection keeps %d of %d views", keep, v)
	}
	order := make([]int, v)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ea, eb := entropy[a], entropy[b]
		switch na, nb := math.IsNaN(ea), math.IsNaN(eb); {
		case na || nb:
			if na && !nb {
				return 1
			}
			if nb && !na {
				return -1
			}
			return 0
		case ea < eb:
			return -1
		case ea > eb:
			return 1
		}
		return 0
	})
	return &Selection{
		Entropy:   slices.Clone(entropy),
		Order:     order,
		Kept:      slices.Clone(order[:keep]),
		Discarded: slices.Clone(order[keep:]),
	}, nil
}

// SelectConfident is the confidence selection of TPT and VTE (spec §0.5;
// [TPT] tpt_classification.py select_confident_samples, [H]
// classification/methods/vte.py): the exact softmax entropy of every row of
// the view logits (V×C), then the int(V·ρ) lowest-entropy views, by
// ascending entropy.
func SelectConfident(logits mat.Matrix, rho float64) (*Selection, error) {
	v, _ := logits.Dims()
	keep, err := KeepCount(v, rho)
	if err != nil {
		return nil, err
	}
	h, err := SoftmaxEntropies(logits, 0)
	if err != nil {
		return nil, err
	}
	return SelectLowestEntropy(h, keep)
}
