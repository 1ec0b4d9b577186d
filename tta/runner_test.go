package tta

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
)

// TestPythonShuffle checks the order against CPython 3
// (random.seed(s); l = list(range(n)); random.shuffle(l)).
func TestPythonShuffle(t *testing.T) {
	tests := []struct {
		n    int
		seed uint64
		want []int
	}{
		{10, 1, []int{6, 8, 9, 7, 5, 3, 0, 4, 1, 2}},
		{37, 7, []int{5, 19, 14, 8, 32, 36, 27, 12, 26, 30, 0, 35, 29, 10, 15, 33, 34, 22, 17, 21, 7, 24, 23, 13, 2, 28, 31, 16, 1, 18, 11, 6, 4, 3, 25, 9, 20}},
		{1, 1, []int{0}},
		{0, 1, []int{}},
	}
	for _, tc := range tests {
		if got := PythonShuffle(tc.n, tc.seed); !slices.Equal(got, tc.want) {
			t.Errorf("PythonShuffle(%d, %d) = %v, want %v", tc.n, tc.seed, got, tc.want)
		}
	}
}

func TestReadOrder(t *testing.T) {
	got, err := ReadOrder(strings.NewReader("3\n1 0\n\t2\n"))
	if err != nil || !slices.Equal(got, []int{3, 1, 0, 2}) {
		t.Errorf("ReadOrder = %v, %v", got, err)
	}
	if _, err := ReadOrder(strings.NewReader("1\nx\n")); err == nil {
		t.Error("ReadOrder accepted a non-integer")
	}
}

// randomDomain is a synthetic domain of random images.
type randomDomain struct {
	name   string
	pixels [][]float32
	labels []int
}

func newRandomDomain(name string, n, size, classes int, rng *rand.Rand) *randomDomain {
	d := &randomDomain{name: name}
	shift := float32(len(name)) * 0.1 // a per-domain "corruption"
	for range n {
		px := make([]float32, size)
		for i := range px {
			px[i] = float32(rng.NormFloat64()) + shift
		}
		d.pixels = append(d.pixels, px)
		d.labels = append(d.labels, rng.IntN(classes))
	}
	return d
}

func (d *randomDomain) Name() string { return d.name }
func (d *randomDomain) Len() int     { return len(d.pixels) }
func (d *randomDomain) Sample(i int) ([]float32, int, error) {
	return d.pixels[i], d.labels[i], nil
}

// probe records the state a SubTTA method sees at the start of every Step.
type probe struct {
	*SubTTA
	steps []probeStep
}

type probeStep struct {
	n        int
	values   [][]float64
	adamStep int // the optimizer's step count (0: fresh)
	sigma    *mat.SymDense
}

func (p *probe) Step(px []float32, n int) (*Result, error) {
	st := probeStep{n: n, values: p.tr.values(), sigma: p.aligner.Covariance()}
	for _, ps := range p.tr.optimizer().(*optim.Adam[float32]).State() {
		st.adamStep = max(st.adamStep, ps.Step)
	}
	p.steps = append(p.steps, st)
	return p.SubTTA.Step(px, n)
}

// TestRunnerProtocols runs SubTTA through clip-tiny on three synthetic
// domains (5, 4 and 3 images, batch size 2) under each protocol and checks
// the reset semantics: under ResetEachDomain every domain starts from the
// source weights and a fresh optimizer while the EMA covariance carries over
// (or is reset with ResetCovariance); under Continual and Mixed only the
// first batch starts fresh. The partial last batches are kept, and the JSONL
// log has one record per batch.
func TestRunnerProtocols(t *testing.T) {
	m := tinyModel(t, false)
	rng := rand.New(rand.NewPCG(1, 2))
	const classes = 6
	size := 3 * m.Config.Vision.ImageSize * m.Config.Vision.ImageSize
	domains := []Domain{
		newRandomDomain("gaussian_noise", 5, size, classes, rng),
		newRandomDomain("fog", 4, size, classes, rng),
		newRandomDomain("jpeg", 3, size, classes, rng),
	}
	head, _ := NormalizeRows(randDense(rng, classes, m.Config.EmbedDim, 1))
	source := func() [][]float64 {
		s, err := NewSource(m, head)
		if err != nil {
			t.Fatal(err)
		}
		return s.tr.values()
	}()

	tests := []struct {
		name      string
		protocol  Protocol
		resetCov  bool
		wantSizes []int
		// freshAt lists the Step indices that must start from the source
		// weights and a fresh optimizer; every other must not.
		freshAt []int
		streams []string
	}{
		{"reset", ResetEachDomain, false, []int{2, 2, 1, 2, 2, 2, 1}, []int{0, 3, 5}, []string{"gaussian_noise", "fog", "jpeg"}},
		{"reset+cov", ResetEachDomain, true, []int{2, 2, 1, 2, 2, 2, 1}, []int{0, 3, 5}, []string{"gaussian_noise", "fog", "jpeg"}},
		{"continual", Continual, false, []int{2, 2, 1, 2, 2, 2, 1}, []int{0}, []string{"gaussian_noise", "fog", "jpeg"}},
		{"mixed", Mixed, false, []int{2, 2, 2, 2, 2, 2}, []int{0}, []string{"mixed"}},
	}
	snap := m.Vision.Snapshot()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A Method takes the model's current LayerNorms as its source:
			// undo the previous subtest's adaptation first.
			if err := m.Vision.Restore(snap); err != nil {
				t.Fatal(err)
			}
			s, err := NewSubTTA(m, head, SubTTAConfig{
				Subspace: SubspaceOptions{Rank: 3}, Alpha: 0.5, Loss: LossMint,
				Optimizer: optim.AdamW(1e-2, 0.01), ResetCovariance: tc.resetCov,
			})
			if err != nil {
				t.Fatal(err)
			}
			// Start from a covariance that differs from Σ_T, as after an
			// earlier run: it must survive a Reset unless ResetCovariance.
			pre := s.Aligner().Covariance()
			for i := range pre.SymmetricDim() {
				pre.SetSym(i, i, pre.At(i, i)+1)
			}
			if err := s.Aligner().SetCovariance(pre); err != nil {
				t.Fatal(err)
			}
			p := &probe{SubTTA: s}
			var log bytes.Buffer
			r := Runner{Method: p, Config: RunnerConfig{Protocol: tc.protocol, BatchSize: 2, Shuffle: true, Seed: 1,
				Log: &log, Text: s.Text, Head: head}}
			rep, err := r.Run(domains)
			if err != nil {
				t.Fatal(err)
			}
			sizes := make([]int, len(p.steps))
			for i, st := range p.steps {
				sizes[i] = st.n
			}
			if !slices.Equal(sizes, tc.wantSizes) {
				t.Errorf("batch sizes %v, want %v", sizes, tc.wantSizes)
			}
			for i, st := range p.steps {
				fresh := slices.Contains(tc.freshAt, i)
				atSource := fmt.Sprint(st.values) == fmt.Sprint(source)
				if atSource != fresh || (st.adamStep == 0) != fresh {
					t.Errorf("step %d: at source weights %v, optimizer step %d; want fresh=%v", i, atSource, st.adamStep, fresh)
				}
			}
			// The covariance at the first step is the preset one, not Σ_T,
			// unless the reset clears it.
			sigT := s.Text.Cov
			if got := mat.EqualApprox(p.steps[0].sigma, sigT, 1e-12); got != tc.resetCov {
				t.Errorf("first step: Σ_old == Σ_T is %v, want %v", got, tc.resetCov)
			}
			for _, i := range tc.freshAt[1:] {
				if got := mat.EqualApprox(p.steps[i].sigma, sigT, 1e-12); got != tc.resetCov {
					t.Errorf("step %d (new domain): Σ_old == Σ_T is %v, want %v", i, got, tc.resetCov)
				}
			}
			// Report: every sample counted once, per domain.
			for i, d := range rep.Domains {
				if d.Name != domains[i].Name() || d.Samples != domains[i].Len() {
					t.Errorf("domain %d: %+v, want %s with %d samples", i, d, domains[i].Name(), domains[i].Len())
				}
			}
			var meanAcc float64
			for _, d := range rep.Domains {
				meanAcc += d.Accuracy / 3
			}
			if rep.Mean != meanAcc {
				t.Errorf("mean accuracy %v, want %v", rep.Mean, meanAcc)
			}
			// JSONL: one record per batch with the diagnostics.
			sc := bufio.NewScanner(&log)
			sc.Buffer(nil, 1<<20)
			var recs []BatchRecord
			for sc.Scan() {
				var rec BatchRecord
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					t.Fatalf("log line %d: %v", len(recs), err)
				}
				recs = append(recs, rec)
			}
			if len(recs) != len(tc.wantSizes) {
				t.Fatalf("%d log records, want %d", len(recs), len(tc.wantSizes))
			}
			var streams []string
			for i, rec := range recs {
				if len(streams) == 0 || streams[len(streams)-1] != rec.Stream {
					streams = append(streams, rec.Stream)
				}
				if rec.Size != tc.wantSizes[i] || rec.Steps != 2 || len(rec.PrincipalCosines) != s.Text.Rank() ||
					rec.SemanticConcentration == nil || *rec.SemanticConcentration < 0 || *rec.SemanticConcentration > 1+1e-12 ||
					rec.PredictedClassCosine == nil || rec.Losses["align"] >= 0 {
					t.Errorf("log record %d: %+v", i, rec)
				}
			}
			if !slices.Equal(streams, tc.streams) {
				t.Errorf("streams %v, want %v", streams, tc.streams)
			}
		})
	}
}

// TestRunnerOrder checks an explicit order and rejects a bad one.
func TestRunnerOrder(t *testing.T) {
	d := &randomDomain{name: "d", pixels: make([][]float32, 4), labels: []int{0, 1, 2, 3}}
	rec := &recorder{}
	r := Runner{Method: rec, Config: RunnerConfig{BatchSize: 3, Order: func(string, int) ([]int, error) { return []int{2, 0, 3, 1}, nil }}}
	rep, err := r.Run([]Domain{d})
	if err != nil {
		t.Fatal(err)
	}
	// The recorder predicts class 0 for everything: only sample 0 is right.
	if !slices.Equal(rec.sizes, []int{3, 1}) || rep.Domains[0].Correct != 1 || rep.Domains[0].Accuracy != 25 {
		t.Errorf("sizes %v, report %+v", rec.sizes, rep.Domains[0])
	}
	r.Config.Order = func(string, int) ([]int, error) { return []int{0, 0, 1, 2}, nil }
	if _, err := r.Run([]Domain{d}); err == nil {
		t.Error("accepted an order that is not a permutation")
	}
}

// TestRunnerResume: the batches Resume says were done are neither fetched
// nor stepped nor counted, and a count beyond the stream is an error.
func TestRunnerResume(t *testing.T) {
	d := &randomDomain{name: "d", pixels: make([][]float32, 7), labels: []int{0, 1, 0, 1, 0, 1, 0}}
	tests := []struct {
		skip    int
		sizes   []int
		correct int
		err     string
	}{
		{0, []int{3, 3, 1}, 4, ""},
		{1, []int{3, 1}, 2, ""},
		{2, []int{1}, 1, ""},
		{3, nil, 0, ""}, // all three batches were done
		{4, nil, 0, "resume after 4 batches"},
		{-1, nil, 0, "resume after -1 batches"},
	}
	for _, tc := range tests {
		rec := &recorder{}
		var batches []int
		r := Runner{Method: rec, Config: RunnerConfig{BatchSize: 3,
			Resume:  func(string) (int, error) { return tc.skip, nil },
			OnBatch: func(b BatchRecord) error { batches = append(batches, b.Batch); return nil }}}
		rep, err := r.Run([]Domain{d})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("skip %d: err = %v, want %q", tc.skip, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("skip %d: %v", tc.skip, err)
		}
		if !slices.Equal(rec.sizes, tc.sizes) || rep.Domains[0].Correct != tc.correct || rep.Domains[0].Samples != max(7-3*tc.skip, 0) {
			t.Errorf("skip %d: sizes %v, report %+v; want sizes %v, %d correct", tc.skip, rec.sizes, rep.Domains[0], tc.sizes, tc.correct)
		}
		if len(batches) > 0 && batches[0] != tc.skip {
			t.Errorf("skip %d: first batch index %d", tc.skip, batches[0])
		}
	}
}

// TestRunnerMixedDomainCounts: each batch of the mixed stream breaks its
// size and correct predictions down by domain, and those add up to the
// report's per-domain counts.
func TestRunnerMixedDomainCounts(t *testing.T) {
	a := &randomDomain{name: "a", pixels: make([][]float32, 5), labels: []int{0, 1, 0, 0, 1}}
	b := &randomDomain{name: "b", pixels: make([][]float32, 4), labels: []int{1, 0, 1, 0}}
	var recs []BatchRecord
	r := Runner{Method: &recorder{}, Config: RunnerConfig{Protocol: Mixed, BatchSize: 4, Shuffle: true, Seed: 1,
		OnBatch: func(rec BatchRecord) error { recs = append(recs, rec); return nil }}}
	rep, err := r.Run([]Domain{a, b})
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]DomainResult{}
	for _, rec := range recs {
		size, correct := 0, 0
		for _, c := range rec.Domains {
			size += c.Size
			correct += c.Correct
			s := sum[c.Name]
			s.Samples += c.Size
			s.Correct += c.Correct
			sum[c.Name] = s
		}
		if rec.Stream != MixedStream || size != rec.Size || correct != rec.Correct {
			t.Errorf("batch %d of %s: %d images, %d correct; its domains %+v", rec.Batch, rec.Stream, rec.Size, rec.Correct, rec.Domains)
		}
	}
	for _, d := range rep.Domains {
		if s := sum[d.Name]; s.Samples != d.Samples || s.Correct != d.Correct {
			t.Errorf("%s: batches say %d of %d correct, the report %d of %d", d.Name, s.Correct, s.Samples, d.Correct, d.Samples)
		}
	}
}

// recorder is a Method that predicts class 0 and records batch sizes.
type recorder struct{ sizes []int }

func (r *recorder) Name() string { return "recorder" }
func (r *recorder) Reset() error { return nil }
func (r *recorder) Step(px []float32, n int) (*Result, error) {
	r.sizes = append(r.sizes, n)
	return &Result{Preds: make([]int, n)}, nil
}

func ExamplePythonShuffle() {
	// The official code's stream order: random.seed(1); random.shuffle(l).
	fmt.Println(PythonShuffle(10, 1))
	// Output: [6 8 9 7 5 3 0 4 1 2]
}
