package autograd

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
)

// GradcheckStep is the default finite-difference step. In float64 the
// central difference has truncation error O(h²·f”') ≈ 1e-10 and rounding
// error O(ε·|f|/h) ≈ 1e-11·|f| at h = 1e-5, both far below the 1e-6
// tolerance the tests use.
const GradcheckStep = 1e-5

// GradError is the worst disagreement between the analytic gradient of one
// input and its central-difference estimate.
type GradError struct {
	Input    int     // index into the inputs given to Gradcheck
	Index    int     // element of that input with the worst error
	Analytic float64 // gradient from the tape at Index
	Numeric  float64 // central-difference estimate at Index
	// Err is |Analytic − Numeric| / max(1, |Numeric|): absolute for small
	// gradients, relative for large ones.
	Err float64
}

// Gradcheck checks the gradients that ag.Backward computes for inputs
// against central differences, in float64.
//
// build must construct the graph afresh from the current values of inputs
// and return its output, of any shape. The checked scalar is Σ out⊙R with R
// a fixed pseudo-random matrix (seeded), so every output element and every
// path through the graph counts. Each input must be a float64 leaf that
// requires gradients; its gradient is cleared before and after the check.
// step is the finite-difference step (GradcheckStep if 0).
//
// It returns the worst error of each input, in order. The cost is two
// forward passes per input element: keep the inputs small.
func Gradcheck(build func() smat.Tensor, inputs []*smat.Dense[float64], step float64) ([]GradError, error) {
	if step == 0 {
		step = GradcheckStep
	}
	for i, in := range inputs {
		if !in.RequiresGrad() {
			return nil, fmt.Errorf("autograd: Gradcheck: input %d does not require gradients", i)
		}
		in.ZeroGrad()
	}
	defer func() {
		for _, in := range inputs {
			in.ZeroGrad()
		}
	}()

	out := build()
	if is32("Gradcheck", out) {
		return nil, errors.New("autograd: Gradcheck: the output is not float64")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	r := make([]float64, out.Size())
	for i := range r {
		r[i] = rng.Float64()*2 - 1
	}
	objective := func(t smat.Tensor) float64 {
		var s float64
		for i, v := range values[float64](t) {
			s += v * r[i]
		}
		return s
	}
	out.AccGrad(smat.NewDense[float64](smat.WithShape(out.Value().Shape()...), smat.WithBacking(r)))
	if err := ag.Backward(out); err != nil {
		return nil, fmt.Errorf("autograd: Gradcheck: backward: %w", err)
	}

	res := make([]GradError, len(inputs))
	for i, in := range inputs {
		var analytic []float64
		if in.HasGrad() {
			analytic = values[float64](in.Grad())
		}
		x := values[float64](in)
		worst := GradError{Input: i, Index: -1, Err: -1}
		for j := range x {
			v := x[j]
			x[j] = v + step
			plus := objective(build())
			x[j] = v - step
			minus := objective(build())
			x[j] = v
			num := (plus - minus) / (2 * step)
			var ana float64
			if analytic != nil {
				ana = analytic[j]
			}
			e := math.Abs(ana-num) / math.Max(1, math.Abs(num))
			if math.IsNaN(e) {
				e = math.Inf(1)
			}
			if e > worst.Err {
				worst = GradError{Input: i, Index: j, Analytic: ana, Numeric: num, Err: e}
			}
		}
		res[i] = worst
	}
	return res, nil
}
