package tta

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Float is the element type of parameter vectors: float32 for the model,
// float64 for references and gradient checks.
type Float interface {
	~float32 | ~float64
}

// Param is one named trainable vector and its gradient. A nil Grad means the
// parameter received no gradient this step; like a torch parameter whose
// .grad is None, it is left alone and its state does not advance.
type Param[T Float] struct {
	Name  string
	Value []T
	Grad  []T
}

// ParamState is the optimizer state of one parameter, as torch keeps it:
// a step count and named buffers ("exp_avg" and "exp_avg_sq" for Adam,
// "momentum_buffer" for SGD).
type ParamState[T Float] struct {
	Step    int
	Buffers map[string][]T
}

// State is an optimizer's state, keyed by parameter name.
type State[T Float] map[string]ParamState[T]

// Clone returns a deep copy of s.
func (s State[T]) Clone() State[T] {
	if s == nil {
		return nil
	}
	out := make(State[T], len(s))
	for name, ps := range s {
		c := ParamState[T]{Step: ps.Step, Buffers: make(map[string][]T, len(ps.Buffers))}
		for k, v := range ps.Buffers {
			c.Buffers[k] = append([]T(nil), v...)
		}
		out[name] = c
	}
	return out
}

// Names of the Adam and SGD state buffers, matching torch's state_dict keys.
const (
	BufExpAvg         = "exp_avg"
	BufExpAvgSq       = "exp_avg_sq"
	BufMomentumBuffer = "momentum_buffer"
)

// Optimizer updates parameter vectors in place from their gradients.
//
// Step returns stepped == false, with a nil error, when some gradient is NaN
// or ±Inf: the whole step is skipped (as a GradScaler would) and counted in
// Skipped. A non-nil error reports bad input (mismatched lengths, duplicate
// names) and leaves parameters and state untouched.
type Optimizer[T Float] interface {
	Step(params []Param[T]) (stepped bool, err error)
	// Reset forgets all state, as a freshly constructed optimizer.
	Reset()
	// State returns a deep copy of the state; SetState installs a deep copy.
	State() State[T]
	SetState(State[T]) error
	// Skipped is the number of steps skipped for non-finite gradients.
	Skipped() int
}

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
		return fmt.Errorf("tta: adam: invalid learning rate %v", c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("tta: adam: invalid beta1 %v", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("tta: adam: invalid beta2 %v", c.Beta2)
	case !(c.Eps >= 0):
		return fmt.Errorf("tta: adam: invalid eps %v", c.Eps)
	case !(c.WeightDecay >= 0):
		return fmt.Errorf("tta: adam: invalid weight decay %v", c.WeightDecay)
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
			return fmt.Errorf("tta: adam: state %q: need %s and %s of equal length", name, BufExpAvg, BufExpAvgSq)
		}
		if ps.Step < 1 {
			return fmt.Errorf("tta: adam: state %q: step %d < 1", name, ps.Step)
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
		return false, fmt.Errorf("tta: adam: %w", err)
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

// SGDConfig holds the hyperparameters of torch.optim.SGD.
type SGDConfig struct {
	LR          float64
	Momentum    float64
	Dampening   float64
	WeightDecay float64 // L2 penalty added to the gradient
	Nesterov    bool
}

// SGD is torch.optim.SGD:
//
//	g ← g + wd·p
//	b ← g (first step), else b ← μ·b + (1−dampening)·g
//	g ← g + μ·b (Nesterov) or g ← b
//	p ← p − lr·g
type SGD[T Float] struct {
	Config  SGDConfig
	state   State[T]
	skipped int
}

// NewSGD returns an SGD optimizer with empty state.
func NewSGD[T Float](cfg SGDConfig) (*SGD[T], error) {
	switch {
	case !(cfg.LR >= 0) || math.IsInf(cfg.LR, 0):
		return nil, fmt.Errorf("tta: sgd: invalid learning rate %v", cfg.LR)
	case !(cfg.Momentum >= 0):
		return nil, fmt.Errorf("tta: sgd: invalid momentum %v", cfg.Momentum)
	case !(cfg.WeightDecay >= 0):
		return nil, fmt.Errorf("tta: sgd: invalid weight decay %v", cfg.WeightDecay)
	case cfg.Nesterov && (cfg.Momentum <= 0 || cfg.Dampening != 0):
		return nil, errors.New("tta: sgd: Nesterov momentum requires a momentum and zero dampening")
	}
	return &SGD[T]{Config: cfg, state: State[T]{}}, nil
}

// Reset forgets the momentum buffers.
func (s *SGD[T]) Reset() { s.state = State[T]{}; s.skipped = 0 }

// Skipped reports how many steps were skipped for non-finite gradients.
func (s *SGD[T]) Skipped() int { return s.skipped }

// State returns a deep copy of the momentum buffers.
func (s *SGD[T]) State() State[T] { return s.state.Clone() }

// SetState installs a deep copy of st.
func (s *SGD[T]) SetState(st State[T]) error {
	for name, ps := range st {
		if ps.Buffers[BufMomentumBuffer] == nil {
			return fmt.Errorf("tta: sgd: state %q: no %s", name, BufMomentumBuffer)
		}
	}
	s.state = st.Clone()
	if s.state == nil {
		s.state = State[T]{}
	}
	return nil
}

// Step applies one update to every parameter that has a gradient.
func (s *SGD[T]) Step(params []Param[T]) (bool, error) {
	bufName := ""
	if s.Config.Momentum != 0 {
		bufName = BufMomentumBuffer
	}
	if err := checkParams(params, s.state, bufName); err != nil {
		return false, fmt.Errorf("tta: sgd: %w", err)
	}
	if !gradsFinite(params) {
		s.skipped++
		return false, nil
	}
	c := s.Config
	wd, mu := T(c.WeightDecay), T(c.Momentum)
	oneMinusDamp := T(1 - c.Dampening)
	negLR := T(-c.LR)
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		var buf []T
		first := false
		if c.Momentum != 0 {
			ps, ok := s.state[p.Name]
			if !ok {
				ps = ParamState[T]{Buffers: map[string][]T{BufMomentumBuffer: make([]T, len(p.Value))}}
				first = true
			}
			ps.Step++
			buf = ps.Buffers[BufMomentumBuffer]
			s.state[p.Name] = ps
		}
		for i, g := range p.Grad {
			if c.WeightDecay != 0 {
				g = T(g + T(wd*p.Value[i]))
			}
			if buf != nil {
				if first {
					buf[i] = g
				} else {
					buf[i] = T(T(buf[i]*mu) + T(oneMinusDamp*g))
				}
				if c.Nesterov {
					g = T(g + T(mu*buf[i]))
				} else {
					g = buf[i]
				}
			}
			p.Value[i] = T(p.Value[i] + T(negLR*g))
		}
	}
	return true, nil
}

// checkParams validates names and lengths against each other and against the
// state buffer buf (if any) before anything is modified.
func checkParams[T Float](params []Param[T], st State[T], buf string) error {
	seen := make(map[string]bool, len(params))
	for _, p := range params {
		if seen[p.Name] {
			return fmt.Errorf("parameter %q given twice", p.Name)
		}
		seen[p.Name] = true
		if p.Grad == nil {
			continue
		}
		if len(p.Grad) != len(p.Value) {
			return fmt.Errorf("parameter %q: gradient length %d, value length %d", p.Name, len(p.Grad), len(p.Value))
		}
		if ps, ok := st[p.Name]; ok && buf != "" {
			for k, b := range ps.Buffers {
				if len(b) != len(p.Value) {
					return fmt.Errorf("parameter %q: state %s has length %d, value length %d", p.Name, k, len(b), len(p.Value))
				}
			}
		}
	}
	return nil
}

func gradsFinite[T Float](params []Param[T]) bool {
	for _, p := range params {
		for _, g := range p.Grad {
			f := float64(g)
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return false
			}
		}
	}
	return true
}

// GradMean keeps the running mean of named gradient vectors across calls to
// Add, in float64 (MINT's aggregated gradient ḡ).
type GradMean struct {
	count int
	sums  map[string][]float64
}

// Add accumulates the gradients of params (those with a Grad).
func (g *GradMean) Add(params []Param[float32]) error { return gradMeanAdd(g, params) }

// AddFloat64 is Add for float64 parameters (float64 reference models).
func (g *GradMean) AddFloat64(params []Param[float64]) error { return gradMeanAdd(g, params) }

func gradMeanAdd[T Float](g *GradMean, params []Param[T]) error {
	for _, p := range params {
		if s, ok := g.sums[p.Name]; ok && len(s) != len(p.Grad) {
			return fmt.Errorf("tta: grad mean: parameter %q: length %d, earlier %d", p.Name, len(p.Grad), len(s))
		}
	}
	if g.sums == nil {
		g.sums = map[string][]float64{}
	}
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		s, ok := g.sums[p.Name]
		if !ok {
			s = make([]float64, len(p.Grad))
			g.sums[p.Name] = s
		}
		for i, v := range p.Grad {
			s[i] += float64(v)
		}
	}
	g.count++
	return nil
}

// Count is the number of Add calls since the last Reset.
func (g *GradMean) Count() int { return g.count }

// Names lists the accumulated parameter names, sorted.
func (g *GradMean) Names() []string {
	names := make([]string, 0, len(g.sums))
	for n := range g.sums {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Mean returns the mean gradient of the named parameter, or nil if it has none.
func (g *GradMean) Mean(name string) []float32 {
	s, ok := g.sums[name]
	if !ok || g.count == 0 {
		return nil
	}
	out := make([]float32, len(s))
	for i, v := range s {
		out[i] = float32(v / float64(g.count))
	}
	return out
}

// MeanFloat64 is Mean without the rounding to float32.
func (g *GradMean) MeanFloat64(name string) []float64 {
	s, ok := g.sums[name]
	if !ok || g.count == 0 {
		return nil
	}
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = v / float64(g.count)
	}
	return out
}

// Reset forgets everything.
func (g *GradMean) Reset() { g.count = 0; g.sums = nil }
