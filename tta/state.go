package tta

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/tta/feature"
)

// ErrStateMismatch is wrapped by UnmarshalBinary and UnmarshalCarried
// when the saved bytes do not fit the Method: another method, precision,
// parameter set or size.
var ErrStateMismatch = feature.ErrStateMismatch

const methodStateFormat = "subtta-method-state-v2"

// methodState is the gob form of a Method's state (the bytes are a gob of
// float64 values: float32 → float64 → float32 is exact).
type methodState struct {
	Format  string
	Method  string
	Float64 bool
	// Names and Values are the trainable LayerNorm tensors in the model's
	// order; Optimizer their optimizer state.
	Names     []string
	Values    [][]float64
	Optimizer []savedParamState
	// Own is the method's own memory (SubTTA's covariance and bank, MINT's
	// class sums, TDA's caches), encoded by the method's ownState; nil
	// when it keeps none.
	Own []byte
}

// ownState is a method's own memory beyond the LayerNorm values and the
// optimizer: saveOwn encodes it, and loadOwn checks saved bytes and returns
// the function that installs them, so that nothing changes unless every
// check of the whole state passes.
type ownState interface {
	saveOwn() ([]byte, error)
	loadOwn([]byte) (install func(), err error)
}

// gobBytes and ungob encode a method's own memory.
func gobBytes(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func ungob(p []byte, v any) error {
	if err := gob.NewDecoder(bytes.NewReader(p)).Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrStateMismatch, err)
	}
	return nil
}

// MarshalBinary saves the LayerNorm values, the optimizer's state and the
// method's own memory.
func (b *base) MarshalBinary() ([]byte, error) {
	st, err := b.tr.optState()
	if err != nil {
		return nil, fmt.Errorf("tta: %s: saving the state: %w", b.name, err)
	}
	s := methodState{Format: methodStateFormat, Method: b.name, Float64: b.f64,
		Names: b.tr.names(), Values: b.tr.values(), Optimizer: saveOptimizer(b.tr.names(), st)}
	if b.own != nil {
		if s.Own, err = b.own.saveOwn(); err != nil {
			return nil, fmt.Errorf("tta: %s: saving the state: %w", b.name, err)
		}
	}
	p, err := gobBytes(&s)
	if err != nil {
		return nil, fmt.Errorf("tta: %s: saving the state: %w", b.name, err)
	}
	return p, nil
}

// UnmarshalBinary restores what MarshalBinary saved; nothing changes unless
// every check passes.
func (b *base) UnmarshalBinary(p []byte) error {
	var s methodState
	if err := ungob(p, &s); err != nil {
		return fmt.Errorf("tta: %s: not a saved method state: %w", b.name, err)
	}
	if s.Format != methodStateFormat {
		return fmt.Errorf("tta: %s: saved state of format %q, want %q: %w", b.name, s.Format, methodStateFormat, ErrStateMismatch)
	}
	if s.Method != b.name || s.Float64 != b.f64 {
		return fmt.Errorf("tta: %s: the state was saved by %s (float64 %v), this is %s (float64 %v): %w", b.name, s.Method, s.Float64, b.name, b.f64, ErrStateMismatch)
	}
	opt, err := loadOptimizer(s.Optimizer)
	if err == nil {
		err = b.tr.checkState(s.Names, s.Values, opt)
	}
	if err != nil {
		return fmt.Errorf("tta: %s: %w: %w", b.name, ErrStateMismatch, err)
	}
	install := func() {}
	switch {
	case b.own != nil:
		if install, err = b.own.loadOwn(s.Own); err != nil {
			return fmt.Errorf("tta: %s: %w", b.name, mismatch(err))
		}
	case len(s.Own) > 0:
		return fmt.Errorf("tta: %s: the saved state holds memory this method does not keep: %w", b.name, ErrStateMismatch)
	}
	if err := b.tr.setState(s.Values, opt); err != nil {
		return fmt.Errorf("tta: %s: %w", b.name, err)
	}
	install()
	return nil
}

// MarshalCarried returns nil: nothing of this method survives Reset.
func (b *base) MarshalCarried() ([]byte, error) { return nil, nil }

// UnmarshalCarried accepts only an empty carried state.
func (b *base) UnmarshalCarried(p []byte) error {
	if len(p) > 0 {
		return fmt.Errorf("tta: %s: keeps nothing across Reset, given %d bytes: %w", b.name, len(p), ErrStateMismatch)
	}
	return nil
}

// mismatch wraps err in ErrStateMismatch unless it already is one.
func mismatch(err error) error {
	if errors.Is(err, ErrStateMismatch) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStateMismatch, err)
}

// savedParamState is one parameter's optimizer state. Slices in a fixed
// order rather than maps keep the bytes of equal states equal.
type savedParamState struct {
	Name     string
	Step     int
	BufNames []string // sorted
	Bufs     [][]float64
}

// optState returns the optimizer state in float64.
func (tr *lnTrainer[T]) optState() (optim.State[float64], error) {
	if tr.dev != nil {
		st, err := tr.devState()
		return convertState[T, float64](st), err
	}
	return convertState[T, float64](tr.opt.State()), nil
}

// checkState reports whether values and st fit the trainer's parameters.
func (tr *lnTrainer[T]) checkState(names []string, values [][]float64, st optim.State[float64]) error {
	if !slices.Equal(names, tr.names()) || len(values) != len(tr.params) {
		return fmt.Errorf("saved LayerNorm tensors %d (%v…), the model has %d", len(names), first(names), len(tr.params))
	}
	size := map[string]int{}
	for i, p := range tr.params {
		if len(values[i]) != len(p.Value) {
			return fmt.Errorf("saved LayerNorm tensor %s has %d values, the model %d", p.Name, len(values[i]), len(p.Value))
		}
		size[p.Name] = len(p.Value)
	}
	for name, ps := range st {
		n, ok := size[name]
		if !ok {
			return fmt.Errorf("optimizer state for %s, which the model does not train", name)
		}
		for buf, v := range ps.Buffers {
			if len(v) != n {
				return fmt.Errorf("optimizer state %s of %s has %d values, want %d", buf, name, len(v), n)
			}
		}
	}
	return nil
}

// setState installs values and st (checked by checkState).
func (tr *lnTrainer[T]) setState(values [][]float64, st optim.State[float64]) error {
	if tr.dev != nil {
		steps, m, v := tr.splitState(convertState[float64, T](st))
		if err := tr.dev.SetState(steps, m, v); err != nil {
			return err
		}
	} else if err := tr.opt.SetState(convertState[float64, T](st)); err != nil {
		return err
	}
	for i, p := range tr.params {
		for j, v := range values[i] {
			p.Value[j] = T(v)
		}
	}
	tr.zeroGrad()
	return nil
}

func convertState[S, T optim.Float](s optim.State[S]) optim.State[T] {
	out := make(optim.State[T], len(s))
	for name, ps := range s {
		c := optim.ParamState[T]{Step: ps.Step, Buffers: make(map[string][]T, len(ps.Buffers))}
		for k, v := range ps.Buffers {
			w := make([]T, len(v))
			for i, x := range v {
				w[i] = T(x)
			}
			c.Buffers[k] = w
		}
		out[name] = c
	}
	return out
}

// saveOptimizer lists st in the order of names, buffers sorted by name.
func saveOptimizer(names []string, st optim.State[float64]) []savedParamState {
	var out []savedParamState
	for _, name := range names {
		ps, ok := st[name]
		if !ok {
			continue
		}
		sp := savedParamState{Name: name, Step: ps.Step}
		for _, k := range slices.Sorted(maps.Keys(ps.Buffers)) {
			sp.BufNames, sp.Bufs = append(sp.BufNames, k), append(sp.Bufs, ps.Buffers[k])
		}
		out = append(out, sp)
	}
	return out
}

// loadOptimizer is the inverse of saveOptimizer.
func loadOptimizer(list []savedParamState) (optim.State[float64], error) {
	st := optim.State[float64]{}
	for _, sp := range list {
		if _, dup := st[sp.Name]; dup || len(sp.BufNames) != len(sp.Bufs) {
			return nil, fmt.Errorf("saved optimizer state of %s is malformed", sp.Name)
		}
		ps := optim.ParamState[float64]{Step: sp.Step, Buffers: map[string][]float64{}}
		for i, k := range sp.BufNames {
			ps.Buffers[k] = sp.Bufs[i]
		}
		st[sp.Name] = ps
	}
	return st, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// Stateless implements the state half of Method (and ResetSample) for a
// method that keeps nothing between Steps and trains nothing: embed it. Its state is empty,
// and it refuses any other.
type Stateless struct{}

// MarshalBinary returns an empty state.
func (Stateless) MarshalBinary() ([]byte, error) { return []byte{}, nil }

// UnmarshalBinary accepts only an empty state.
func (Stateless) UnmarshalBinary(p []byte) error {
	if len(p) > 0 {
		return fmt.Errorf("tta: a stateless method given %d bytes of state: %w", len(p), ErrStateMismatch)
	}
	return nil
}

// ResetSample does nothing: there are no weights to restore.
func (Stateless) ResetSample() error { return nil }

// MarshalCarried returns nil: nothing survives Reset.
func (Stateless) MarshalCarried() ([]byte, error) { return nil, nil }

// UnmarshalCarried accepts only an empty carried state.
func (s Stateless) UnmarshalCarried(p []byte) error { return s.UnmarshalBinary(p) }
