package tta

import (
	"bytes"
	"encoding"
	"encoding/gob"
	"fmt"
	"maps"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/optim"
)

// Stateful is a Method whose whole state between two Steps can be saved and
// restored: the LayerNorm values, the optimizer's moments and step counts,
// and the method's own memory (SubTTA's EMA covariance and feature bank,
// MINT's class sums and aggregated gradient, TDA's caches). A Method built
// like the saved one (same model, head, preset and precision) and given
// the saved bytes with UnmarshalBinary continues exactly as the saved one
// would have: the same logits, bit for bit. Every Method of this package is
// Stateful.
//
// The bytes are a gob of float64 values (float32 → float64 → float32 is
// exact). UnmarshalBinary checks the method, precision, parameter names and
// sizes before it changes anything, and leaves the Method as it was on an
// error. The source LayerNorm values (what Reset restores) are not part of
// the state: they are the model's.
type Stateful interface {
	Method
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

const methodStateFormat = "subtta-method-state-v1"

// methodState is the gob form of a Method's state.
type methodState struct {
	Format  string
	Method  string
	Float64 bool
	// Names and Values are the trainable LayerNorm tensors in the model's
	// order; Optimizer their optimizer state.
	Names     []string
	Values    [][]float64
	Optimizer []savedParamState

	// SubTTA: the aligner's Σ history (d×d, row-major), its count of
	// guarded eigen-gaps, and the episodic feature bank.
	Covariance []float64
	Guarded    int
	Bank       [][]float64

	// MINT: the class sums and counts before and after adaptation, the
	// samples seen, and the aggregated gradient.
	MINT *mintSums

	// TDA: the positive and negative caches, one list per class.
	Positive, Negative [][]tdaSaved
}

// savedParamState is one parameter's optimizer state. Slices in a fixed
// order rather than maps keep the bytes of equal states equal.
type savedParamState struct {
	Name     string
	Step     int
	BufNames []string // sorted
	Bufs     [][]float64
}

type mintSums struct {
	PreSums, PostSums []float64 // C×d, row-major
	PreN, PostN       []float64
	Seen              int
	GradCount         int
	GradNames         []string // sorted
	GradSums          [][]float64
}

type tdaSaved struct {
	Key     []float64
	Entropy float64
	Mask    []float64
}

// marshalState encodes b's state under name, with extra filling in the
// method's own part (nil when there is none).
func marshalState(b *base, name string, extra func(*methodState)) ([]byte, error) {
	s := methodState{Format: methodStateFormat, Method: name, Float64: b.f64,
		Names: b.tr.names(), Values: b.tr.values(), Optimizer: saveOptimizer(b.tr.names(), b.tr.optState())}
	if extra != nil {
		extra(&s)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&s); err != nil {
		return nil, fmt.Errorf("tta: %s: saving the state: %w", name, err)
	}
	return buf.Bytes(), nil
}

// unmarshalState decodes p and installs it in b. extra checks the method's
// own part and returns the function that installs it; nothing changes
// unless every check passes.
func unmarshalState(b *base, name string, p []byte, extra func(*methodState) (func(), error)) error {
	var s methodState
	if err := gob.NewDecoder(bytes.NewReader(p)).Decode(&s); err != nil {
		return fmt.Errorf("tta: %s: not a saved method state: %w", name, err)
	}
	if s.Format != methodStateFormat {
		return fmt.Errorf("tta: %s: saved state of format %q, want %q", name, s.Format, methodStateFormat)
	}
	if s.Method != name || s.Float64 != b.f64 {
		return fmt.Errorf("tta: %s: the state was saved by %s (float64 %v), this is %s (float64 %v)", name, s.Method, s.Float64, name, b.f64)
	}
	opt, err := loadOptimizer(s.Optimizer)
	if err == nil {
		err = b.tr.checkState(s.Names, s.Values, opt)
	}
	if err != nil {
		return fmt.Errorf("tta: %s: %w", name, err)
	}
	install := func() {}
	if extra != nil {
		var err error
		if install, err = extra(&s); err != nil {
			return fmt.Errorf("tta: %s: %w", name, err)
		}
	}
	if err := b.tr.setState(s.Values, opt); err != nil {
		return fmt.Errorf("tta: %s: %w", name, err)
	}
	install()
	return nil
}

// optState returns the optimizer state in float64.
func (tr *lnTrainer[T]) optState() optim.State[float64] {
	return convertState[T, float64](tr.opt.State())
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
	if err := tr.opt.SetState(convertState[float64, T](st)); err != nil {
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

// MarshalBinary saves the LayerNorm values (Source never changes them).
func (s *Source) MarshalBinary() ([]byte, error) { return marshalState(&s.base, s.Name(), nil) }

// UnmarshalBinary restores what MarshalBinary saved.
func (s *Source) UnmarshalBinary(p []byte) error { return unmarshalState(&s.base, s.Name(), p, nil) }

// MarshalBinary saves the LayerNorm values and Adam's state.
func (t *TENT) MarshalBinary() ([]byte, error) { return marshalState(&t.base, t.Name(), nil) }

// UnmarshalBinary restores what MarshalBinary saved.
func (t *TENT) UnmarshalBinary(p []byte) error { return unmarshalState(&t.base, t.Name(), p, nil) }

// MarshalBinary saves the LayerNorm values and the optimizer's state.
func (m *BATCLIP) MarshalBinary() ([]byte, error) { return marshalState(&m.base, m.Name(), nil) }

// UnmarshalBinary restores what MarshalBinary saved.
func (m *BATCLIP) UnmarshalBinary(p []byte) error { return unmarshalState(&m.base, m.Name(), p, nil) }

// MarshalBinary saves the LayerNorm values and the optimizer's state. WATT
// starts every Step from the source weights, so they only matter to a
// caller that reads the model between Steps.
func (w *WATT) MarshalBinary() ([]byte, error) { return marshalState(&w.base, w.Name(), nil) }

// UnmarshalBinary restores what MarshalBinary saved.
func (w *WATT) UnmarshalBinary(p []byte) error { return unmarshalState(&w.base, w.Name(), p, nil) }

// MarshalBinary saves the LayerNorm values, the optimizer's state, the EMA
// covariance and the feature bank.
func (s *SubTTA) MarshalBinary() ([]byte, error) {
	return marshalState(&s.base, s.Name(), func(st *methodState) {
		st.Covariance = s.aligner.sigma.RawSymmetric().Data
		st.Guarded = s.aligner.guarded
		st.Bank = s.bank
	})
}

// UnmarshalBinary restores what MarshalBinary saved.
func (s *SubTTA) UnmarshalBinary(p []byte) error {
	return unmarshalState(&s.base, s.Name(), p, func(st *methodState) (func(), error) {
		d := s.aligner.sigma.SymmetricDim()
		if len(st.Covariance) != d*d {
			return nil, fmt.Errorf("saved covariance has %d values, want %d×%d", len(st.Covariance), d, d)
		}
		_, width := s.text.Dims()
		for i, r := range st.Bank {
			if len(r) != width {
				return nil, fmt.Errorf("saved bank row %d has %d values, want %d", i, len(r), width)
			}
		}
		if len(st.Bank) > 0 && s.cfg.BankSize == 0 {
			return nil, fmt.Errorf("saved state has a feature bank, this SubTTA keeps none")
		}
		return func() {
			s.aligner.sigma = mat.NewSymDense(d, slices.Clone(st.Covariance))
			s.aligner.guarded = st.Guarded
			s.bank = st.Bank
		}, nil
	})
}

// MarshalBinary saves the class sums and the aggregated gradient (MINT
// starts every Step from the source weights and a fresh optimizer).
func (m *MINT) MarshalBinary() ([]byte, error) {
	return marshalState(&m.base, m.Name(), func(st *methodState) {
		count, sums := m.agg.Sums()
		ms := m.state
		st.MINT = &mintSums{PreSums: ms.preSums.RawMatrix().Data, PostSums: ms.postSums.RawMatrix().Data,
			PreN: ms.preN, PostN: ms.postN, Seen: ms.seen, GradCount: count}
		for _, k := range slices.Sorted(maps.Keys(sums)) {
			st.MINT.GradNames, st.MINT.GradSums = append(st.MINT.GradNames, k), append(st.MINT.GradSums, sums[k])
		}
	})
}

// UnmarshalBinary restores what MarshalBinary saved.
func (m *MINT) UnmarshalBinary(p []byte) error {
	return unmarshalState(&m.base, m.Name(), p, func(st *methodState) (func(), error) {
		ms, c, d := st.MINT, m.state.classes, m.state.dim
		if ms == nil || len(ms.PreSums) != c*d || len(ms.PostSums) != c*d || len(ms.PreN) != c || len(ms.PostN) != c ||
			len(ms.GradNames) != len(ms.GradSums) {
			return nil, fmt.Errorf("saved class sums do not fit %d classes × %d dims", c, d)
		}
		sums := map[string][]float64{}
		for i, k := range ms.GradNames {
			sums[k] = ms.GradSums[i]
		}
		var agg optim.GradMean
		if err := agg.SetSums(ms.GradCount, sums); err != nil {
			return nil, err
		}
		return func() {
			s := m.state
			s.preSums, s.postSums = mat.NewDense(c, d, ms.PreSums), mat.NewDense(c, d, ms.PostSums)
			s.preN, s.postN, s.seen = ms.PreN, ms.PostN, ms.Seen
			m.agg = agg
		}, nil
	})
}

// MarshalBinary saves the caches.
func (t *TDA) MarshalBinary() ([]byte, error) {
	classes, _ := t.cache.head.Dims()
	save := func(c map[int][]tdaEntry) [][]tdaSaved {
		out := make([][]tdaSaved, classes)
		for y, es := range c {
			for _, e := range es {
				out[y] = append(out[y], tdaSaved{Key: e.key, Entropy: e.entropy, Mask: e.mask})
			}
		}
		return out
	}
	return marshalState(&t.base, t.Name(), func(st *methodState) {
		st.Positive, st.Negative = save(t.cache.pos), save(t.cache.neg)
	})
}

// UnmarshalBinary restores what MarshalBinary saved.
func (t *TDA) UnmarshalBinary(p []byte) error {
	c, d := t.cache.head.Dims()
	load := func(in [][]tdaSaved, shots int, masks bool) (map[int][]tdaEntry, error) {
		if len(in) != c {
			return nil, fmt.Errorf("saved caches of %d classes, the head has %d", len(in), c)
		}
		out := map[int][]tdaEntry{}
		for y, es := range in {
			if len(es) > shots {
				return nil, fmt.Errorf("saved cache of class %d holds %d entries, more than %d shots", y, len(es), shots)
			}
			for _, e := range es {
				if len(e.Key) != d || masks && len(e.Mask) != c {
					return nil, fmt.Errorf("saved cache entry of class %d does not fit %d classes × %d dims", y, c, d)
				}
				out[y] = append(out[y], tdaEntry{key: e.Key, entropy: e.Entropy, mask: e.Mask})
			}
		}
		return out, nil
	}
	return unmarshalState(&t.base, t.Name(), p, func(st *methodState) (func(), error) {
		pos, err := load(st.Positive, t.cache.cfg.Positive.Shots, false)
		if err != nil {
			return nil, err
		}
		neg, err := load(st.Negative, t.cache.cfg.Negative.Shots, true)
		if err != nil {
			return nil, err
		}
		return func() { t.cache.pos, t.cache.neg = pos, neg }, nil
	})
}
