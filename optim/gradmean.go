package optim

import (
	"fmt"
	"sort"
)

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
			return fmt.Errorf("optim: grad mean: parameter %q: length %d, earlier %d", p.Name, len(p.Grad), len(s))
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

// Sums returns the number of Add calls and a copy of the per-parameter sums,
// the whole state (to save it).
func (g *GradMean) Sums() (count int, sums map[string][]float64) {
	sums = make(map[string][]float64, len(g.sums))
	for k, v := range g.sums {
		sums[k] = append([]float64(nil), v...)
	}
	return g.count, sums
}

// SetSums restores what Sums returned.
func (g *GradMean) SetSums(count int, sums map[string][]float64) error {
	if count < 0 || count == 0 && len(sums) > 0 {
		return fmt.Errorf("optim: grad mean: %d sums after %d Add calls", len(sums), count)
	}
	g.count, g.sums = count, nil
	for k, v := range sums {
		if g.sums == nil {
			g.sums = map[string][]float64{}
		}
		g.sums[k] = append([]float64(nil), v...)
	}
	return nil
}
