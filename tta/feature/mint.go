package feature

import (
	"fmt"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// MINTState is MINT's per-domain state as implemented in the SubTTA repo:
// cumulative, detached class sums of the normalised features before and
// after adaptation, with the loss (Loss) and the prediction (Predict) that
// read them. The MINT method around it restores the source weights and a
// fresh optimizer for every batch, steps once with the running mean of all
// batch gradients (optim.GradMean), re-encodes, and calls Predict.
type MINTState struct {
	// Scale multiplies the cosine logits (the code uses a literal 100).
	Scale float64
	// PriorN is N0 in the mixing ratio n/(N0+n) (10000).
	PriorN float64

	classes, dim int
	preSums      *mat.Dense
	preN         []float64
	postSums     *mat.Dense
	postN        []float64
	seen         int
}

// NewMINTState returns empty MINT state for classes×dim text features.
func NewMINTState(classes, dim int, scale, priorN float64) (*MINTState, error) {
	if classes < 1 || dim < 1 || !(priorN >= 0) {
		return nil, fmt.Errorf("feature: mint: bad sizes classes=%d dim=%d N0=%v", classes, dim, priorN)
	}
	m := &MINTState{Scale: scale, PriorN: priorN, classes: classes, dim: dim}
	m.Reset()
	return m, nil
}

// Reset clears the accumulators (at the start of each domain).
func (m *MINTState) Reset() {
	m.preSums = mat.NewDense(m.classes, m.dim, nil)
	m.preN = make([]float64, m.classes)
	m.postSums = mat.NewDense(m.classes, m.dim, nil)
	m.postN = make([]float64, m.classes)
	m.seen = 0
}

// ClassSums returns the cumulative pre-adaptation class sums and counts.
func (m *MINTState) ClassSums() (*mat.Dense, []float64) {
	return mat.DenseCopyOf(m.preSums), append([]float64(nil), m.preN...)
}

// MINTResult is MINTState.Loss's result on one batch.
type MINTResult struct {
	Fn    *mat.Dense // normalised features
	Preds []int      // argmax(Scale·Fn·normalize(T)ᵀ), the pseudo-labels
	Loss  float64
	DLdFn *mat.Dense // ∂Loss/∂Fn
	DLdF  *mat.Dense // ∂Loss/∂F
}

// accumulate classifies the L2-normalised features f against the text
// features t and adds each normalised row to its class's running sum and
// count (the detached class statistics MINT keeps before and after
// adaptation). It returns the normalised features, their norms and the
// predicted classes.
func (m *MINTState) accumulate(f, t mat.Matrix, sums *mat.Dense, counts []float64) (*mat.Dense, []float64, []int, error) {
	if err := checkFeatures(f, t, "mint"); err != nil {
		return nil, nil, nil, err
	}
	if c, d := t.Dims(); c != m.classes || d != m.dim {
		return nil, nil, nil, fmt.Errorf("feature: mint: text features %d×%d, state %d×%d", c, d, m.classes, m.dim)
	}
	_, d := f.Dims()
	fn, norms := NormalizeRows(f)
	tn, _ := NormalizeRows(t)
	preds := Argmax(Logits(fn, tn, m.Scale))
	for i, y := range preds {
		row := sums.RawRowView(y)
		for j := range d {
			row[j] += fn.At(i, j)
		}
		counts[y]++
	}
	return fn, norms, preds, nil
}

// Loss adds the batch to the cumulative class sums, then returns
//
//	L = −(Σ_i w_i‖fn_i − μ‖² − Σ_i w_i‖fn_i − μ_{y_i}‖²),  w_i = 1/(K·n_{y_i}),
//
// with μ and μ_c the cumulative (detached) overall and class means, K the
// number of classes present in the batch and n their in-batch counts.
func (m *MINTState) Loss(f, t mat.Matrix) (*MINTResult, error) {
	fn, norms, preds, err := m.accumulate(f, t, m.preSums, m.preN)
	if err != nil {
		return nil, err
	}
	b, d := f.Dims()
	var total float64
	mu := make([]float64, d)
	for c := range m.classes {
		total += m.preN[c]
		row := m.preSums.RawRowView(c)
		for j := range d {
			mu[j] += row[j]
		}
	}
	scale(mu, 1/total)
	classes, rows := classGroups(preds)
	k := float64(len(classes))
	var loss float64
	dfn := mat.NewDense(b, d, nil)
	for i, y := range preds {
		w := 1 / (k * float64(len(rows[y])))
		muY := m.preSums.RawRowView(y)
		var toAll, toClass float64
		g := dfn.RawRowView(i)
		for j := range d {
			x := fn.At(i, j)
			my := muY[j] / m.preN[y]
			toAll += (x - mu[j]) * (x - mu[j])
			toClass += (x - my) * (x - my)
			g[j] = -2 * w * (my - mu[j])
		}
		loss -= w * (toAll - toClass)
	}
	return &MINTResult{
		Fn:    fn,
		Preds: preds,
		Loss:  loss,
		DLdFn: dfn,
		DLdF:  normalizeRowsBackward(fn, norms, dfn),
	}, nil
}

// MINTPrediction is MINTState.Predict's result: MINT's output on a batch
// after adaptation.
type MINTPrediction struct {
	PostPreds []int      // argmax(Scale·normalize(F′)·normalize(T)ᵀ)
	Ratio     float64    // n/(N0+n), n the samples seen in the domain
	Weights   *mat.Dense // normalize((1−ρ)·T + ρ·μ′_c), μ′_c = 0 for unseen classes
	Logits    *mat.Dense // Scale·normalize(F′)·Weightsᵀ
	Preds     []int
}

// Predict adds the re-encoded features fPost (B×d) to the post-adaptation
// class sums and classifies them with the text weights mixed towards the
// post-adaptation class means.
func (m *MINTState) Predict(fPost, t mat.Matrix) (*MINTPrediction, error) {
	fn, _, post, err := m.accumulate(fPost, t, m.postSums, m.postN)
	if err != nil {
		return nil, err
	}
	b, d := fPost.Dims()
	m.seen += b
	n := float64(m.seen)
	ratio := n / (m.PriorN + n)
	w := mat.NewDense(m.classes, d, nil)
	for c := range m.classes {
		row := w.RawRowView(c)
		for j := range d {
			var mu float64
			if m.postN[c] > 0 {
				mu = m.postSums.At(c, j) / m.postN[c]
			}
			row[j] = (1-ratio)*t.At(c, j) + ratio*mu
		}
	}
	w, _ = NormalizeRows(w)
	logits := Logits(fn, w, m.Scale)
	return &MINTPrediction{PostPreds: post, Ratio: ratio, Weights: w, Logits: logits, Preds: Argmax(logits)}, nil
}

// MINTSums are a MINTState's class sums and counts before and after
// adaptation (C×d row-major, and C) and the samples seen: what a saved
// state must hold to continue the domain.
type MINTSums struct {
	PreSums, PostSums []float64
	PreN, PostN       []float64
	Seen              int
}

// Sums returns a copy of the state's sums.
func (m *MINTState) Sums() MINTSums {
	return MINTSums{
		PreSums: slices.Clone(m.preSums.RawMatrix().Data), PostSums: slices.Clone(m.postSums.RawMatrix().Data),
		PreN: slices.Clone(m.preN), PostN: slices.Clone(m.postN), Seen: m.seen,
	}
}

// SetSums replaces the state's sums with s after checking that they fit
// its classes and width; on an error nothing changes.
func (m *MINTState) SetSums(s MINTSums) error {
	c, d := m.classes, m.dim
	if len(s.PreSums) != c*d || len(s.PostSums) != c*d || len(s.PreN) != c || len(s.PostN) != c {
		return fmt.Errorf("feature: mint: saved class sums do not fit %d classes × %d dims", c, d)
	}
	m.preSums, m.postSums = mat.NewDense(c, d, slices.Clone(s.PreSums)), mat.NewDense(c, d, slices.Clone(s.PostSums))
	m.preN, m.postN, m.seen = slices.Clone(s.PreN), slices.Clone(s.PostN), s.Seen
	return nil
}
