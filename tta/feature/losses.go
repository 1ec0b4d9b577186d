package feature

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/zeroshot"
)

// Projected holds Z = normalize(F·Pᵀ + λ·F) and what its backward needs.
type Projected struct {
	Z     *mat.Dense // B×d, unit rows
	p     mat.Matrix
	soft  float64
	norms []float64
	dev   kernel.Float64Device // where the product ran, or nil
}

// Project maps the features f (B×d) into the subspace of the projector p
// (d×d) and normalises the rows: Z = normalize(f·pᵀ + soft·f). soft = 0 is
// the official code's hard projection; soft > 0 is the paper's suggested
// "soft projection", which keeps a share of the orthogonal complement.
// With a kernel.Float64Device set (autograd.SetDevice: a GPU) the product
// runs there in float64, with P + soft·I kept on the device from one call
// to the next (f goes up, the product comes back), equal to the CPU's
// within rounding.
func Project(f mat.Matrix, p mat.Matrix, soft float64) (*Projected, error) {
	_, d := f.Dims()
	if pr, pc := p.Dims(); pr != d || pc != d {
		return nil, fmt.Errorf("feature: project: projector is %d×%d, features have %d dims", pr, pc, d)
	}
	if d, ok := kernel.Current().(kernel.Float64Device); ok {
		y, err := productOnDevice(d, f, p, soft, true)
		if err != nil {
			return nil, err
		}
		z, norms := NormalizeRows(y)
		return &Projected{Z: z, p: p, soft: soft, norms: norms, dev: d}, nil
	}
	var y mat.Dense
	y.Mul(f, p.T())
	if soft != 0 {
		var sf mat.Dense
		sf.Scale(soft, f)
		y.Add(&y, &sf)
	}
	z, norms := NormalizeRows(&y)
	return &Projected{Z: z, p: p, soft: soft, norms: norms}, nil
}

// Backward maps ∂L/∂Z to ∂L/∂F. Where Project ran on a device, so does
// the product here; an error is the device's.
func (pr *Projected) Backward(dz mat.Matrix) (*mat.Dense, error) {
	dy := normalizeRowsBackward(pr.Z, pr.norms, dz)
	if pr.dev != nil {
		return productOnDevice(pr.dev, dy, pr.p, pr.soft, false)
	}
	var df mat.Dense
	df.Mul(dy, pr.p)
	if pr.soft != 0 {
		var s mat.Dense
		s.Scale(pr.soft, dy)
		df.Add(&df, &s)
	}
	return &df, nil
}

// Logits returns scale·z·wᵀ (B×C) for features z (B×d) and class weights w
// (C×d). Neither side is normalised here (zeroshot.Logits).
func Logits(z, w mat.Matrix, scale float64) *mat.Dense { return zeroshot.Logits(z, w, scale) }

// Classify is CLIP's zero-shot classification, the prediction of every
// method: logits = scale·normalize(f)·tᵀ for the head t, and their argmax
// (zeroshot.Classify, the project's one scorer).
func Classify(f, t mat.Matrix, scale float64) (*mat.Dense, []int) {
	return zeroshot.Classify(f, t, scale)
}

// BetweenClassScatterLoss is SubTTA's "mint" loss (LossMint), the SubTTA
// code's simplified MINT loss, on the projected features z (B×d) with
// pseudo-labels: the negated between-class scatter of the batch,
//
//	L = mean_i ‖z_i − μ_{y_i}‖² − mean_i ‖z_i − z̄‖² = −(1/B) Σ_c n_c ‖μ_c − z̄‖²,
//
// with per-batch class means that carry gradient; ∂L/∂z_i = −(2/B)(μ_{y_i} − z̄).
// With fewer than 2 classes the loss and gradient are 0. It is not MINT's
// own loss (MINTState.Loss), which uses cumulative, detached class means.
func BetweenClassScatterLoss(z mat.Matrix, labels []int) (float64, *mat.Dense, error) {
	b, d := z.Dims()
	if err := checkLabels(labels, b, "mint loss"); err != nil {
		return 0, nil, err
	}
	grad := mat.NewDense(b, d, nil)
	classes, rows := classGroups(labels)
	if len(classes) < 2 {
		return 0, grad, nil
	}
	zbar := colMean(z, nil)
	means := map[int][]float64{}
	for _, c := range classes {
		means[c] = colMean(z, rows[c])
	}
	var intra, total float64
	for i := range b {
		mu := means[labels[i]]
		for j := range d {
			v := z.At(i, j)
			intra += (v - mu[j]) * (v - mu[j])
			total += (v - zbar[j]) * (v - zbar[j])
		}
	}
	loss := (intra - total) / float64(b)
	for i := range b {
		mu := means[labels[i]]
		for j := range d {
			grad.Set(i, j, -2/float64(b)*(mu[j]-zbar[j]))
		}
	}
	return loss, grad, nil
}

// ClassMeanCosineLoss is SubTTA's "batclip" loss: the mean over unordered
// pairs of present classes of cos(μ_a, μ_b), μ_c the batch mean of z over
// class c (with gradient). 0 with fewer than 2 classes.
func ClassMeanCosineLoss(z mat.Matrix, labels []int) (float64, *mat.Dense, error) {
	b, d := z.Dims()
	if err := checkLabels(labels, b, "class-mean cosine loss"); err != nil {
		return 0, nil, err
	}
	grad := mat.NewDense(b, d, nil)
	classes, rows := classGroups(labels)
	k := len(classes)
	if k < 2 {
		return 0, grad, nil
	}
	unit := make([][]float64, k)
	norms := make([]float64, k)
	for a, c := range classes {
		mu := colMean(z, rows[c])
		norms[a] = math.Sqrt(dot(mu, mu))
		scale(mu, 1/math.Max(norms[a], normEps))
		unit[a] = mu
	}
	pairs := float64(k * (k - 1) / 2)
	var loss float64
	dmu := make([][]float64, k) // ∂L/∂μ_a
	for a := range k {
		dmu[a] = make([]float64, d)
	}
	for a := range k {
		for c := a + 1; c < k; c++ {
			cos := dot(unit[a], unit[c])
			loss += cos
			// ∂cos/∂μ_a = (û_c − cos·û_a)/‖μ_a‖.
			for j := range d {
				dmu[a][j] += (unit[c][j] - cos*unit[a][j]) / math.Max(norms[a], normEps) / pairs
				dmu[c][j] += (unit[a][j] - cos*unit[c][j]) / math.Max(norms[c], normEps) / pairs
			}
		}
	}
	loss /= pairs
	for a, c := range classes {
		n := float64(len(rows[c]))
		for _, i := range rows[c] {
			for j := range d {
				grad.Set(i, j, dmu[a][j]/n)
			}
		}
	}
	return loss, grad, nil
}

// FeatureEntropyLoss is SubTTA's "tent" loss: the batch mean of the entropy
// of softmax(scale·z_i) taken over the d feature dimensions, not over classes
// (as the official code does). The official scale is 3 on ImageNet and 0.05
// on CIFAR.
func FeatureEntropyLoss(z mat.Matrix, scale float64) (float64, *mat.Dense) {
	var s mat.Dense
	s.Scale(scale, z)
	loss, g := EntropyLoss(&s)
	g.Scale(scale, g)
	return loss, g
}

// EntropyLoss returns the batch mean of the softmax entropy of every row of
// logits, and its gradient w.r.t. the logits:
// ∂H_i/∂ℓ_ij = −p_ij(log p_ij + H_i), divided by B.
func EntropyLoss(logits mat.Matrix) (float64, *mat.Dense) {
	b, c := logits.Dims()
	grad := mat.NewDense(b, c, nil)
	logp := make([]float64, c)
	var loss float64
	for i := range b {
		mx := math.Inf(-1)
		for j := range c {
			mx = math.Max(mx, logits.At(i, j))
		}
		var sum float64
		for j := range c {
			sum += math.Exp(logits.At(i, j) - mx)
		}
		lse := mx + math.Log(sum)
		var h float64
		for j := range c {
			logp[j] = logits.At(i, j) - lse
			h -= math.Exp(logp[j]) * logp[j]
		}
		loss += h
		for j := range c {
			grad.Set(i, j, -math.Exp(logp[j])*(logp[j]+h)/float64(b))
		}
	}
	return loss / float64(b), grad
}

// colMean returns the mean of the given rows of m (all rows when rows is nil).
func colMean(m mat.Matrix, rows []int) []float64 {
	nr, d := m.Dims()
	out := make([]float64, d)
	n := 0
	add := func(i int) {
		for j := range d {
			out[j] += m.At(i, j)
		}
		n++
	}
	if rows == nil {
		for i := range nr {
			add(i)
		}
	} else {
		for _, i := range rows {
			add(i)
		}
	}
	scale(out, 1/float64(n))
	return out
}
