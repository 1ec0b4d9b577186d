package corrupt

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Source yields the random draws of a corruption, one number at a time.
//
// The corruptions call it in the order in which the original numpy code
// consumed numpy's global RandomState: arrays in C order (row, column,
// channel), calls in program order (see the README of the corruption
// fixtures). A Source that replays recorded numpy draws therefore reproduces
// the reference outputs; see Replay.
type Source interface {
	// Normal returns a draw from N(loc, scale²).
	Normal(loc, scale float64) float64
	// Uniform returns a draw from U[low, high).
	Uniform(low, high float64) float64
	// Poisson returns a draw from Poisson(lam), lam ≥ 0.
	Poisson(lam float64) int
	// Bernoulli returns true with probability p.
	Bernoulli(p float64) bool
	// IntRange returns an integer uniform in [low, high).
	IntRange(low, high int) int
}

// PCG is the Source used to generate new data: math/rand/v2's PCG generator.
type PCG struct {
	r *rand.Rand
}

// NewPCG returns a PCG Source seeded with (seed1, seed2).
func NewPCG(seed1, seed2 uint64) *PCG {
	return &PCG{r: rand.New(rand.NewPCG(seed1, seed2))}
}

// NewSource returns the Source for one (image, corruption, severity) of a
// data set generated with the given seed. The rule is
//
//	PCG(seed, image<<16 | k<<8 | severity)
//
// where k is the index of the corruption in Names (0…14). Every image,
// corruption and severity thus gets its own stream, and a result does not
// depend on which other images or corruptions were generated before it.
// An unknown name or a severity outside 1…5 is an error.
func NewSource(seed uint64, image int, name string, severity int) (*PCG, error) {
	k, err := index(name)
	if err != nil {
		return nil, err
	}
	if severity < 1 || severity > 5 {
		return nil, fmt.Errorf("corrupt: %s: severity %d outside 1…5", name, severity)
	}
	if image < 0 {
		return nil, fmt.Errorf("corrupt: negative image index %d", image)
	}
	return NewPCG(seed, uint64(image)<<16|uint64(k)<<8|uint64(severity)), nil
}

// Normal implements Source.
func (p *PCG) Normal(loc, scale float64) float64 { return loc + scale*p.r.NormFloat64() }

// Uniform implements Source.
func (p *PCG) Uniform(low, high float64) float64 { return low + (high-low)*p.r.Float64() }

// Bernoulli implements Source.
func (p *PCG) Bernoulli(prob float64) bool { return p.r.Float64() < prob }

// IntRange implements Source. It returns low when high ≤ low.
func (p *PCG) IntRange(low, high int) int {
	if high <= low {
		return low
	}
	return low + p.r.IntN(high-low)
}

// Poisson implements Source: multiplication of uniforms below lam = 10,
// Hörmann's PTRS transformed rejection above (the methods numpy uses).
func (p *PCG) Poisson(lam float64) int {
	switch {
	case !(lam > 0):
		return 0
	case lam < 10:
		l := math.Exp(-lam)
		k, prod := 0, p.r.Float64()
		for prod > l {
			k++
			prod *= p.r.Float64()
		}
		return k
	}
	slam := math.Sqrt(lam)
	loglam := math.Log(lam)
	b := 0.931 + 2.53*slam
	a := -0.059 + 0.02483*b
	invAlpha := 1.1239 + 1.1328/(b-3.4)
	vr := 0.9277 - 3.6224/(b-2)
	for {
		u := p.r.Float64() - 0.5
		v := p.r.Float64()
		us := 0.5 - math.Abs(u)
		k := math.Floor((2*a/us+b)*u + lam + 0.43)
		if us >= 0.07 && v <= vr {
			return int(k)
		}
		if k < 0 || (us < 0.013 && v > us) {
			continue
		}
		lg, _ := math.Lgamma(k + 1)
		if math.Log(v)+math.Log(invAlpha)-math.Log(a/(us*us)+b) <= -lam+k*loglam-lg {
			return int(k)
		}
	}
}

// Replay is a Source that returns recorded draws in order, ignoring the
// distribution parameters: a recorded numpy normal(loc, scale) value is
// returned as it is by Normal, a recorded boolean (0 or 1) by Bernoulli.
// When the record runs out it returns zeros and Err reports the shortfall.
type Replay struct {
	values []float64
	next   int
	short  int
}

// NewReplay returns a Replay of values.
func NewReplay(values []float64) *Replay { return &Replay{values: values} }

func (r *Replay) pop() float64 {
	if r.next >= len(r.values) {
		r.short++
		return 0
	}
	v := r.values[r.next]
	r.next++
	return v
}

// Remaining returns the number of recorded draws not consumed yet.
func (r *Replay) Remaining() int { return len(r.values) - r.next }

// Err reports whether more draws were asked for than were recorded.
func (r *Replay) Err() error {
	if r.short > 0 {
		return fmt.Errorf("corrupt: replay: %d draws asked for beyond the %d recorded", r.short, len(r.values))
	}
	return nil
}

// Normal implements Source.
func (r *Replay) Normal(loc, scale float64) float64 { return r.pop() }

// Uniform implements Source.
func (r *Replay) Uniform(low, high float64) float64 { return r.pop() }

// Poisson implements Source.
func (r *Replay) Poisson(lam float64) int { return int(r.pop()) }

// Bernoulli implements Source.
func (r *Replay) Bernoulli(p float64) bool { return r.pop() != 0 }

// IntRange implements Source.
func (r *Replay) IntRange(low, high int) int { return int(r.pop()) }
