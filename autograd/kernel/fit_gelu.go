//go:build ignore

// fit_gelu prints geluPoly, the polynomial of the float32 GELU (gelu.go).
//
// For a = |x| ≥ 0 the lower normal tail is written Φ(−a) = exp(−a²/2)·t·G(t)
// with t = 1/(1 + a/4). G is smooth on [t₀, 1] (t₀ = 1/(1 + 13.2/4), the
// clamp of gelu32): near t = 0 it tends to 1/(4√(2π)) through the asymptotic
// series of the Mills ratio, and G(1) = Φ(0) = 1/2. The degree-10
// polynomial in t that minimises the largest relative error of G over 3000
// Chebyshev points of [t₀, 1] is found by Lawson's iteratively reweighted
// least squares (Householder QR in the Chebyshev basis), converted to powers
// of t in 300-bit arithmetic and rounded to float32. It then reports the
// relative error of the float32 coefficients evaluated in float64 and of
// float32 Horner evaluation, as gelu32 does it.
//
// Run with `go run fit_gelu.go`; paste the output into gelu.go and
// gen_kernels.go.
package main

import (
	"fmt"
	"math"
	"math/big"
)

const (
	clamp = 13.2 // geluClamp
	c     = 0.25 // geluScale: t = 1/(1 + c·a)
	deg   = 10
	nodes = 3000
)

// g is G(t) from float64 math.Erfc (relative error near 1e-16, far below
// the fit's).
func g(t float64) float64 {
	a := (1 - t) / (c * t)
	return 0.5 * math.Erfc(a/math.Sqrt2) / (math.Exp(-0.5*a*a) * t)
}

func main() {
	t0 := 1 / (1 + c*clamp)
	ts, gs := make([]float64, nodes), make([]float64, nodes)
	for i := range ts {
		s := math.Cos(math.Pi * (float64(i) + 0.5) / nodes)
		ts[i] = t0 + (1-t0)*(s+1)/2
		gs[i] = g(ts[i])
	}
	toS := func(t float64) float64 { return 2*(t-t0)/(1-t0) - 1 }
	w := make([]float64, nodes)
	for i := range w {
		w[i] = 1.0 / nodes
	}
	var coef []float64
	var fitErr float64
	for range 60 {
		a := make([][]float64, nodes)
		b := make([]float64, nodes)
		for i, t := range ts {
			sw := math.Sqrt(w[i])
			a[i] = chebRow(toS(t), deg+1)
			for j := range a[i] {
				a[i][j] *= sw / gs[i]
			}
			b[i] = sw
		}
		coef = leastSquares(a, b)
		fitErr = 0
		var sum float64
		for i, t := range ts {
			e := math.Abs(chebEval(coef, toS(t))/gs[i] - 1)
			fitErr = max(fitErr, e)
			w[i] *= e
			sum += w[i]
		}
		for i := range w {
			w[i] /= sum
		}
	}
	p := toPowers(coef, t0)
	var e64, e32 float64
	for a := float32(0); a <= clamp; a += 1.0 / 1024 {
		t := 1 / (1 + c*a)
		ref := g(float64(t))
		s32 := p[deg]
		s64 := float64(p[deg])
		for k := deg - 1; k >= 0; k-- {
			s32 = float32(s32*t) + p[k]
			s64 = s64*float64(t) + float64(p[k])
		}
		e32 = max(e32, math.Abs(float64(s32)/ref-1))
		e64 = max(e64, math.Abs(s64/ref-1))
	}
	fmt.Printf("// fit %.3g, float32 coefficients %.3g, float32 Horner %.3g (relative)\n", fitErr, e64, e32)
	fmt.Printf("%v\n", p)
}

// chebRow is T₀(s) … T_{n−1}(s).
func chebRow(s float64, n int) []float64 {
	r := make([]float64, n)
	r[0] = 1
	if n > 1 {
		r[1] = s
	}
	for j := 2; j < n; j++ {
		r[j] = 2*s*r[j-1] - r[j-2]
	}
	return r
}

func chebEval(c []float64, s float64) float64 {
	var sum float64
	for j, v := range chebRow(s, len(c)) {
		sum += c[j] * v
	}
	return sum
}

// toPowers rewrites Σ cⱼ·Tⱼ(s), s = 2(t−t₀)/(1−t₀) − 1, in powers of t and
// rounds the coefficients to float32.
func toPowers(coef []float64, t0 float64) []float32 {
	const prec = 300
	f := func(v float64) *big.Float { return new(big.Float).SetPrec(prec).SetFloat64(v) }
	alpha := new(big.Float).SetPrec(prec).Quo(f(2), new(big.Float).SetPrec(prec).Sub(f(1), f(t0)))
	beta := new(big.Float).SetPrec(prec).Mul(alpha, f(t0))
	beta.Neg(beta).Sub(beta, f(1))
	times := func(p []*big.Float) []*big.Float { // p·s
		r := make([]*big.Float, len(p)+1)
		for i := range r {
			r[i] = f(0)
		}
		for i, v := range p {
			r[i].Add(r[i], new(big.Float).SetPrec(prec).Mul(v, beta))
			r[i+1].Add(r[i+1], new(big.Float).SetPrec(prec).Mul(v, alpha))
		}
		return r
	}
	cheb := [][]*big.Float{{f(1)}, times([]*big.Float{f(1)})}
	for j := 2; j < len(coef); j++ {
		next := times(cheb[j-1])
		for i := range next {
			next[i].Mul(next[i], f(2))
		}
		for i, v := range cheb[j-2] {
			next[i].Sub(next[i], v)
		}
		cheb = append(cheb, next)
	}
	sum := make([]*big.Float, len(coef))
	for i := range sum {
		sum[i] = f(0)
	}
	for j, tj := range cheb[:len(coef)] {
		for i, v := range tj {
			sum[i].Add(sum[i], new(big.Float).SetPrec(prec).Mul(v, f(coef[j])))
		}
	}
	out := make([]float32, len(sum))
	for i, v := range sum {
		x, _ := v.Float64()
		out[i] = float32(x)
	}
	return out
}

// leastSquares solves min ‖a·x − b‖₂ by Householder QR.
func leastSquares(a [][]float64, b []float64) []float64 {
	m, n := len(a), len(a[0])
	y := append([]float64(nil), b...)
	for k := range n {
		var norm float64
		for i := k; i < m; i++ {
			norm += a[i][k] * a[i][k]
		}
		norm = math.Sqrt(norm)
		if a[k][k] > 0 {
			norm = -norm
		}
		v := make([]float64, m)
		v[k] = a[k][k] - norm
		for i := k + 1; i < m; i++ {
			v[i] = a[i][k]
		}
		var vv float64
		for i := k; i < m; i++ {
			vv += v[i] * v[i]
		}
		reflect := func(col func(i int) *float64) {
			var s float64
			for i := k; i < m; i++ {
				s += v[i] * *col(i)
			}
			s *= 2 / vv
			for i := k; i < m; i++ {
				*col(i) -= s * v[i]
			}
		}
		for j := k; j < n; j++ {
			reflect(func(i int) *float64 { return &a[i][j] })
		}
		reflect(func(i int) *float64 { return &y[i] })
	}
	x := make([]float64, n)
	for k := n - 1; k >= 0; k-- {
		s := y[k]
		for j := k + 1; j < n; j++ {
			s -= a[k][j] * x[j]
		}
		x[k] = s / a[k][k]
	}
	return x
}
