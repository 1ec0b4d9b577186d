package feature

import (
	"math"

	"gonum.org/v1/gonum/mat"
)

// BATCLIPResult is BATCLIPLoss's result on one batch.
type BATCLIPResult struct {
	Logits    *mat.Dense // scale·normalize(F)·Tᵀ, the (pre-update) prediction
	Preds     []int      // argmax of Logits, also the pseudo-labels
	Loss      float64    // Entropy − I2T − InterMean
	Entropy   float64    // mean class entropy
	I2T       float64    // mean over present classes l of mean(F[y=l])·T[l]
	InterMean float64    // Σ over ordered pairs l≠m of 1 − cos(μ_l, μ_m)
	DLdF      *mat.Dense // ∂Loss/∂F (B×d)
}

// BATCLIPLoss computes BATCLIP's loss (as in the SubTTA repo, text frozen)
// on the unnormalised image features f (B×d). Class means μ_l are of the
// unnormalised features, as in the official code.
func BATCLIPLoss(f, t mat.Matrix, logitScale float64) (*BATCLIPResult, error) {
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
