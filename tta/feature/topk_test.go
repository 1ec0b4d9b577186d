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
