package tta

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// TentResult is TENT's loss on one batch.
type TentResult struct {
	Logits *mat.Dense // scale·normalize(F)·Tᵀ, the (pre-update) prediction
	Preds  []int
	Loss   float64    // mean entropy of softmax(Logits)
	DLdF   *mat.Dense // ∂Loss/∂F (B×d)
}

// Tent computes TENT's loss (mean class entropy of CLIP's zero-shot softmax)
// on the unnormalised image features f (B×d) with text features t (C×d),
// scale = exp(logit_scale).
func Tent(f, t mat.Matrix, scale float64) (*TentResult, error) {
	if err := checkFeatures(f, t, "tent"); err != nil {
		return nil, err
	}
	fn, norms := NormalizeRows(f)
	logits := Logits(fn, t, scale)
	loss, dlogits := EntropyLoss(logits)
	var dfn mat.Dense
	dfn.Mul(dlogits, t)
	dfn.Scale(scale, &dfn)
	return &TentResult{
		Logits: logits,
		Preds:  Argmax(logits),
		Loss:   loss,
		DLdF:   normalizeRowsBackward(fn, norms, &dfn),
	}, nil
}

// BATCLIPResult is BATCLIP's loss on one batch.
type BATCLIPResult struct {
	Logits    *mat.Dense // scale·normalize(F)·Tᵀ, the (pre-update) prediction
	Preds     []int      // argmax of Logits, also the pseudo-labels
	Loss      float64    // Entropy − I2T − InterMean
	Entropy   float64    // mean class entropy
	I2T       float64    // mean over present classes l of mean(F[y=l])·T[l]
	InterMean float64    // Σ over ordered pairs l≠m of 1 − cos(μ_l, μ_m)
	DLdF      *mat.Dense // ∂Loss/∂F (B×d)
}

// BATCLIP computes BATCLIP's loss (as in the SubTTA repo, text frozen) on the
// unnormalised image features f (B×d). Class means μ_l are of the
// unnormalised features, as in the official code.
func BATCLIP(f, t mat.Matrix, logitScale float64) (*BATCLIPResult, error) {
	if err := checkFeatures(f, t, "batclip"); err != nil {
		return nil, err
	}
	_, d := f.Dims()
	fn, norms := NormalizeRows(f)
	logits := Logits(fn, t, logitScale)
	preds := Argmax(logits)
	ent, dlogits := EntropyLoss(logits)
	var dfn mat.Dense
	dfn.Mul(dlogits, t)
	dfn.Scale(logitScale, &dfn)
	df := normalizeRowsBackward(fn, norms, &dfn)

	classes, rows := classGroups(preds)
	k := len(classes)
	means := make([][]float64, k)
	unit := make([][]float64, k)
	mnorm := make([]float64, k)
	for a, c := range classes {
		means[a] = colMean(f, rows[c])
		mnorm[a] = math.Sqrt(dot(means[a], means[a]))
		unit[a] = append([]float64(nil), means[a]...)
		scale(unit[a], 1/math.Max(mnorm[a], normEps))
	}
	// ∂Loss/∂μ_a, accumulated from both terms.
	dmu := make([][]float64, k)
	var i2t float64
	for a, c := range classes {
		dmu[a] = make([]float64, d)
		tc := mat.Row(nil, c, t)
		i2t += dot(means[a], tc)
		for j := range d {
			dmu[a][j] -= tc[j] / float64(k)
		}
	}
	i2t /= float64(k)
	var inter float64
	for a := range k {
		for c := range k {
			if a == c {
				continue
			}
			cos := dot(unit[a], unit[c])
			inter += 1 - cos
			// −InterMean contributes +∂cos/∂μ for each ordered pair.
			for j := range d {
				dmu[a][j] += (unit[c][j] - cos*unit[a][j]) / math.Max(mnorm[a], normEps)
				dmu[c][j] += (unit[a][j] - cos*unit[c][j]) / math.Max(mnorm[c], normEps)
			}
		}
	}
	for a, c := range classes {
		n := float64(len(rows[c]))
		for _, i := range rows[c] {
			row := df.RawRowView(i)
			for j := range d {
				row[j] += dmu[a][j] / n
			}
		}
	}
	return &BATCLIPResult{
		Logits:    logits,
		Preds:     preds,
		Loss:      ent - i2t - inter,
		Entropy:   ent,
		I2T:       i2t,
		InterMean: inter,
		DLdF:      df,
	}, nil
}

// MINT is the state of MINT as implemented in the SubTTA repo: cumulative,
// detached class sums of the normalised features before and after
// adaptation, over one domain. The method around it restores the source
// weights and a fresh optimizer for every batch, steps once with the running
// mean of all batch gradients (GradMean), re-encodes, and calls Predict.
type MINT struct {
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

// NewMINT returns MINT state for classes×dim text features.
func NewMINT(classes, dim int, scale, priorN float64) (*MINT, error) {
	if classes < 1 || dim < 1 || !(priorN >= 0) {
		return nil, fmt.Errorf("tta: mint: bad sizes classes=%d dim=%d N0=%v", classes, dim, priorN)
	}
	m := &MINT{Scale: scale, PriorN: priorN, classes: classes, dim: dim}
	m.Reset()
	return m, nil
}

// Reset clears the accumulators (at the start of each domain).
func (m *MINT) Reset() {
	m.preSums = mat.NewDense(m.classes, m.dim, nil)
	m.preN = make([]float64, m.classes)
	m.postSums = mat.NewDense(m.classes, m.dim, nil)
	m.postN = make([]float64, m.classes)
	m.seen = 0
}

// ClassSums returns the cumulative pre-adaptation class sums and counts.
func (m *MINT) ClassSums() (*mat.Dense, []float64) {
	return mat.DenseCopyOf(m.preSums), append([]float64(nil), m.preN...)
}

// MINTLoss is MINT's loss on one batch.
type MINTLoss struct {
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
func (m *MINT) accumulate(f, t mat.Matrix, sums *mat.Dense, counts []float64) (*mat.Dense, []float64, []int, error) {
	if err := checkFeatures(f, t, "mint"); err != nil {
		return nil, nil, nil, err
	}
	if c, d := t.Dims(); c != m.classes || d != m.dim {
		return nil, nil, nil, fmt.Errorf("tta: mint: text features %d×%d, state %d×%d", c, d, m.classes, m.dim)
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
func (m *MINT) Loss(f, t mat.Matrix) (*MINTLoss, error) {
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
	return &MINTLoss{
		Fn:    fn,
		Preds: preds,
		Loss:  loss,
		DLdFn: dfn,
		DLdF:  normalizeRowsBackward(fn, norms, dfn),
	}, nil
}

// MINTPrediction is MINT's output on a batch after adaptation.
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
func (m *MINT) Predict(fPost, t mat.Matrix) (*MINTPrediction, error) {
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

func checkFeatures(f, t mat.Matrix, what string) error {
	b, d := f.Dims()
	c, td := t.Dims()
	if b < 1 || c < 1 {
		return fmt.Errorf("tta: %s: empty features (%d×%d) or text (%d×%d)", what, b, d, c, td)
	}
	if d != td {
		return fmt.Errorf("tta: %s: features have %d dims, text features %d", what, d, td)
	}
	return nil
}
