package optim

import (
	"fmt"
	"math"

	"github.com/subtta/subtta/autograd/kernel"
)

// AdamConfig holds the hyperparameters of Adam and AdamW.
type AdamConfig struct {
	LR           float64
	Beta1, Beta2 float64
	Eps          float64
	// WeightDecay is an L2 penalty added to the gradient (torch.optim.Adam)
	// or, with Decoupled, a decay of the parameters (torch.optim.AdamW).
	WeightDecay float64
	Decoupled   bool
}

// DefaultAdamConfig returns torch's defaults (betas 0.9/0.999, eps 1e-8, no
// weight decay) with the given learning rate.
func DefaultAdamConfig(lr float64) AdamConfig {
	return AdamConfig{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

func (c AdamConfig) validate() error {
	switch {
	case !(c.LR >= 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("optim: adam: invalid learning rate %v", c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("optim: adam: invalid beta1 %v", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("optim: adam: invalid beta2 %v", c.Beta2)
	case !(c.Eps >= 0):
		return fmt.Errorf("optim: adam: invalid eps %v", c.Eps)
	case !(c.WeightDecay >= 0):
		return fmt.Errorf("optim: adam: invalid weight decay %v", c.WeightDecay)
	}
	return nil
}

// Adam is torch.optim.Adam, or torch.optim.AdamW when Config.Decoupled is set,
// following torch's single-tensor arithmetic in the element type T:
//
//	g ← g + wd·p                      (Adam with weight decay)
//	p ← p·(1 − lr·wd)                 (AdamW)
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g·g
//	p ← p − (lr/bc1)·m / (√v/√bc2 + eps),  bc_i = 1 − β_i^step
//
// The bias corrections and the step size are computed in float64 and rounded
// to T, as torch does with its Python-float scalars.
type Adam[T Float] struct {
	Config  AdamConfig
	state   State[T]
	skipped int
}

// NewAdam returns an Adam (or AdamW) optimizer with empty state.
func NewAdam[T Float](cfg AdamConfig) (*Adam[T], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Adam[T]{Config: cfg, state: State[T]{}}, nil
}

// Reset forgets moments and step counts.
func (a *Adam[T]) Reset() { a.state = State[T]{}; a.skipped = 0 }

// Skipped reports how many steps were skipped for non-finite gradients.
func (a *Adam[T]) Skipped() int { return a.skipped }

// State returns a deep copy of the moments and step counts.
func (a *Adam[T]) State() State[T] { return a.state.Clone() }

// SetState installs a deep copy of s. Every entry needs both moment buffers
// of equal length and a positive step count.
func (a *Adam[T]) SetState(s State[T]) error {
	for name, ps := range s {
		m, v := ps.Buffers[BufExpAvg], ps.Buffers[BufExpAvgSq]
		if m == nil || v == nil || len(m) != len(v) {
			return fmt.Errorf("optim: adam: state %q: need %s and %s of equal length", name, BufExpAvg, BufExpAvgSq)
		}
		if ps.Step < 1 {
			return fmt.Errorf("optim: adam: state %q: step %d < 1", name, ps.Step)
		}
	}
	a.state = s.Clone()
	if a.state == nil {
		a.state = State[T]{}
	}
	return nil
}

// Step applies one update to every parameter that has a gradient.
func (a *Adam[T]) Step(params []Param[T]) (bool, error) {
	if err := checkParams(params, a.state, BufExpAvg); err != nil {
		return false, fmt.Errorf("optim: adam: %w", err)
	}
	if !gradsFinite(params) {
		a.skipped++
		return false, nil
	}
	c := a.Config
	beta1, beta2 := T(c.Beta1), T(c.Beta2)
	oneMinusBeta1, oneMinusBeta2 := T(1-c.Beta1), T(1-c.Beta2)
	eps := T(c.Eps)
	wd := T(c.WeightDecay)
	decay := T(1 - c.LR*c.WeightDecay)
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		ps, ok := a.state[p.Name]
		if !ok {
			ps = ParamState[T]{Buffers: map[string][]T{
				BufExpAvg:   make([]T, len(p.Value)),
				BufExpAvgSq: make([]T, len(p.Value)),
			}}
		}
		ps.Step++
		step := float64(ps.Step)
		bc1 := 1 - math.Pow(c.Beta1, step)
		bc2 := 1 - math.Pow(c.Beta2, step)
		negStepSize := T(-(c.LR / bc1))
		bc2Sqrt := T(math.Sqrt(bc2))
		m, v := ps.Buffers[BufExpAvg], ps.Buffers[BufExpAvgSq]
		for i, g := range p.Grad {
			x := p.Value[i]
			if c.WeightDecay != 0 {
				if c.Decoupled {
					x = T(x * decay)
				} else {
					g = T(g + T(wd*x))
				}
			}
			m[i] = T(T(m[i]*beta1) + T(oneMinusBeta1*g))
			v[i] = T(T(v[i]*beta2) + T(T(oneMinusBeta2*g)*g))
			denom := T(T(T(math.Sqrt(float64(v[i])))/bc2Sqrt) + eps)
			p.Value[i] = T(x + T(T(negStepSize*m[i])/denom))
		}
		a.state[p.Name] = ps
	}
	return true, nil
}

// Scalars32 returns the float32 numbers of a float32 Adam[float32] step
// for a parameter at step count step (1 for its first), rounded as Step
// rounds them: what kernel.AdamStep, and a device's AdamStep, take to give
// Step's values bit for bit. Fresh is set for the first step.
func (c AdamConfig) Scalars32(step int) kernel.AdamScalars {
	bc1 := 1 - math.Pow(c.Beta1, float64(step))
	bc2 := 1 - math.Pow(c.Beta2, float64(step))
	return kernel.AdamScalars{
		Beta1: float32(c.Beta1), Beta2: float32(c.Beta2),
		OneMinusBeta1: float32(1 - c.Beta1), OneMinusBeta2: float32(1 - c.Beta2),
		Eps:         float32(c.Eps),
		WeightDecay: float32(c.WeightDecay), Decay: float32(1 - c.LR*c.WeightDecay),
		HasWeightDecay: c.WeightDecay != 0, Decoupled: c.Decoupled,
		NegStepSize: float32(-(c.LR / bc1)), BC2Sqrt: float32(math.Sqrt(bc2)),
		Fresh: step == 1,
	}
}
