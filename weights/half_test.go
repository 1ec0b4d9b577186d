package weights

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func isNaN32(f float32) bool { return f != f }

// TestHalfRoundTrip: every binary16 value converts to float32 and back to
// itself (NaNs to a NaN).
func TestHalfRoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := HalfToFloat32(uint16(h))
		got := Float32ToHalf(f)
		if isNaN32(f) {
			if !isNaN32(HalfToFloat32(got)) {
				t.Fatalf("NaN %#04x -> %#04x, not a NaN", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, got)
		}
	}
}

// TestBFloat16RoundTrip: the same for bfloat16.
func TestBFloat16RoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := BFloat16ToFloat32(uint16(h))
		got := Float32ToBFloat16(f)
		if isNaN32(f) {
			if !isNaN32(BFloat16ToFloat32(got)) {
				t.Fatalf("NaN %#04x -> %#04x, not a NaN", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, got)
		}
	}
}

// checkBoundaries tests rounding at every boundary between two adjacent
// finite values of a 16-bit format, and between the largest finite value
// and Inf: the exact midpoint (representable in float32 for both formats)
// must go to the even neighbour, the float32 values just above and below
// it to the nearer one. Negative values mirror positive ones.
func checkBoundaries(t *testing.T, name string, maxFinite uint16, toF32 func(uint16) float32, fromF32 func(float32) uint16) {
	for h := uint16(0); h <= maxFinite; h++ {
		a := float64(toF32(h))
		var b float64
		if h == maxFinite {
			// Where IEEE rounding overflows: one more unit of the top binade.
			b = 2*a - float64(toF32(h-1))
		} else {
			b = float64(toF32(h + 1))
		}
		mid := float32((a + b) / 2)
		if float64(mid) != (a+b)/2 {
			t.Fatalf("%s: midpoint of %#04x not exact in float32", name, h)
		}
		even := h
		if h&1 == 1 {
			even = h + 1
		}
		for _, sign := range []float32{1, -1} {
			sbit := uint16(0)
			if sign < 0 {
				sbit = 0x8000
			}
			cases := []struct {
				x    float32
				want uint16
			}{
				{sign * mid, even | sbit},
				{sign * math.Nextafter32(mid, float32(math.Inf(1))), (h + 1) | sbit},
				{sign * math.Nextafter32(mid, 0), h | sbit},
			}
			for _, c := range cases {
				if got := fromF32(c.x); got != c.want {
					t.Fatalf("%s(%v [%#08x]) = %#04x, want %#04x", name, c.x, math.Float32bits(c.x), got, c.want)
				}
			}
		}
	}
}

func TestFloat32ToHalfBoundaries(t *testing.T) {
	checkBoundaries(t, "Float32ToHalf", 0x7bff, HalfToFloat32, Float32ToHalf)
}

func TestFloat32ToBFloat16Boundaries(t *testing.T) {
	checkBoundaries(t, "Float32ToBFloat16", 0x7f7f, BFloat16ToFloat32, Float32ToBFloat16)
}

// TestFloat32ToHalfRandom compares against an independent reference: the
// nearest of all finite halves found by binary search in float64, ties to
// even, overflow to Inf from 65520 (the midpoint past 65504) up.
func TestFloat32ToHalfRandom(t *testing.T) {
	vals := make([]float64, 0x7c00) // positive finite halves, increasing
	for h := range vals {
		vals[h] = float64(HalfToFloat32(uint16(h)))
	}
	ref := func(x float32) uint16 {
		sign := uint16(0)
		ax := float64(x)
		if ax < 0 || (ax == 0 && math.Signbit(ax)) {
			sign, ax = 0x8000, -ax
		}
		if ax >= 65520 {
			return sign | 0x7c00
		}
		i := sort.SearchFloat64s(vals, ax) // vals[i-1] < ax <= vals[i]
		if i == len(vals) {
			return sign | 0x7bff
		}
		if vals[i] == ax || i == 0 {
			return sign | uint16(i)
		}
		lo, hi := ax-vals[i-1], vals[i]-ax
		switch {
		case lo < hi:
			return sign | uint16(i-1)
		case hi < lo:
			return sign | uint16(i)
		case i%2 == 0:
			return sign | uint16(i)
		}
		return sign | uint16(i-1)
	}
	r := rand.New(rand.NewPCG(1, 2))
	n := 1 << 20
	if testing.Short() {
		n = 1 << 16
	}
	for range n {
		// Mostly values in and near the half range, some anywhere.
		var x float32
		if r.IntN(4) == 0 {
			x = math.Float32frombits(r.Uint32())
		} else {
			x = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(44)-28)))
		}
		if isNaN32(x) {
			continue
		}
		if got, want := Float32ToHalf(x), ref(x); got != want {
			t.Fatalf("Float32ToHalf(%v [%#08x]) = %#04x, reference %#04x", x, math.Float32bits(x), got, want)
		}
	}
}

func TestSpecialValues(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, c := range []struct {
		x      float32
		h, b16 uint16
	}{
		{0, 0, 0},
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{1, 0x3c00, 0x3f80},
		{-2, 0xc000, 0xc000},
		{inf, 0x7c00, 0x7f80},
		{-inf, 0xfc00, 0xff80},
		{65504, 0x7bff, 0x4780},
		{1e-8, 0, 0x322c},                       // below half the smallest half subnormal
		{math.Float32frombits(1), 0, 0},         // float32 subnormal
		{math.MaxFloat32, 0x7c00, 0x7f80},       // rounds up to Inf in bfloat16 as well
		{5.960464477539063e-08, 0x0001, 0x3380}, // 2^-24, smallest half subnormal
	} {
		if got := Float32ToHalf(c.x); got != c.h {
			t.Errorf("Float32ToHalf(%v) = %#04x, want %#04x", c.x, got, c.h)
		}
		if got := Float32ToBFloat16(c.x); got != c.b16 {
			t.Errorf("Float32ToBFloat16(%v) = %#04x, want %#04x", c.x, got, c.b16)
		}
	}
	if !isNaN32(HalfToFloat32(Float32ToHalf(nan))) || !isNaN32(BFloat16ToFloat32(Float32ToBFloat16(nan))) {
		t.Error("NaN did not stay NaN")
	}
	// A NaN whose payload lives only in the low bits must not become Inf.
	low := math.Float32frombits(0x7f800001)
	if !isNaN32(HalfToFloat32(Float32ToHalf(low))) || !isNaN32(BFloat16ToFloat32(Float32ToBFloat16(low))) {
		t.Error("low-payload NaN became a number")
	}
}
