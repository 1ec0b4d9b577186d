package feature

import (
	"math"
	"slices"
)

// rankItem is one candidate of a neighbour list: its similarity and its
// node index (or class).
type rankItem struct {
	v   float64
	idx int
}

// rankBefore is torch's top-k comparison (largest first, NaN before any
// number); it says nothing of equal values.
func rankBefore(x, y rankItem) bool {
	return (math.IsNaN(x.v) && !math.IsNaN(y.v)) || x.v > y.v
}

// indexBefore is ECALPGraph's order of candidates: the larger similarity
// first (NaN first, as torch's top-k), and at equal similarities the lower
// index first. It is a total order on distinct indices, so the lists it
// selects depend on the candidates only, never on the order in which they
// are offered.
func indexBefore(x, y rankItem) bool {
	if rankBefore(x, y) {
		return true
	}
	if rankBefore(y, x) {
		return false
	}
	return x.idx < y.idx
}

// indexTopK returns the first k items of q (which it reorders) in
// indexBefore's order.
func indexTopK(q []rankItem, k int) []rankItem {
	k = min(k, len(q))
	if k <= 0 {
		return nil
	}
	slices.SortFunc(q, func(x, y rankItem) int {
		switch {
		case indexBefore(x, y):
			return -1
		case indexBefore(y, x):
			return 1
		}
		return 0
	})
	return q[:k]
}
