package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// geluRef is GELU and its slope Φ(x) + x·φ(x) in float64 from math.Erfc
// and math.Exp: relative error near 1e-16, far below float32's.
func geluRef(x float64) (y, slope float64) {
	cdf := 0.5 * math.Erfc(-x/math.Sqrt2)
	return x * cdf, cdf + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

// sweep32 returns every stride-th float32 bit pattern from 0 up to hi, with
// both signs: dense near zero, through the subnormals and every binade.
func sweep32(hi float32, stride uint32) []float32 {
	var xs []float32
	for b := uint32(0); b <= math.Float32bits(hi); b += stride {
		v := math.Float32frombits(b)
		xs = append(xs, v, -v)
	}
	return xs
}

// TestGELU32Accuracy measures the float32 GELU and its slope against the
// float64 formulas over 22.6 million float32 values in [−14, 14] (every
// 97th bit pattern) and checks them against these bounds:
//
//   - y for x ≥ −4: relative error ≤ 8e-7 (measured 5.7e-7, under 5 ulps
//     of 2⁻²³). It comes from the exponential (under 2 ulps), Horner's
//     rule for G (1.5e-7) and the roundings of t, the products and 1 − q.
//   - y for −13.2 ≤ x < −4: relative error ≤ 8e-7 + 2⁻²⁴·x²/2 (measured
//     4.4e-6 at x = −13.13): the exponent −x²/2 is rounded to float32, an
//     absolute error up to 2⁻²⁴·x²/2 that the exponential turns into that
//     relative error. There |y| < 1.3e-4 and the absolute error is below
//     6e-10.
//   - y = −0 for x < −13.2, where the true value is a subnormal above
//     −6e−39.
//   - the slope: absolute error ≤ 4e-7 (measured 2.7e-7; the slope
//     crosses zero at x = −0.75, so a relative bound would say nothing
//     there).
//
// The relative error is taken against max(|y|, 2⁻¹²⁶), so subnormal
// results count by their absolute error. Forward-pass fixtures compare at
// 1e-5 of a tensor's largest value and gradients at 1e-4: these bounds sit
// more than ten times below both.
func TestGELU32Accuracy(t *testing.T) { forEachPath(t, testGELU32Accuracy) }

func testGELU32Accuracy(t *testing.T) {
	xs := sweep32(14, 97)
	y := make([]float32, len(xs))
	slope := make([]float32, len(xs))
	gelu32(y, xs)
	geluSlope32(slope, xs)
	var worstY, worstTail, worstSlope float64
	for i, x := range xs {
		f := float64(x)
		wy, ws := geluRef(f)
		if x < -geluClamp {
			if math.Float32bits(y[i]) != math.Float32bits(float32(math.Copysign(0, -1))) {
				t.Fatalf("GELU(%g) = %g, want −0", x, y[i])
			}
		} else {
			e := math.Abs(float64(y[i])-wy) / max(math.Abs(wy), 0x1p-126)
			bound := 8e-7
			if x < -4 {
				bound += 0x1p-24 * f * f / 2
				worstTail = max(worstTail, e)
			} else {
				worstY = max(worstY, e)
			}
			if !(e <= bound) {
				t.Fatalf("GELU(%g) = %g, float64 gives %g: relative error %.3g above %.3g", x, y[i], wy, e, bound)
			}
		}
		e := math.Abs(float64(slope[i]) - ws)
		if !(e <= 4e-7) {
			t.Fatalf("GELU slope at %g = %g, float64 gives %g: error %.3g above 4e-7", x, slope[i], ws, e)
		}
		worstSlope = max(worstSlope, e)
	}
	t.Logf("%d values: y relative error %.3g (x ≥ −4), %.3g (−13.2 ≤ x < −4); slope absolute error %.3g",
		len(xs), worstY, worstTail, worstSlope)

	// The backward pass is dy times the slope, bit for bit.
	rng := rand.New(rand.NewPCG(2, 7))
	dy := make([]float32, len(xs))
	for i := range dy {
		dy[i] = float32(rng.NormFloat64())
	}
	dx := make([]float32, len(xs))
	geluBackward32(dx, dy, xs)
	for i := range dx {
		if want := dy[i] * slope[i]; math.Float32bits(dx[i]) != math.Float32bits(want) {
			t.Fatalf("GELUBackward at x = %g, dy = %g: %g, dy·slope = %g", xs[i], dy[i], dx[i], want)
		}
	}
}

func TestGELU32Special(t *testing.T) { forEachPath(t, testGELU32Special) }

func testGELU32Special(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		x, y, slope float32 // NaN: want NaN
	}{
		{0, 0, 0.5},
		{negZero, negZero, 0.5},
		{0x1p-149, 0x1p-150, 0.5}, // smallest subnormal: y rounds to it or 0
		{inf, inf, 1},
		{-inf, negZero, 0},
		{20, 20, 1},
		{-20, negZero, 0},
		{nan, nan, nan},
	}
	// Repeat each value over a vector's width and a tail, so both the AVX2
	// kernel and the Go loop see it.
	for _, c := range cases {
		x := make([]float32, 11)
		for i := range x {
			x[i] = c.x
		}
		y, slope, dx := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
		gelu32(y, x)
		geluSlope32(slope, x)
		dy := make([]float32, len(x))
		for i := range dy {
			dy[i] = 2
		}
		geluBackward32(dx, dy, x)
		check := func(what string, got, want float32, i int) {
			t.Helper()
			switch {
			case math.IsNaN(float64(want)):
				if !math.IsNaN(float64(got)) {
					t.Errorf("%s(%g)[%d] = %g, want NaN", what, c.x, i, got)
				}
			case c.x == 0x1p-149 && what == "GELU":
				if got != 0x1p-149 && got != 0 {
					t.Errorf("%s(%g)[%d] = %g, want 2⁻¹⁴⁹ or 0", what, c.x, i, got)
				}
			case want == 0.5:
				// Φ(0) = 1/2 within the rounding of 1 − G(1).
				if math.Abs(float64(got)-0.5) > 1.2e-7 {
					t.Errorf("%s(%g)[%d] = %g, want 0.5", what, c.x, i, got)
				}
			default:
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Errorf("%s(%g)[%d] = %g, want %g", what, c.x, i, got, want)
				}
			}
		}
		for i := range x {
			check("GELU", y[i], c.y, i)
			check("GELU slope", slope[i], c.slope, i)
			check("GELU backward (dy = 2)", dx[i]/2, c.slope, i)
		}
	}
}

// TestGELUVector checks that the AVX2 GELU kernels give the Go loops' bits
// at every length from 0 to 70 and at 1037 (vector prefix plus scalar
// tail), in place and not, over random values, the clamp and the ends.
func TestGELUVector(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2: the Go loops are the only path")
	}
	rng := rand.New(rand.NewPCG(11, 4))
	x := make([]float32, 1037)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 4)
	}
	copy(x[3:], []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 13.2, -13.2, 13.1999, -13.1999,
		14, -14, 200, -200, float32(math.Inf(1)), float32(math.Inf(-1)), -0.7517916, 5.5, -5.5})
	dy := to32(randVec(rng, len(x), 0, 1))
	same := func(name string, n int, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s, length %d: value %d (x = %g) is %g, the Go loop gives %g", name, n, i, x[i], got[i], want[i])
			}
		}
	}
	lengths := []int{1037}
	for n := range 71 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, off := range []int{0, 3} { // the special values sit from 3 on
			if off+n > len(x) {
				continue
			}
			xs, dys := x[off:off+n], dy[off:off+n]
			y, want := make([]float32, n), make([]float32, n)
			gelu32(y, xs)
			gelu32Go(want, xs)
			same("gelu32", n, y, want)
			inPlace := append([]float32(nil), xs...)
			gelu32(inPlace, inPlace) // y may alias x
			same("gelu32 in place", n, inPlace, want)

			slope := make([]float32, n)
			geluSlope32(slope, xs)
			geluSlope32Go(want, xs)
			same("geluSlope32", n, slope, want)
			inPlace = append(inPlace[:0], xs...)
			geluSlope32(inPlace, inPlace) // slope may alias x
			same("geluSlope32 in place", n, inPlace, want)

			// Value and slope in one pass: both bits, slope in x's place.
			wantY, wantS := make([]float32, n), make([]float32, n)
			gelu32Go(wantY, xs)
			geluSlope32Go(wantS, xs)
			y2, s2 := make([]float32, n), append([]float32(nil), xs...)
			geluAndSlope32(y2, s2, s2)
			same("geluAndSlope32 value", n, y2, wantY)
			same("geluAndSlope32 slope in place", n, s2, wantS)
			geluAndSlope32Go(y2, s2, xs)
			same("geluAndSlope32Go value", n, y2, wantY)
			same("geluAndSlope32Go slope", n, s2, wantS)

			dx := append([]float32(nil), dys...)
			geluBackward32(dx, dx, xs) // dx may alias dy
			geluBackward32Go(want, dys, xs)
			same("geluBackward32", n, dx, want)
		}
	}
}
