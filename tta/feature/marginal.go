package feature

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// MarginalResult is MarginalEntropy's value and gradient.
type MarginalResult struct {
	// Loss is H(p̄) = −Σ_k p̄_k·log p̄_k.
	Loss float64
	// LogMean is log p̄ (C), the averaged log-probabilities the official
	// code returns beside the loss (memo.avg_log_probs).
	LogMean []float64
	// DLdLogits is ∂Loss/∂logits (V×C, the shape of the input); rows of
	// views outside the average are zero.
	DLdLogits *mat.Dense
}

// MarginalEntropy is the marginal (average) entropy of TPT, MEMO and STS
// (spec §0.6; [TPT] tpt_classification.py avg_entropy, [H]
// classification/methods/memo.py marginal_entropy) over the given rows of
// the view logits (V×C); rows nil means every view (MEMO), otherwise the
// selected views (TPT: Selection.Kept). With p_v = softmax(z_v) and V′
// rows, p̄ = (1/V′)·Σ_v p_v is formed in log space,
//
//	ℓ = log p̄ = logsumexp_v log p_v − log V′,   H = −Σ_k exp(ℓ_k)·ℓ_k,
//
// with ℓ clamped below at the most negative float (the code's
// finfo.min clamp, so a class with p̄ = 0 adds 0, not NaN). The gradient is
//
//	∂H/∂z_{v,k} = −(1/V′)·p_{v,k}·(ℓ_k − Σ_c p_{v,c}·ℓ_c).
//
// A row listed twice counts twice, as indexing does in the code.
func MarginalEntropy(logits mat.Matrix, rows []int) (*MarginalResult, error) {
	v, c := logits.Dims()
	if v < 1 || c < 1 {
		return nil, fmt.Errorf("feature: marginal entropy of empty logits (%d×%d)", v, c)
	}
	if rows == nil {
		rows = make([]int, v)
		for i := range rows {
			rows[i] = i
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: marginal entropy over no views", ErrEmptySelection)
	}
	n := len(rows)
	logp := make([][]float64, n)
	for a, i := range rows {
		if i < 0 || i >= v {
			return nil, fmt.Errorf("feature: marginal entropy: view %d outside 0..%d", i, v-1)
		}
		logp[a] = make([]float64, c)
		if err := logSoftmaxRow(logp[a], logits, i); err != nil {
			return nil, err
		}
	}
	ell := make([]float64, c)
	col := make([]float64, n)
	for k := range c {
		for a := range n {
			col[a] = logp[a][k]
		}
		ell[k] = math.Max(logSumExpInf(col)-math.Log(float64(n)), -math.MaxFloat64)
	}
	var loss float64
	for _, l := range ell {
		loss -= math.Exp(l) * l
	}
	grad := mat.NewDense(v, c, nil)
	for a, i := range rows {
		p := make([]float64, c)
		var mean float64
		for k, lp := range logp[a] {
			p[k] = math.Exp(lp)
			mean += p[k] * ell[k]
		}
		g := grad.RawRowView(i)
		for k := range c {
			g[k] -= p[k] * (ell[k] - mean) / float64(n)
		}
	}
	return &MarginalResult{Loss: loss, LogMean: slices.Clone(ell), DLdLogits: grad}, nil
}

// logSumExpInf is logSumExp that returns −Inf when every entry is −Inf
// (logSumExp would give NaN there).
func logSumExpInf(x []float64) float64 {
	for _, v := range x {
		if !math.IsInf(v, -1) {
			return logSumExp(x)
		}
	}
	return math.Inf(-1)
}

// MarginalLossResult is MarginalEntropyLoss's result on one image's views.
type MarginalLossResult struct {
	// Logits are scale·normalize(F)·Tᵀ (V×C).
	Logits *mat.Dense
	// Marginal is MarginalEntropy of Logits over the rows asked for.
	Marginal *MarginalResult
	// DLdF is ∂Loss/∂F (V×d), zero in rows outside the average.
	DLdF *mat.Dense
}

// MarginalEntropyLoss is [MarginalEntropy] on the zero-shot logits of
// unnormalised view features f (V×d) with text features t (C×d), scale =
// exp(logit_scale), with the gradient carried back to f through the
// logits and the normalisation: the loss MEMO back-propagates into the
// vision tower ([H] classification/methods/memo.py, rows nil), as
// TentLoss is TENT's.
func MarginalEntropyLoss(f, t mat.Matrix, scale float64, rows []int) (*MarginalLossResult, error) {
	if err := checkFeatures(f, t, "marginal entropy"); err != nil {
		return nil, err
	}
	fn, norms := NormalizeRows(f)
	logits := Logits(fn, t, scale)
	m, err := MarginalEntropy(logits, rows)
	if err != nil {
		return nil, err
	}
	var dfn mat.Dense
	dfn.Mul(m.DLdLogits, t)
	dfn.Scale(scale, &dfn)
	return &MarginalLossResult{Logits: logits, Marginal: m, DLdF: normalizeRowsBackward(fn, norms, &dfn)}, nil
}
