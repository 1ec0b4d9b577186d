package online

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/internal/fxt"
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

// TestRunnerOrder checks an explicit order and rejects a bad one.
func TestRunnerOrder(t *testing.T) {
	d := fxt.NewDomain("d", make([][]float32, 4), []int{0, 1, 2, 3})
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
	d := fxt.NewDomain("d", make([][]float32, 7), []int{0, 1, 0, 1, 0, 1, 0})
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
	a := fxt.NewDomain("a", make([][]float32, 5), []int{0, 1, 0, 0, 1})
	b := fxt.NewDomain("b", make([][]float32, 4), []int{1, 0, 1, 0})
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

// TestRunnerMeanLeavesOutEmptyDomains: the mean accuracy is over the
// domains that have samples; an empty one is not a 0%.
func TestRunnerMeanLeavesOutEmptyDomains(t *testing.T) {
	a := fxt.NewDomain("a", make([][]float32, 4), []int{0, 0, 1, 1}) // the recorder predicts 0: 50%
	empty := fxt.NewDomain("empty", nil, nil)
	rep, err := (&Runner{Method: &recorder{}, Config: RunnerConfig{BatchSize: 2}}).Run([]Domain{a, empty})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mean != 50 {
		t.Errorf("mean %v, want 50 (the empty domain left out)", rep.Mean)
	}
}

// recorder is a Method that predicts class 0 and records batch sizes.
type recorder struct {
	tta.Stateless
	sizes []int
	// events lists the calls: "R" for Reset, "r" for ResetSample, "s" for
	// Step.
	events string
}

func (r *recorder) Name() string       { return "recorder" }
func (r *recorder) Reset() error       { r.events += "R"; return nil }
func (r *recorder) ResetSample() error { r.events += "r"; return nil }
func (r *recorder) Step(px []float32, n int) (*tta.Result, error) {
	r.sizes = append(r.sizes, n)
	r.events += "s"
	return &tta.Result{Preds: make([]int, n)}, nil
}

func ExamplePythonShuffle() {
	// The official code's stream order: random.seed(1); random.shuffle(l).
	fmt.Println(PythonShuffle(10, 1))
	// Output: [6 8 9 7 5 3 0 4 1 2]
}

// TestRunnerEpisodic: the episodic protocol resets the method before every
// domain and its weights before every sample, and refuses batches of more
// than one sample.
func TestRunnerEpisodic(t *testing.T) {
	a := fxt.NewDomain("a", make([][]float32, 3), []int{0, 1, 0})
	b := fxt.NewDomain("b", make([][]float32, 2), []int{1, 0})
	rec := &recorder{}
	r := Runner{Method: rec, Config: RunnerConfig{Protocol: Episodic, BatchSize: 1, Shuffle: true, Seed: 1}}
	rep, err := r.Run([]Domain{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if want := "RrsrsrsRrsrs"; rec.events != want || rep.Protocol != "episodic" {
		t.Errorf("calls %q under %s, want %q under episodic", rec.events, rep.Protocol, want)
	}
	r.Config.BatchSize = 2
	if _, err := r.Run([]Domain{a}); err == nil || !strings.Contains(err.Error(), "batch size 2") {
		t.Errorf("batch size 2: err = %v, want a refusal", err)
	}
	if p, err := ParseProtocol("episodic"); err != nil || p != Episodic {
		t.Errorf("ParseProtocol(episodic) = %v, %v", p, err)
	}
	if _, err := ParseProtocol("sideways"); !errors.Is(err, ErrUnknownProtocol) {
		t.Errorf("ParseProtocol(sideways): err = %v, want ErrUnknownProtocol", err)
	}
}

// viewRecorder is a MultiView method that records what StepViews gets.
type viewRecorder struct {
	recorder
	v     int
	calls [][2]int // n, v
	first []float32
}

func (r *viewRecorder) Views() int             { return r.v }
func (r *viewRecorder) ViewKind() tta.ViewKind { return tta.CropFlip }
func (r *viewRecorder) Step([]float32, int) (*tta.Result, error) {
	return nil, tta.ErrNeedsViews
}
func (r *viewRecorder) StepViews(px []float32, n, v int) (*tta.Result, error) {
	r.calls = append(r.calls, [2]int{n, v})
	r.first = append(r.first, px[0])
	return &tta.Result{Preds: make([]int, n)}, nil
}

// viewDomain gives views whose first value encodes (seed, index, view).
type viewDomain struct{ *fxt.RandomDomain }

func (d viewDomain) ViewSamples(idx []int, v int, _ tta.ViewKind, seed uint64, dst []float32) ([]float32, []int, error) {
	var labels []int
	for _, i := range idx {
		for k := range v {
			dst = append(dst, float32(1000*seed)+float32(10*i+k), 0)
		}
		_, l, _ := d.Sample(i)
		labels = append(labels, l)
	}
	return dst, labels, nil
}

// TestRunnerViews: a MultiView method gets v views of every image from a
// ViewDomain, seeded with the run's seed, and a domain without views is
// refused.
func TestRunnerViews(t *testing.T) {
	d := viewDomain{fxt.NewDomain("d", make([][]float32, 3), []int{0, 1, 0})}
	rec := &viewRecorder{v: 3}
	r := Runner{Method: rec, Config: RunnerConfig{BatchSize: 2, Seed: 7}}
	if _, err := r.Run([]Domain{d}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rec.calls) != "[[2 3] [1 3]]" || fmt.Sprint(rec.first) != "[7000 7020]" {
		t.Errorf("StepViews calls %v, first values %v", rec.calls, rec.first)
	}
	if _, err := r.Run([]Domain{d.RandomDomain}); err == nil || !strings.Contains(err.Error(), "views") {
		t.Errorf("a domain without views: err = %v", err)
	}
}
