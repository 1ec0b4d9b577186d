package kernel

import (
	"fmt"
	"math"
)

// AdamScalars are the float32 numbers of one Adam or AdamW step, as
// optim.Adam rounds them for a parameter at a given step count
// (optim.AdamConfig.Scalars32).
type AdamScalars struct {
	Beta1, Beta2                 float32
	OneMinusBeta1, OneMinusBeta2 float32
	Eps                          float32
	// WeightDecay is the L2 penalty's wd (Adam) and Decay the parameters'
	// factor 1 − lr·wd (AdamW, Decoupled); neither applies when
	// HasWeightDecay is false.
	WeightDecay, Decay float32
	HasWeightDecay     bool
	Decoupled          bool
	// NegStepSize is −lr/(1 − β1^step), BC2Sqrt √(1 − β2^step).
	NegStepSize, BC2Sqrt float32
	// Fresh treats the moments as zero (the parameter's first step) rather
	// than reading them.
	Fresh bool
}

// AdamDevice is a Device that can also run Adam's update on its buffers
// (package gpu; Host), so that trainable parameters, their gradients and
// the optimizer's moments stay there between steps.
type AdamDevice interface {
	Device
	// NonFinite writes to flag (one value) the number of the n values of x
	// that are NaN or ±Inf, as a float: Adam skips a step whose gradients
	// are not all finite.
	NonFinite(flag, x Buf, n int) error
	// AdamStep updates the n values of p and the moments m and v from the
	// gradient g, as AdamStep does on slices, unless skip (one value; nil:
	// none) is not zero: with NonFinite's count there, a step whose
	// gradients are not all finite changes nothing, without the host
	// reading the count first.
	AdamStep(p, g, m, v Buf, n int, s AdamScalars, skip Buf) error
}

// AdamStep is one Adam or AdamW step on p from the gradient g with the
// moments m and v, each product, sum and quotient rounded to float32 in
// the order of optim.Adam's float32 arithmetic (torch's single-tensor
// Adam), so that it gives optim.Adam's values bit for bit:
//
//	g ← g + wd·p                      (Adam with weight decay)
//	p ← p·(1 − lr·wd)                 (AdamW)
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g·g
//	p ← p − (lr/bc1)·m / (√v/√bc2 + eps)
func AdamStep(p, g, m, v []float32, s AdamScalars) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	for i, gi := range g {
		x := p[i]
		if s.HasWeightDecay {
			if s.Decoupled {
				x = float32(x * s.Decay)
			} else {
				gi = float32(gi + float32(s.WeightDecay*x))
			}
		}
		mi, vi := float32(0), float32(0)
		if !s.Fresh {
			mi, vi = m[i], v[i]
		}
		mi = float32(float32(mi*s.Beta1) + float32(s.OneMinusBeta1*gi))
		vi = float32(float32(vi*s.Beta2) + float32(float32(s.OneMinusBeta2*gi)*gi))
		m[i], v[i] = mi, vi
		denom := float32(float32(float32(math.Sqrt(float64(vi)))/s.BC2Sqrt) + s.Eps)
		p[i] = float32(x + float32(float32(s.NegStepSize*mi)/denom))
	}
}

// NonFinite returns the number of values of x that are NaN or ±Inf.
func NonFinite(x []float32) int {
	c := 0
	for _, v := range x {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			c++
		}
	}
	return c
}

func (host) NonFinite(flag, x Buf, n int) error {
	if flag.Len() < 1 || x.Len() < n {
		return fmt.Errorf("kernel: Host.NonFinite: %d values of a buffer of %d, flag of %d", n, x.Len(), flag.Len())
	}
	hb(flag)[0] = float32(NonFinite(hb(x)[:n]))
	return nil
}

func (host) AdamStep(p, g, m, v Buf, n int, s AdamScalars, skip Buf) error {
	for _, b := range []Buf{p, g, m, v} {
		if b.Len() < n {
			return fmt.Errorf("kernel: Host.AdamStep: %d values of a buffer of %d", n, b.Len())
		}
	}
	if skip != nil && hb(skip)[0] != 0 {
		return nil
	}
	AdamStep(hb(p)[:n], hb(g)[:n], hb(m)[:n], hb(v)[:n], s)
	return nil
}
