package tta

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/subtta/subtta/optim"
)

// Errors of method options, for errors.Is.
var (
	// ErrUnknownOption: the method has no option of that key.
	ErrUnknownOption = errors.New("tta: unknown option")
	// ErrOptionValue: the value does not parse or lies outside the
	// option's range.
	ErrOptionValue = errors.New("tta: bad option value")
)

// An Option is one setting of a method that a preset can change by name
// (Preset.Set), as `subtta eval --set METHOD.KEY=VALUE` does: the rank of
// SubTTA's subspace, a learning rate, a switch. Each method declares its
// own in its Registration (Registration.Options); a method that trains
// also takes the optimizer's (kind, lr, weight decay, Adam's betas and ε,
// SGD's momentum), and every method takes batch_size ([Preset.Options]
// lists them all).
type Option struct {
	// Key names the option ("rank", "lr").
	Key string
	// About says what it sets.
	About string
	// Allowed says which values it takes ("an integer in [1, 4096]",
	// "true or false"), for help texts and errors.
	Allowed string
	set     func(p *Preset, value string) error
	get     func(p Preset) string
	// applies, when set, says whether the option applies to p (SGD's
	// momentum only to SGD), and needs what it takes otherwise.
	applies func(p Preset) bool
	needs   string
}

// Value returns the option's current value in p, formatted as Set takes it.
func (o Option) Value(p Preset) string { return o.get(p) }

// Options lists the options of the preset's method: the method's own
// (Registration.Options), then the batch size; sorted by key.
func (p Preset) Options() []Option {
	r, err := p.registration()
	if err != nil {
		return nil
	}
	var out []Option
	for _, o := range append(slices.Clone(r.Options), batchSizeOption) {
		if o.applies == nil || o.applies(p) {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b Option) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Set changes the option key of the preset's method to value. An unknown
// key wraps ErrUnknownOption and lists the method's keys; a value that does
// not parse or lies outside the option's range wraps ErrOptionValue and
// names the key and what it allows.
func (p *Preset) Set(key, value string) error {
	opts := p.Options()
	i := slices.IndexFunc(opts, func(o Option) bool { return o.Key == key })
	if i < 0 {
		var own []Option
		if r, err := p.registration(); err == nil {
			own = r.Options
		}
		for _, o := range own {
			if o.Key == key {
				return fmt.Errorf("%w: %s.%s applies only %s", ErrUnknownOption, p.Method, key, o.needs)
			}
		}
		keys := make([]string, len(opts))
		for j, o := range opts {
			keys[j] = o.Key
		}
		return fmt.Errorf("%w %s.%s (%s has %s)", ErrUnknownOption, p.Method, key, p.Method, strings.Join(keys, ", "))
	}
	o := opts[i]
	if err := o.set(p, strings.TrimSpace(value)); err != nil {
		return fmt.Errorf("%w: %s.%s=%s: %v (want %s)", ErrOptionValue, p.Method, key, value, err, o.Allowed)
	}
	return nil
}

// OptionValues returns every option of the preset's method with its value
// in p, by key: what a run records of the method's settings.
func (p Preset) OptionValues() map[string]string {
	out := map[string]string{}
	for _, o := range p.Options() {
		out[o.Key] = o.Value(p)
	}
	return out
}

// An interval is a range of numbers, either end open or closed.
type interval struct {
	lo, hi         float64
	openLo, openHi bool
}

func (r interval) contains(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	if v < r.lo || (r.openLo && v == r.lo) {
		return false
	}
	return v < r.hi || (!r.openHi && v == r.hi)
}

func (r interval) String() string {
	lb, rb := "[", "]"
	if r.openLo {
		lb = "("
	}
	if r.openHi {
		rb = ")"
	}
	hi := strconv.FormatFloat(r.hi, 'g', -1, 64)
	if math.IsInf(r.hi, 1) {
		hi = "∞"
	}
	return fmt.Sprintf("%s%s, %s%s", lb, strconv.FormatFloat(r.lo, 'g', -1, 64), hi, rb)
}

// Ranges the options use.
var (
	positive  = interval{lo: 0, hi: math.Inf(1), openLo: true, openHi: true}
	nonNeg    = interval{lo: 0, hi: math.Inf(1), openHi: true}
	unitOpen  = interval{lo: 0, hi: 1, openHi: true} // [0, 1)
	unitShare = interval{lo: 0, hi: 1, openLo: true} // (0, 1]
	unitClose = interval{lo: 0, hi: 1}               // [0, 1]
	betaRange = interval{lo: 0, hi: 1, openHi: true} // Adam's betas
	anyReal   = interval{lo: math.Inf(-1), hi: math.Inf(1), openLo: true, openHi: true}
)

// field reads and writes one value of a preset, in its config or in the
// preset itself.
type field[T any] struct {
	get func(Preset) T
	set func(*Preset, T)
}

// inConfig is the field f of the preset's config, of type C.
func inConfig[C, T any](f func(*C) *T) field[T] {
	return field[T]{
		get: func(p Preset) T {
			c, _ := p.Config.(C)
			return *f(&c)
		},
		set: func(p *Preset, v T) {
			c, _ := p.Config.(C)
			*f(&c) = v
			p.Config = c
		},
	}
}

// inPreset is the field f of the preset itself.
func inPreset[T any](f func(*Preset) *T) field[T] {
	return field[T]{
		get: func(p Preset) T { q := p; return *f(&q) },
		set: func(p *Preset, v T) { *f(p) = v },
	}
}

// intOption is an integer option in [lo, hi].
func intOption(key, about string, lo, hi int, f field[int]) Option {
	allowed := fmt.Sprintf("an integer in [%d, %d]", lo, hi)
	if hi == math.MaxInt {
		allowed = fmt.Sprintf("an integer ≥ %d", lo)
	}
	return Option{Key: key, About: about, Allowed: allowed,
		set: func(p *Preset, s string) error {
			v, err := strconv.Atoi(s)
			if err != nil {
				return fmt.Errorf("not an integer")
			}
			if v < lo || v > hi {
				return fmt.Errorf("out of range")
			}
			f.set(p, v)
			return nil
		},
		get: func(p Preset) string { return strconv.Itoa(f.get(p)) },
	}
}

// floatOption is a real option in the interval r.
func floatOption(key, about string, r interval, f field[float64]) Option {
	return Option{Key: key, About: about, Allowed: "a number in " + r.String(),
		set: func(p *Preset, s string) error {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return fmt.Errorf("not a number")
			}
			if !r.contains(v) {
				return fmt.Errorf("out of range")
			}
			f.set(p, v)
			return nil
		},
		get: func(p Preset) string { return strconv.FormatFloat(f.get(p), 'g', -1, 64) },
	}
}

// boolOption is a switch; with invert, the field holds its negation (the
// option "align" sets NoAlign).
func boolOption(key, about string, invert bool, f field[bool]) Option {
	return Option{Key: key, About: about, Allowed: "true or false",
		set: func(p *Preset, s string) error {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return fmt.Errorf("not true or false")
			}
			f.set(p, v != invert)
			return nil
		},
		get: func(p Preset) string { return strconv.FormatBool(f.get(p) != invert) },
	}
}

// choiceOption is one of named values.
func choiceOption[T comparable](key, about string, names []string, values []T, f field[T]) Option {
	return Option{Key: key, About: about, Allowed: "one of " + strings.Join(names, ", "),
		set: func(p *Preset, s string) error {
			i := slices.Index(names, s)
			if i < 0 {
				return fmt.Errorf("unknown")
			}
			f.set(p, values[i])
			return nil
		},
		get: func(p Preset) string {
			if i := slices.Index(values, f.get(p)); i >= 0 {
				return names[i]
			}
			return fmt.Sprint(f.get(p))
		},
	}
}

// batchSizeOption is every method's: the images per step.
var batchSizeOption = intOption("batch_size", "images per step", 1, math.MaxInt, inPreset(func(p *Preset) *int { return &p.BatchSize }))

// optimizerOptions are the options of a method that trains with
// Preset.Optimizer: its kind, learning rate and weight decay; Adam's betas
// and ε when it is Adam or AdamW, SGD's momentum and Nesterov switch when
// it is SGD (set optimizer=sgd first). Preset.Optimizer is the one place
// the optimizer is kept: New hands it to the method.
func optimizerOptions() []Option {
	isSGD := func(p Preset) bool { return p.Optimizer.SGD != nil }
	isAdam := func(p Preset) bool { return p.Optimizer.SGD == nil }
	adam := func(f func(c *optim.AdamConfig) *float64) field[float64] {
		return field[float64]{
			get: func(p Preset) float64 { return *f(&p.Optimizer.Adam) },
			set: func(p *Preset, v float64) { *f(&p.Optimizer.Adam) = v },
		}
	}
	sgd := func(f func(c *optim.SGDConfig) *float64) field[float64] {
		return field[float64]{
			get: func(p Preset) float64 { return *f(p.Optimizer.SGD) },
			set: func(p *Preset, v float64) {
				c := *p.Optimizer.SGD
				*f(&c) = v
				p.Optimizer.SGD = &c
			},
		}
	}
	either := func(fa func(c *optim.AdamConfig) *float64, fs func(c *optim.SGDConfig) *float64) field[float64] {
		a, s := adam(fa), sgd(fs)
		return field[float64]{
			get: func(p Preset) float64 {
				if isSGD(p) {
					return s.get(p)
				}
				return a.get(p)
			},
			set: func(p *Preset, v float64) {
				if isSGD(*p) {
					s.set(p, v)
				} else {
					a.set(p, v)
				}
			},
		}
	}
	lr := either(func(c *optim.AdamConfig) *float64 { return &c.LR }, func(c *optim.SGDConfig) *float64 { return &c.LR })
	wd := either(func(c *optim.AdamConfig) *float64 { return &c.WeightDecay }, func(c *optim.SGDConfig) *float64 { return &c.WeightDecay })
	kindOf := func(p Preset) string {
		switch {
		case isSGD(p):
			return "sgd"
		case p.Optimizer.Adam.Decoupled:
			return "adamw"
		}
		return "adam"
	}
	kind := field[string]{
		get: kindOf,
		set: func(p *Preset, k string) {
			if k == kindOf(*p) {
				return
			}
			rate, decay := lr.get(*p), wd.get(*p)
			switch k {
			case "sgd":
				p.Optimizer = optim.Config{SGD: &optim.SGDConfig{LR: rate, WeightDecay: decay}}
			case "adamw":
				p.Optimizer = optim.AdamW(rate, decay)
			default:
				p.Optimizer = optim.AdamL2(rate, decay)
			}
		},
	}
	onlyAdam := func(o Option) Option { o.applies, o.needs = isAdam, "to Adam and AdamW"; return o }
	onlySGD := func(o Option) Option { o.applies, o.needs = isSGD, "to SGD (set optimizer=sgd first)"; return o }
	return []Option{
		choiceOption("optimizer", "the optimizer: Adam (weight decay as an L2 penalty, torch.optim.Adam), AdamW (decoupled) or SGD; keeps lr and weight_decay",
			[]string{"adam", "adamw", "sgd"}, []string{"adam", "adamw", "sgd"}, kind),
		floatOption("lr", "learning rate", positive, lr),
		floatOption("weight_decay", "weight decay (L2 for Adam and SGD, decoupled for AdamW)", nonNeg, wd),
		onlyAdam(floatOption("beta1", "Adam's β₁", betaRange, adam(func(c *optim.AdamConfig) *float64 { return &c.Beta1 }))),
		onlyAdam(floatOption("beta2", "Adam's β₂", betaRange, adam(func(c *optim.AdamConfig) *float64 { return &c.Beta2 }))),
		onlyAdam(floatOption("eps", "Adam's ε", positive, adam(func(c *optim.AdamConfig) *float64 { return &c.Eps }))),
		onlySGD(floatOption("momentum", "SGD's momentum", unitOpen, sgd(func(c *optim.SGDConfig) *float64 { return &c.Momentum }))),
		onlySGD(floatOption("dampening", "SGD's dampening", unitClose, sgd(func(c *optim.SGDConfig) *float64 { return &c.Dampening }))),
		onlySGD(boolOption("nesterov", "SGD's Nesterov momentum", false, field[bool]{
			get: func(p Preset) bool { return p.Optimizer.SGD.Nesterov },
			set: func(p *Preset, v bool) {
				c := *p.Optimizer.SGD
				c.Nesterov = v
				p.Optimizer.SGD = &c
			},
		})),
	}
}

// withOptimizer returns the method's own options followed by the
// optimizer's.
func withOptimizer(own ...Option) []Option { return append(own, optimizerOptions()...) }

// rhoOption is a multi-view method's share of confident views: setting
// it also raises MinViews so that at least one view is kept.
func rhoOption(key, about string, f field[float64]) Option {
	o := floatOption(key, about, unitShare, f)
	set := o.set
	o.set = func(p *Preset, s string) error {
		if err := set(p, s); err != nil {
			return err
		}
		p.MinViews = minViews(f.get(*p))
		return nil
	}
	return o
}

// viewsOption is a multi-view method's number of views per image
// (Preset.SetViews).
var viewsOption = Option{Key: "views", About: "views per image, the base view included", Allowed: "an integer ≥ 2 and ≥ the method's fewest",
	set: func(p *Preset, s string) error {
		v, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		return p.SetViews(v)
	},
	get: func(p Preset) string { return strconv.Itoa(p.Views) },
}
