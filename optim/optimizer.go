package optim

import (
	"fmt"
	"math"
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
