package online

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
)

// fixedFeatures is a method that returns stored features and predictions
// for each batch in turn.
type fixedFeatures struct {
	tta.Stateless
	f     []*mat.Dense
	preds [][]int
	next  int
}

func (m *fixedFeatures) Name() string       { return "fixed" }
func (m *fixedFeatures) Reset() error       { return nil }
func (m *fixedFeatures) ResetSample() error { return nil }
func (m *fixedFeatures) Step(px []float32, n int) (*tta.Result, error) {
	k := m.next
	m.next++
	return &tta.Result{Features: m.f[k], Preds: m.preds[k]}, nil
}

// TestTrueClassCosineFixture: on the SubTTA fixture's prediction features
// F3, the cosine to the ground-truth class is logits[i, y]/exp(logit_scale)
// for any labels y (the logits are exp(logit_scale)·cos(F3, T)); per image
// it equals the cosine to the predicted class exactly where the prediction
// is right.
func TestTrueClassCosineFixture(t *testing.T) {
	x := fxt.Open(t, "fixtures/subtta_fp64.safetensors")
	text := x.Dense("text.T")
	c, _ := text.Dims()
	ls := x.Scalar("logit_scale_exp")
	m := &fixedFeatures{}
	var labels []int
	var want []float64
	for k := range x.Batches("b", "F3") {
		b := fmt.Sprintf("b%d.", k)
		f3 := x.Dense(b + "F3")
		preds := x.Ints(b + "preds")
		logits := x.Dense(b + "logits")
		m.f, m.preds = append(m.f, f3), append(m.preds, preds)
		for i, p := range preds {
			y := p // every other image labelled as predicted, the others not
			if i%2 == 1 {
				y = (p + 1 + i%(c-1)) % c
			}
			labels = append(labels, y)
			want = append(want, logits.At(i, y)/ls)
		}
	}
	n := len(m.preds[0])
	d := fxt.NewDomain("d", make([][]float32, len(labels)), labels)
	var recs []BatchRecord
	r := Runner{Method: m, Config: RunnerConfig{BatchSize: n, Head: text, OnBatch: func(b BatchRecord) error {
		recs = append(recs, b)
		return nil
	}}}
	if _, err := r.Run([]Domain{d}); err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(m.f) {
		t.Fatalf("%d batch records, want %d", len(recs), len(m.f))
	}
	for k, rec := range recs {
		sc := rec.SampleCosines
		if sc == nil || rec.TrueClassCosine == nil || len(sc.True) != len(m.preds[k]) {
			t.Fatalf("batch %d: no cosines: %+v", k, rec)
		}
		fxt.Compare(t, fmt.Sprintf("batch %d: cosine to the true class", k), sc.True, want[k*n:(k+1)*n], 1e-12, fxt.Rel)
		var mean float64
		for i, v := range sc.True {
			mean += v / float64(len(sc.True))
			right := m.preds[k][i] == labels[k*n+i]
			if sc.Correct[i] != right || (right && sc.True[i] != sc.Predicted[i]) || (!right && sc.True[i] == sc.Predicted[i]) {
				t.Errorf("batch %d image %d: correct %v (want %v), cosines %v and %v", k, i, sc.Correct[i], right, sc.Predicted[i], sc.True[i])
			}
		}
		if math.Abs(*rec.TrueClassCosine-mean) > 1e-15 {
			t.Errorf("batch %d: mean %v, want %v", k, *rec.TrueClassCosine, mean)
		}
	}
}

// TestPrincipalCosinesWithoutAlignment: for a method without an alignment
// of its own, a batch record's principal-angle cosines are, bit for bit,
// those of Align's B_V with α = 0 (the batch covariance alone) against the
// text subspace's B_T.
func TestPrincipalCosinesWithoutAlignment(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	head, _ := feature.NormalizeRows(fxt.RandDense(rng, 40, 32, 1))
	ts, err := feature.NewTextSubspace(head, feature.SubspaceOptions{Rank: 12})
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	m := &fixedFeatures{}
	var labels []int
	for range 3 {
		preds := make([]int, n)
		for i := range preds {
			preds[i] = rng.IntN(40)
			labels = append(labels, rng.IntN(40))
		}
		m.f, m.preds = append(m.f, fxt.RandDense(rng, n, 32, 1)), append(m.preds, preds)
	}
	d := fxt.NewDomain("d", make([][]float32, len(labels)), labels)
	var recs []BatchRecord
	r := Runner{Method: m, Config: RunnerConfig{BatchSize: n, Text: ts, Head: head, OnBatch: func(b BatchRecord) error {
		recs = append(recs, b)
		return nil
	}}}
	if _, err := r.Run([]Domain{d}); err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(m.f) {
		t.Fatalf("%d batch records, want %d", len(recs), len(m.f))
	}
	for k, rec := range recs {
		a, err := feature.Align(m.f[k], ts.Cov, ts, feature.AlignOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, err := feature.PrincipalAngleCosines(a.Basis, ts.Basis)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.PrincipalCosines) != len(want) {
			t.Fatalf("batch %d: %d cosines, want %d", k, len(rec.PrincipalCosines), len(want))
		}
		for i, w := range want {
			if math.Float64bits(rec.PrincipalCosines[i]) != math.Float64bits(w) {
				t.Errorf("batch %d: cosine %d is %v, Align's basis gives %v", k, i, rec.PrincipalCosines[i], w)
			}
		}
	}
}
