package feature

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

func TestKeepCount(t *testing.T) {
	tests := []struct {
		views   int
		rho     float64
		want    int
		wantErr error // nil: no error; errAny: some error
	}{
		{64, 0.1, 6, nil},    // TPT, VTE
		{32, 0.1, 3, nil},    // DMN
		{64, 0.3, 19, nil},   // ZERO
		{6, 0.34, 2, nil},    // the fixtures' VTE, TPT, DMN
		{6, 0.67, 4, nil},    // the fixtures' ZERO
		{10, 0.7, 7, nil},    // 10·0.7 = 7.000000000000001 in double
		{100, 0.29, 28, nil}, // 28.999999999999996: int() truncates, as Python does
		{5, 1, 5, nil},
		{2, 0.1, 0, ErrEmptySelection},
		{0, 0.5, 0, errAny},
		{6, 0, 0, errAny},
		{6, 1.5, 0, errAny},
		{6, math.NaN(), 0, errAny},
	}
	for _, tc := range tests {
		got, err := KeepCount(tc.views, tc.rho)
		switch {
		case tc.wantErr == nil && (err != nil || got != tc.want):
			t.Errorf("KeepCount(%d, %v) = %d, %v; want %d", tc.views, tc.rho, got, err, tc.want)
		case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
			t.Errorf("KeepCount(%d, %v) = %d, %v; want error %v", tc.views, tc.rho, got, err, tc.wantErr)
		}
	}
}

// errAny stands for "some error" in the tables.
var errAny = errors.New("any error")

func TestSelectLowestEntropy(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name      string
		entropy   []float64
		keep      int
		kept, dis []int
		wantErr   error
	}{
		{"ascending", []float64{0.3, 0.1, 0.2}, 2, []int{1, 2}, []int{0}, nil},
		{"ties keep index order", []float64{0.2, 0.1, 0.2, 0.1}, 3, []int{1, 3, 0}, []int{2}, nil},
		{"NaN last", []float64{nan, 0.5, nan, 0.4}, 2, []int{3, 1}, []int{0, 2}, nil},
		{"keep all", []float64{1, 0}, 2, []int{1, 0}, []int{}, nil},
		{"keep none", []float64{1, 0}, 0, nil, nil, ErrEmptySelection},
		{"keep too many", []float64{1, 0}, 3, nil, nil, errAny},
		{"no views", nil, 1, nil, nil, errAny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := SelectLowestEntropy(tc.entropy, tc.keep)
			if tc.wantErr != nil {
				if err == nil || tc.wantErr != errAny && !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Kept, tc.kept) || !slices.Equal(s.Discarded, tc.dis) {
				t.Errorf("kept %v discarded %v, want %v %v", s.Kept, s.Discarded, tc.kept, tc.dis)
			}
			if !slices.Equal(s.Order, append(slices.Clone(tc.kept), tc.dis...)) {
				t.Errorf("order %v is not kept then discarded", s.Order)
			}
		})
	}
}

func TestSoftmaxEntropies(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		logits  []float64 // one row
		eps     float64
		want    float64
		wantErr bool
	}{
		{"uniform", []float64{1, 1, 1, 1}, 0, math.Log(4), false},
		{"one-hot by −Inf", []float64{0, -inf, -inf}, 0, 0, false},
		{"saturated", []float64{0, -1e4, -1e4}, 0, 0, false},
		// −Σ p·log(p + ε) with p = ½, ½.
		{"eps", []float64{3, 3}, 1e-6, -math.Log(0.5 + 1e-6), false},
		{"NaN", []float64{0, math.NaN()}, 0, 0, true},
		{"+Inf", []float64{0, inf}, 0, 0, true},
		{"all −Inf", []float64{-inf, -inf}, 0, 0, true},
		{"negative eps", []float64{0, 0}, -1, 0, true},
	}
	for _, tc := range tests {
		h, err := SoftmaxEntropies(mat.NewDense(1, len(tc.logits), tc.logits), tc.eps)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error", tc.name)
			}
			continue
		}
		if err != nil || math.Abs(h[0]-tc.want) > 1e-15 {
			t.Errorf("%s: H = %v, %v; want %v", tc.name, h, err, tc.want)
		}
	}
}

// TestSelectConfidentTTA2 checks the entropies and the selection of VTE and
// TPT on their stored view logits: the entropies at 1e-5 relative (the
// README's tolerance for fp32 entropies against our float64 on the same
// fp32 logits), the selections exactly.
func TestSelectConfidentTTA2(t *testing.T) {
	x, cfg := readTTA2(t)
	for _, m := range []struct {
		prefix string
		images []int
		rho    float64
		n      int
	}{
		{"vte", cfg.Config.VTE.Images, cfg.Config.VTE.Rho, cfg.Config.VTE.NSelected},
		{"tpt", cfg.Config.TPT.Images, cfg.Config.TPT.Rho, cfg.Config.TPT.NSelected},
	} {
		for k := range m.images {
			what := fmt.Sprintf("%s image %d", m.prefix, m.images[k])
			logits := sliceDense(x, m.prefix+".logits", k)
			s, err := SelectConfident(logits, m.rho)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Kept) != m.n {
				t.Errorf("%s: kept %d views, config says %d", what, len(s.Kept), m.n)
			}
			want, _ := slice(x, m.prefix+".entropy", k)
			fxt.Compare(t, what+" entropy", s.Entropy, want, 1e-5, fxt.Rel)
			fxt.CompareInts(t, what+" selected", s.Kept, sliceInts(x, m.prefix+".selected", k))
		}
	}
}
