package feature

import "gonum.org/v1/gonum/mat"

// TentResult is TentLoss's result on one batch.
type TentResult struct {
	Logits *mat.Dense // scale·normalize(F)·Tᵀ, the (pre-update) prediction
	Preds  []int
	Loss   float64    // mean entropy of softmax(Logits)
	DLdF   *mat.Dense // ∂Loss/∂F (B×d)
}

// TentLoss computes TENT's loss (mean class entropy of CLIP's zero-shot
// softmax) on the unnormalised image features f (B×d) with text features t
// (C×d), scale = exp(logit_scale).
func TentLoss(f, t mat.Matrix, scale float64) (*TentResult, error) {
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
