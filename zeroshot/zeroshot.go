package zeroshot

import (
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/internal/rowdot"
)

// NormEps is the floor of torch.nn.functional.normalize's denominator.
const NormEps = 1e-12

// NormalizeRows returns each row of m divided by max(‖row‖, NormEps), as
// torch.nn.functional.normalize, and the row norms.
func NormalizeRows(m mat.Matrix) (*mat.Dense, []float64) {
	r, c := m.Dims()
	out := mat.NewDense(r, c, nil)
	out.Copy(m)
	norms := make([]float64, r)
	for i := range r {
		row := out.RawRowView(i)
		var n float64
		for _, v := range row {
			n += v * v
		}
		n = math.Sqrt(n)
		norms[i] = n
		s := 1 / math.Max(n, NormEps)
		for j := range row {
			row[j] *= s
		}
	}
	return out, norms
}

// Logits returns scale · z · wᵀ.
func Logits(z, w mat.Matrix, scale float64) *mat.Dense {
	out := rowdot.MulMatrix(z, w) // gonum's z·wᵀ, bit for bit, faster
	out.Scale(scale, out)
	return out
}

// Argmax returns the column of each row's largest value (the first on a
// tie).
func Argmax(m mat.Matrix) []int {
	r, c := m.Dims()
	out := make([]int, r)
	for i := range r {
		best := math.Inf(-1)
		for j := range c {
			if v := m.At(i, j); v > best {
				best, out[i] = v, j
			}
		}
	}
	return out
}

// Classify is CLIP's zero-shot classification, the prediction of every
// method: logits = scale·normalize(f)·tᵀ for the head t, and their argmax.
// t is used as given (already normalised text features); scale is
// exp(logit_scale).
func Classify(f, t mat.Matrix, scale float64) (*mat.Dense, []int) {
	fn, _ := NormalizeRows(f)
	logits := Logits(fn, t, scale)
	return logits, Argmax(logits)
}
