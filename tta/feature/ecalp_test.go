package feature

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// ecalpJSON is tta2.json's ECALP block.
type ecalpJSON struct {
	ECALP struct {
		Config struct {
			Images        []int   `json:"images"`
			KText         int     `json:"k_text"`
			KImage        int     `json:"k_image"`
			Gamma         float64 `json:"gamma"`
			Alpha         float64 `json:"alpha"`
			NumIterations int     `json:"num_iterations"`
		} `json:"config"`
		PerStep []struct {
			Step          int   `json:"step"`
			Pred          int   `json:"pred"`
			RowsDiffering []int `json:"rows_differing"`
		} `json:"per_step"`
	} `json:"ecalp"`
}

// ecalpFixture opens tta2's ECALP run: its config, stream features (one
// row per step) and head.
func ecalpFixture(t *testing.T) (*fxt.File, ecalpJSON, ECALPConfig, *mat.Dense, *mat.Dense) {
	t.Helper()
	var js ecalpJSON
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	c := js.ECALP.Config
	cfg := ECALPConfig{KText: c.KText, KImage: c.KImage, Gamma: c.Gamma, Alpha: c.Alpha, Iterations: c.NumIterations}
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	return x, js, cfg, x.Dense("ecalp.features"), x.Dense("ecalp.T")
}

// ecalpTol: the fixture is fp32 torch and this port float64. Similarities
// and W̃ are sums of d products of unit-norm values, held to the README's
// 1e-5 relative to each tensor's max; the label matrices (tta2.json
// tolerances: ecalp_label_matrices) likewise.
const ecalpTol = 1e-5

// TestECALPStateRoundTrip stops the fixture stream halfway, restores the
// saved state into a fresh graph and checks that both continue bit for
// bit; then that Reset starts over like a new graph.
func TestECALPStateRoundTrip(t *testing.T) {
	_, _, cfg, feats, text := ecalpFixture(t)
	steps, _ := feats.Dims()
	a, err := NewECALPGraph(text, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var first *ECALPResult
	for i := range steps / 2 {
		res, err := a.Step(feats.RawRowView(i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res
		}
	}
	b, err := NewECALPGraph(text, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetState(a.State()); err != nil {
		t.Fatal(err)
	}
	for i := steps / 2; i < steps; i++ {
		ra, err := a.Step(feats.RawRowView(i))
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.Step(feats.RawRowView(i))
		if err != nil {
			t.Fatal(err)
		}
		if ra.Pred != rb.Pred || !slices.Equal(ra.Scores, rb.Scores) {
			t.Fatalf("step %d after restoring: pred %d scores %v, want %d %v", i, rb.Pred, rb.Scores, ra.Pred, ra.Scores)
		}
	}
	a.Reset()
	if a.Len() != 0 {
		t.Fatalf("Reset left %d images", a.Len())
	}
	res, err := a.Step(feats.RawRowView(0))
	if err != nil {
		t.Fatal(err)
	}
	if res.Pred != first.Pred || !slices.Equal(res.Scores, first.Scores) {
		t.Errorf("after Reset: %v, want the first step's %v", res.Scores, first.Scores)
	}
	// An empty state is a reset.
	if err := b.SetState(ECALPState{}); err != nil || b.Len() != 0 {
		t.Errorf("empty state: %v, %d images left", err, b.Len())
	}
}

// TestECALPSetStateRejects checks that states that do not fit are refused
// with ErrStateMismatch and leave the graph as it was.
func TestECALPSetStateRejects(t *testing.T) {
	text := mat.NewDense(3, 2, []float64{1, 0, 0, 1, 0.6, 0.8})
	cfg := ECALPConfig{KText: 2, KImage: 2, Gamma: 10, Alpha: 1, Iterations: 2}
	g, err := NewECALPGraph(text, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]float64{{1, 0.1}, {0.2, 1}, {0.7, 0.7}} {
		if _, err := g.Step(f); err != nil {
			t.Fatal(err)
		}
	}
	good := g.State()
	tests := []struct {
		name   string
		modify func(s *ECALPState)
	}{
		{"lists without features", func(s *ECALPState) { s.Features = nil }},
		{"missing row", func(s *ECALPState) { s.Images = s.Images[1:] }},
		{"wrong dims", func(s *ECALPState) { s.Features[0] = []float64{1} }},
		{"not finite", func(s *ECALPState) { s.Features[1][0] = math.NaN() }},
		{"image neighbour out of range", func(s *ECALPState) { s.Images[0].Index[0] = len(s.Features) + 1 }},
		{"too many candidates", func(s *ECALPState) {
			s.Images[0].Index = append(s.Images[0].Index, 0, 0, 0)
			s.Images[0].Sim = append(s.Images[0].Sim, 0, 0, 0)
		}},
		{"similarities missing", func(s *ECALPState) { s.Images[1].Sim = s.Images[1].Sim[:1] }},
		{"class neighbour out of range", func(s *ECALPState) { s.Texts[2].Index[0] = 3 }},
		{"class list too short", func(s *ECALPState) { s.Texts[2].Index = s.Texts[2].Index[:1] }},
		{"prior class out of range", func(s *ECALPState) { s.PriorClass[0] = -1 }},
	}
	for _, tc := range tests {
		s := g.State()
		tc.modify(&s)
		if err := g.SetState(s); !errors.Is(err, ErrStateMismatch) {
			t.Errorf("%s: error %v, want ErrStateMismatch", tc.name, err)
		}
		if got := g.State(); fmt.Sprint(got) != fmt.Sprint(good) {
			t.Errorf("%s: a refused state changed the graph", tc.name)
		}
	}
}

// TestECALPRejects checks the constructor's and Step's errors.
func TestECALPRejects(t *testing.T) {
	text := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	good := DefaultECALPConfig()
	for _, tc := range []struct {
		name string
		text mat.Matrix
		cfg  ECALPConfig
	}{
		{"one class", mat.NewDense(1, 2, []float64{1, 0}), good},
		{"k_image 0", text, ECALPConfig{KText: 1, KImage: 0, Gamma: 10, Alpha: 1, Iterations: 1}},
		{"no iterations", text, ECALPConfig{KText: 1, KImage: 1, Gamma: 10, Alpha: 1}},
		{"NaN gamma", text, ECALPConfig{KText: 1, KImage: 1, Gamma: math.NaN(), Alpha: 1, Iterations: 1}},
	} {
		if _, err := NewECALPGraph(tc.text, tc.cfg); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	g, err := NewECALPGraph(text, good)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]float64{{1}, {math.Inf(1), 0}, {math.NaN(), 1}} {
		if _, err := g.Step(f); err == nil {
			t.Errorf("Step(%v): no error", f)
		}
	}
	if g.Len() != 0 {
		t.Errorf("rejected features entered the graph: %d images", g.Len())
	}
}

// TestECALPHand checks one step by hand. Two classes e₁, e₂ in 2-D have
// equal variance in both dimensions, so w = (1, 1)/√2 and every similarity
// is a plain cosine. The first image f = e₁ is node 0 and its duplicate
// node 1; with k_image = k_text = 1 each links to node 0 (cosine 1, the
// first on the tie) and to class 0 (cosine 1), and class 1 gets no edge.
// K has edges 0→0, 0→c₀, 1→0, 1→c₀, all of weight 1, so W = K + Kᵀ has
// W[0,0] = 2, W[0,1] = W[1,0] = 1, W[0,c₀] = W[1,c₀] = 1, W[c₀,0] =
// W[c₀,1] = 1: degrees 4, 2, 2. With s = 1/(√d + 1e-6), one round gives
// node 1 the label s₁·s_{c₀} on class 0 (its only class edge, Y⁰ = 0).
func TestECALPHand(t *testing.T) {
	text := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	g, err := NewECALPGraph(text, ECALPConfig{KText: 1, KImage: 1, Gamma: 10, Alpha: 1, Iterations: 1})
	if err != nil {
		t.Fatal(err)
	}
	var tr ecalpTrace
	res, err := g.step([]float64{1, 0}, &tr)
	if err != nil {
		t.Fatal(err)
	}
	inv := func(d float64) float64 { return 1 / (math.Sqrt(d) + 1e-6) }
	fxt.Compare(t, "w", g.w, []float64{math.Sqrt(0.5), math.Sqrt(0.5)}, 1e-15, fxt.Rel)
	if !slices.Equal(tr.images[1].Index, []int{0}) || !slices.Equal(tr.texts[1].Index, []int{0}) {
		t.Fatalf("duplicate's lists %v %v, want [0] [0]", tr.images[1], tr.texts[1])
	}
	want := inv(2) * inv(2)
	fxt.Compare(t, "scores", res.Scores, []float64{want, 0}, 1e-15, fxt.Rel)
	// Node 0: its self-loop 2 and its duplicate add nothing in one round
	// (Y⁰ = 0); class 0 gives s₀·s_{c₀}.
	fxt.Compare(t, "node 0", tr.iterates[0].RawRowView(0), []float64{inv(4) * inv(2), 0}, 1e-15, fxt.Rel)
	if res.Pred != 0 {
		t.Errorf("pred %d, want 0", res.Pred)
	}
	// The next prior keeps each row's largest label over 5.
	fxt.Compare(t, "prior", g.priorValue, []float64{inv(4) * inv(2) / 5, want / 5}, 1e-15, fxt.Rel)
}

// TestECALPLongStream runs random streams long enough for every branch of
// the incremental lists (spares k, k+1, k+2) and, with k_image = 1, for
// torch's partial_sort path (64·k ≤ n) on the new image's list; at every
// step the scores must be finite and non-negative (γ even), the
// prediction their argmax, and the state must pass SetState and continue
// identically.
func TestECALPLongStream(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const c, d = 6, 8
	text, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	for _, tc := range []struct {
		cfg   ECALPConfig
		steps int
	}{
		{DefaultECALPConfig(), 40},
		{ECALPConfig{KText: 2, KImage: 1, Gamma: 10, Alpha: 0.8, Iterations: 2}, 240},
	} {
		g, err := NewECALPGraph(text, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		copyOf, err := NewECALPGraph(text, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tc.steps {
			f, _ := NormalizeRows(fxt.RandDense(rng, 1, d, 1))
			if err := copyOf.SetState(g.State()); err != nil {
				t.Fatalf("k_image %d step %d: own state refused: %v", tc.cfg.KImage, i, err)
			}
			res, err := g.Step(f.RawRowView(0))
			if err != nil {
				t.Fatal(err)
			}
			res2, err := copyOf.Step(f.RawRowView(0))
			if err != nil {
				t.Fatal(err)
			}
			if res.Pred != res2.Pred || !slices.Equal(res.Scores, res2.Scores) {
				t.Fatalf("k_image %d step %d: restored graph diverged", tc.cfg.KImage, i)
			}
			for _, v := range res.Scores {
				if !(v >= 0) || math.IsInf(v, 0) {
					t.Fatalf("k_image %d step %d: scores %v", tc.cfg.KImage, i, res.Scores)
				}
			}
			if res.Pred != Argmax(mat.NewDense(1, c, res.Scores))[0] {
				t.Fatalf("step %d: pred %d is not the argmax of %v", i, res.Pred, res.Scores)
			}
		}
		if g.Len() != tc.steps {
			t.Errorf("%d images after %d steps", g.Len(), tc.steps)
		}
	}
}

// BenchmarkECALPStream measures a domain of 500 images (d = 512, 10
// classes, default config): the cost grows as O(N²) over a domain, as in
// the code, which rebuilds the graph at every image.
func BenchmarkECALPStream(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n, c, d = 500, 10, 512
	text, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	feats, _ := NormalizeRows(fxt.RandDense(rng, n, d, 1))
	for b.Loop() {
		g, err := NewECALPGraph(text, DefaultECALPConfig())
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			if _, err := g.Step(feats.RawRowView(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
}
