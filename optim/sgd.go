package optim

import (
	"errors"
	"fmt"
	"math"
)

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
		return nil, fmt.Errorf("optim: sgd: invalid learning rate %v", cfg.LR)
	case !(cfg.Momentum >= 0):
		return nil, fmt.Errorf("optim: sgd: invalid momentum %v", cfg.Momentum)
	case !(cfg.WeightDecay >= 0):
		return nil, fmt.Errorf("optim: sgd: invalid weight decay %v", cfg.WeightDecay)
	case cfg.Nesterov && (cfg.Momentum <= 0 || cfg.Dampening != 0):
		return nil, errors.New("optim: sgd: Nesterov momentum requires a momentum and zero dampening")
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
			return fmt.Errorf("optim: sgd: state %q: no %s", name, BufMomentumBuffer)
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
		return false, fmt.Errorf("optim: sgd: %w", err)
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
