package feature

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/zeroshot"
)

// normEps is the floor of torch.nn.functional.normalize's denominator.
const normEps = zeroshot.NormEps

// DenseFromFloat32 returns a rows×cols float64 matrix holding the row-major
// float32 data (features as the model produces them).
func DenseFromFloat32(rows, cols int, data []float32) (*mat.Dense, error) {
	if rows <= 0 || cols <= 0 || len(data) != rows*cols {
		return nil, fmt.Errorf("feature: %d values for a %d×%d matrix", len(data), rows, cols)
	}
	out := make([]float64, len(data))
	for i, v := range data {
		out[i] = float64(v)
	}
	return mat.NewDense(rows, cols, out), nil
}

// Float32s returns the elements of m, row-major, rounded to float32.
func Float32s(m mat.Matrix) []float32 {
	r, c := m.Dims()
	out := make([]float32, 0, r*c)
	for i := range r {
		for j := range c {
			out = append(out, float32(m.At(i, j)))
		}
	}
	return out
}

// NormalizeRows returns each row of m divided by max(‖row‖, 1e-12), as
// torch.nn.functional.normalize, and the row norms (zeroshot.NormalizeRows,
// the scorer's own).
func NormalizeRows(m mat.Matrix) (*mat.Dense, []float64) { return zeroshot.NormalizeRows(m) }

// normalizeRowsBackward maps the gradient dz w.r.t. z = y/‖y‖ (per row) to the
// gradient w.r.t. y: (dz − z·(z·dz))/‖y‖.
func normalizeRowsBackward(z *mat.Dense, norms []float64, dz mat.Matrix) *mat.Dense {
	r, c := z.Dims()
	out := mat.NewDense(r, c, nil)
	for i := range r {
		zi := z.RawRowView(i)
		oi := out.RawRowView(i)
		for j := range c {
			oi[j] = dz.At(i, j)
		}
		if norms[i] < normEps {
			// Below the floor z = y/1e-12 is linear in y.
			scale(oi, 1/normEps)
			continue
		}
		p := dot(zi, oi)
		for j := range c {
			oi[j] = (oi[j] - zi[j]*p) / norms[i]
		}
	}
	return out
}

// Argmax returns the index of the largest entry of every row (the first one
// on ties, like torch.argmax on CPU): zeroshot.Argmax.
func Argmax(m mat.Matrix) []int { return zeroshot.Argmax(m) }

// CenterRows returns m minus its column means, and the means.
func CenterRows(m mat.Matrix) (*mat.Dense, []float64) {
	r, c := m.Dims()
	out := mat.NewDense(r, c, nil)
	out.Copy(m)
	mean := make([]float64, c)
	for i := range r {
		row := out.RawRowView(i)
		for j := range c {
			mean[j] += row[j]
		}
	}
	for j := range mean {
		mean[j] /= float64(r)
	}
	for i := range r {
		row := out.RawRowView(i)
		for j := range c {
			row[j] -= mean[j]
		}
	}
	return out, mean
}

func dot(a, b []float64) float64 {
	var s float64
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

func scale(a []float64, s float64) {
	for i := range a {
		a[i] *= s
	}
}

func checkLabels(labels []int, rows int, what string) error {
	if len(labels) != rows {
		return fmt.Errorf("feature: %s: %d labels for %d rows", what, len(labels), rows)
	}
	for i, y := range labels {
		if y < 0 {
			return fmt.Errorf("feature: %s: negative label %d at row %d", what, y, i)
		}
	}
	return nil
}

// classGroups returns the distinct labels in ascending order and, for each,
// the row indices carrying it.
func classGroups(labels []int) (classes []int, rows map[int][]int) {
	rows = map[int][]int{}
	for i, y := range labels {
		if _, ok := rows[y]; !ok {
			classes = append(classes, y)
		}
		rows[y] = append(rows[y], i)
	}
	slices.Sort(classes)
	return classes, rows
}

// checkFeatures reports an error unless the features f (B×d) and the text
// features t (C×d) are non-empty and of the same width.
func checkFeatures(f, t mat.Matrix, what string) error {
	b, d := f.Dims()
	c, td := t.Dims()
	if b < 1 || c < 1 {
		return fmt.Errorf("feature: %s: empty features (%d×%d) or text (%d×%d)", what, b, d, c, td)
	}
	if d != td {
		return fmt.Errorf("feature: %s: features have %d dims, text features %d", what, d, td)
	}
	return nil
}

// logSumExp returns log Σ exp(x_i), shifted by the largest entry so that
// nothing overflows.
func logSumExp(x []float64) float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(v - mx)
	}
	return mx + math.Log(sum)
}

// softmaxInPlace replaces x by softmax(x).
func softmaxInPlace(x []float64) {
	lse := logSumExp(x)
	for i, v := range x {
		x[i] = math.Exp(v - lse)
	}
}

// logSoftmaxInPlace replaces x by log softmax(x).
func logSoftmaxInPlace(x []float64) {
	lse := logSumExp(x)
	for i := range x {
		x[i] -= lse
	}
}
