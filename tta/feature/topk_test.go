package feature

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTorchTopKSelects checks, on both of torch's paths (nth_element when
// 64·k > n, partial_sort when 64·k ≤ n) and with many ties, that the k
// items returned are the k largest, best first, each position at most
// once. The order among equal values is checked by TestECALPFixture,
// where it decides the graph's edges (the fixture's lists are all on the
// nth_element path).
func TestTorchTopKSelects(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		n, k, levels int
	}{
		{1, 1, 0}, {2, 2, 0}, {3, 1, 2}, {4, 4, 2}, {7, 5, 3}, {17, 16, 4}, {40, 39, 5},
		{64, 1, 0}, {64, 1, 3}, {200, 3, 0}, {1000, 8, 7}, {1000, 15, 0}, {70, 70, 1},
	} {
		for range 20 {
			q := make([]rankItem, tc.n)
			for i := range q {
				v := rng.Float64()
				if tc.levels > 0 {
					v = float64(rng.IntN(tc.levels))
				}
				q[i] = rankItem{v: v, idx: i}
			}
			want := make([]float64, tc.n)
			for i, it := range q {
				want[i] = it.v
			}
			slices.Sort(want)
			slices.Reverse(want)
			got := torchTopK(slices.Clone(q), tc.k)
			seen := map[int]bool{}
			for j, it := range got {
				if it.v != want[j] || seen[it.idx] || q[it.idx].v != it.v {
					t.Fatalf("n %d k %d: position %d holds %v (index %d), want value %v once", tc.n, tc.k, j, it.v, it.idx, want[j])
				}
				seen[it.idx] = true
			}
			if len(got) != tc.k {
				t.Fatalf("n %d k %d: %d items", tc.n, tc.k, len(got))
			}
		}
	}
	// NaN ranks first, as torch's comparator puts it; k beyond n is cut.
	got := torchTopK([]rankItem{{1, 0}, {math.NaN(), 1}, {2, 2}}, 5)
	if len(got) != 3 || got[0].idx != 1 || got[1].idx != 2 || got[2].idx != 0 {
		t.Errorf("with NaN: %v, want indices 1, 2, 0", got)
	}
	if got := torchTopK(nil, 3); got != nil {
		t.Errorf("empty: %v", got)
	}
}

// TestTorchTopKTies pins the order of equal values in small cases that
// follow from the library's algorithms: up to three items nth_element
// sorts by insertion (stable), so ties keep their positions.
func TestTorchTopKTies(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		k    int
		want []int
	}{
		{[]float64{1, 1}, 1, []int{0}},
		{[]float64{1, 1}, 2, []int{0, 1}},
		{[]float64{0, 1, 1}, 2, []int{1, 2}},
		{[]float64{1, 0, 1}, 3, []int{0, 2, 1}},
	} {
		q := make([]rankItem, len(tc.v))
		for i, v := range tc.v {
			q[i] = rankItem{v, i}
		}
		var got []int
		for _, it := range torchTopK(q, tc.k) {
			got = append(got, it.idx)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v k %d: %v, want %v", tc.v, tc.k, got, tc.want)
		}
	}
}

// TestIndexTopKOrderFree checks ECALPGraph's rule at ties: the list is
// the k largest, best first, the lower index first among equal values,
// whatever the order in which the candidates are offered.
func TestIndexTopKOrderFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ n, k, levels int }{{1, 1, 1}, {5, 2, 2}, {12, 4, 3}, {30, 8, 4}, {200, 3, 5}} {
		q := make([]rankItem, tc.n)
		for i := range q {
			q[i] = rankItem{v: float64(rng.IntN(tc.levels)), idx: i}
		}
		want := slices.Clone(q)
		slices.SortStableFunc(want, func(x, y rankItem) int { return cmpFloat(y.v, x.v) })
		want = want[:tc.k]
		for range 10 {
			p := slices.Clone(q)
			rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
			if got := indexTopK(p, tc.k); !slices.Equal(got, want) {
				t.Fatalf("n %d k %d: %v, want %v", tc.n, tc.k, got, want)
			}
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestTieMatch checks the fixture tests' list comparison: a different
// choice or order within a group of equal similarities passes, a
// different member above the cut or a similarity the features do not give
// fails.
func TestTieMatch(t *testing.T) {
	yes := func(int, float64) bool { return true }
	sim := []float64{0.9, 0.8, 0.8, 0.5}
	for _, tc := range []struct {
		name      string
		ours, ref []int
		refSim    []float64
		plausible func(int, float64) bool
		ok        bool
	}{
		{"same", []int{1, 2, 3, 4}, []int{1, 2, 3, 4}, sim, yes, true},
		{"order within a tie", []int{1, 2, 3, 4}, []int{1, 3, 2, 4}, sim, yes, true},
		{"tie at the cut", []int{1, 2, 3, 4}, []int{1, 2, 3, 5}, []float64{0.9, 0.8, 0.8, 0.5}, yes, true},
		{"other member above the cut", []int{1, 2, 3, 4}, []int{1, 6, 3, 4}, sim, yes, false},
		{"other similarity", []int{1, 2, 3, 4}, []int{1, 2, 3, 4}, []float64{0.9, 0.8, 0.7, 0.5}, yes, false},
		{"implausible", []int{1, 2, 3, 4}, []int{1, 2, 3, 5}, sim, func(q int, _ float64) bool { return q != 5 }, false},
		{"length", []int{1, 2, 3}, []int{1, 2, 3, 4}, sim, yes, false},
	} {
		err := tieMatch(tc.ours, sim[:len(tc.ours)], tc.ref, tc.refSim, 1e-6, tc.plausible)
		if (err == nil) != tc.ok {
			t.Errorf("%s: error %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
