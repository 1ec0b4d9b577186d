//go:build cuda && cgo

package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
)

// halfBits is the reference rounding of x to 16 bits (to nearest, ties to
// even, subnormals kept), by way of float64: bfloat16, or IEEE half.
func halfBits(x float32, f kernel.HalfFormat) uint16 {
	u := math.Float32bits(x)
	if f == kernel.HalfBF16 {
		if u&0x7fffffff > 0x7f800000 {
			return uint16(u>>16) | 0x40
		}
		return uint16((u + 0x7fff + (u>>16)&1) >> 16)
	}
	sign := uint16(u>>16) & 0x8000
	a := math.Abs(float64(x))
	switch {
	case math.IsNaN(float64(x)):
		return sign | 0x7e00
	case a >= 65520: // rounds past 65504
		return sign | 0x7c00
	case a < 0x1p-14: // subnormal: a multiple of 2^-24
		return sign | uint16(math.RoundToEven(a*0x1p24))
	}
	e := math.Floor(math.Log2(a))
	if math.Ldexp(1, int(e)) > a { // Log2's rounding
		e--
	} else if math.Ldexp(1, int(e)+1) <= a {
		e++
	}
	m := math.RoundToEven(math.Ldexp(a, 10-int(e))) // 1024…2048
	return sign | uint16((int(e)+15)<<10+int(m)-1024)
}

// halfValue widens 16 bits of format f to float32.
func halfValue(h uint16, f kernel.HalfFormat) float32 {
	if f == kernel.HalfBF16 {
		return math.Float32frombits(uint32(h) << 16)
	}
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0:
		return sign * float32(math.Ldexp(m, -24))
	case 31:
		if m != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * float32(math.Ldexp(1024+m, e-25))
}

// download16 returns the n 16-bit values of b.
func download16(t *testing.T, d *device, b kernel.Buf, n int) []uint16 {
	t.Helper()
	slots := download(t, d, b, kernel.HalfLen(n))
	h := make([]uint16, n)
	for i := range h {
		h[i] = uint16(math.Float32bits(slots[i/2]) >> (16 * (i % 2)))
	}
	return h
}

// alloc16 returns a 16-bit buffer of n values.
func alloc16(t *testing.T, d *device, n int) kernel.Buf {
	t.Helper()
	b, err := d.Alloc(kernel.HalfLen(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	return b
}

// TestHalfMatchesCPU checks the 16-bit operands of --precision bf16 and
// fp16 (kernel.Half): ToHalf rounds as halfBits does, bit for bit, on
// random values and on the edges (ties, subnormals, the largest half,
// overflow, infinities, NaN); LayerNormHalf, MergeHeadsHalf,
// BiasActivationHalf and SoftmaxHalf (rows for a group of threads and for a block, causal or
// not) write the rounding of what their float32 kernels write, bit for
// bit, BiasActivationHalf16 the rounding of BiasActivation of its 16-bit
// input widened and SplitHeadsHalf16 (with and without the bias) the
// rounding of SplitHeadsBias of its 16-bit input widened; GemmHalf and
// GemmBatchedHalf (attention's two products, on parts of a larger buffer)
// of rounded operands agree with the CPU's float32 products of the same
// rounded values within tol, and GemmHalf16 within half a unit in the
// last place of its 16-bit output.
// A device in fp32 refuses the 16-bit methods.
func TestHalfMatchesCPU(t *testing.T) {
	for _, prec := range []Precision{BF16, FP16} {
		t.Run(prec.String(), func(t *testing.T) {
			d := openOrSkip(t, Options{Precision: prec})
			f := d.HalfFormat()
			rng := rand.New(rand.NewPCG(17, 18))
			x := randSlice(rng, 4000)
			for i := range x {
				x[i] = float32(math.Ldexp(float64(x[i]), rng.IntN(60)-40))
			}
			x = append(x, 0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519, 65520, 65536, -70000, 1e30,
				float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
				0x1p-14, 0x1p-24, 0x1p-25, 0x1.8p-25, 0x1.8p-24, 0x1.002p0, 0x1.004p0, 0x1.006p0, 0x1.01p0, 0x1.03p0, 0x1.0018p0, 0x1.0008p0, 0x1.8p-24,
				0x1p-130, 3.1415927, 0x1.ffep15, math.MaxFloat32)
			n := len(x)
			y16 := alloc16(t, d, n)
			if err := d.ToHalf(y16, upload(t, d, x), n); err != nil {
				t.Fatal(err)
			}
			for i, h := range download16(t, d, y16, n) {
				if want := halfBits(x[i], f); h != want {
					t.Fatalf("ToHalf(%g): %#04x, want %#04x", x[i], h, want)
				}
			}

			// The kernels that write a product's input in 16 bits.
			rows, cols := 14, 40
			v := randSlice(rng, rows*cols)
			b := randSlice(rng, cols)
			vd, bd := upload(t, d, v), upload(t, d, b)
			same16 := func(name string, got []uint16, want []float32) {
				t.Helper()
				for i := range want {
					if w := halfBits(want[i], f); got[i] != w {
						t.Fatalf("%s: value %d is %#04x, want %#04x (%g rounded)", name, i, got[i], w, want[i])
					}
				}
			}
			for _, c := range []int{cols, 1500} { // a group of threads per row, and a block
				vc := randSlice(rng, rows*c)
				vcd, gc, bc := upload(t, d, vc), upload(t, d, randSlice(rng, c)), upload(t, d, randSlice(rng, c))
				yd, h16 := upload(t, d, make([]float32, rows*c)), alloc16(t, d, rows*c)
				if err := d.LayerNorm(yd, vcd, rows, c, gc, bc, 1e-5, nil, nil); err != nil {
					t.Fatal(err)
				}
				if err := d.LayerNormHalf(h16, vcd, rows, c, gc, bc, 1e-5, nil, nil); err != nil {
					t.Fatal(err)
				}
				same16(fmt.Sprintf("LayerNormHalf %d×%d", rows, c), download16(t, d, h16, rows*c), download(t, d, yd, rows*c))
				// With the residual stream x + bias written in float32 too,
				// bit for bit what LayerNormResidual writes.
				bias := randSlice(rng, c)
				bd := upload(t, d, bias)
				res32, res16 := upload(t, d, make([]float32, rows*c)), upload(t, d, make([]float32, rows*c))
				if err := d.LayerNormResidual(yd, vcd, rows, c, gc, bc, 1e-5, nil, nil, res32, bd); err != nil {
					t.Fatal(err)
				}
				if err := d.LayerNormHalf(h16, vcd, rows, c, gc, bc, 1e-5, res16, bd); err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("LayerNormHalf with a residual %d×%d", rows, c)
				same16(name, download16(t, d, h16, rows*c), download(t, d, yd, rows*c))
				want := download(t, d, res32, rows*c)
				for i, v := range download(t, d, res16, rows*c) {
					if v != want[i] || v != vc[i]+bias[i%c] {
						t.Fatalf("%s: residual value %d is %g, want %g", name, i, v, vc[i]+bias[i%c])
					}
				}
			}
			yd, h16 := upload(t, d, make([]float32, rows*cols)), alloc16(t, d, rows*cols)
			for _, h := range []struct{ heads, dim int }{{4, 10}, {5, 8}} { // one value a thread; four
				if err := d.MergeHeads(yd, vd, 2, 7, 1, h.heads, h.dim); err != nil {
					t.Fatal(err)
				}
				if err := d.MergeHeadsHalf(h16, vd, 2, 7, h.heads, h.dim); err != nil {
					t.Fatal(err)
				}
				same16(fmt.Sprintf("MergeHeadsHalf, heads of %d", h.dim), download16(t, d, h16, rows*cols), download(t, d, yd, rows*cols))
			}
			for _, act := range []kernel.Activation{kernel.QuickGELUActivation, kernel.GELUActivation} {
				if err := d.BiasActivation(yd, nil, vd, rows, cols, bd, act, kernel.KeepNone); err != nil {
					t.Fatal(err)
				}
				if err := d.BiasActivationHalf(h16, vd, rows, cols, bd, act); err != nil {
					t.Fatal(err)
				}
				same16(fmt.Sprintf("BiasActivationHalf %d", act), download16(t, d, h16, rows*cols), download(t, d, yd, rows*cols))
			}

			// The activation from a 16-bit input (c_fc's output): the
			// rounding of BiasActivation of the widened values, also in
			// place.
			v16 := alloc16(t, d, rows*cols)
			if err := d.ToHalf(v16, vd, rows*cols); err != nil {
				t.Fatal(err)
			}
			vw := download(t, d, vd, rows*cols)
			for i := range vw {
				vw[i] = halfValue(halfBits(vw[i], f), f)
			}
			vwd := upload(t, d, vw)
			// Rows of 40 values take eight a thread (a uint4), of 28 one.
			for _, sh := range []struct{ rows, cols int }{{rows, cols}, {rows * cols / 28, 28}} {
				r, c := sh.rows, sh.cols
				for _, act := range []kernel.Activation{kernel.QuickGELUActivation, kernel.GELUActivation} {
					if err := d.BiasActivation(yd, nil, vwd, r, c, bd, act, kernel.KeepNone); err != nil {
						t.Fatal(err)
					}
					if err := d.BiasActivationHalf16(h16, v16, r, c, bd, act); err != nil {
						t.Fatal(err)
					}
					want := download(t, d, yd, r*c)
					name := fmt.Sprintf("BiasActivationHalf16 %d, rows of %d", act, c)
					same16(name, download16(t, d, h16, r*c), want)
					in := alloc16(t, d, r*c)
					if err := d.ToHalf(in, vd, r*c); err != nil {
						t.Fatal(err)
					}
					if err := d.BiasActivationHalf16(in, in, r, c, bd, act); err != nil {
						t.Fatal(err)
					}
					same16(name+" in place", download16(t, d, in, r*c), want)
				}
			}

			// Attention's 16-bit operands: q|k|v split into heads with
			// the bias (and without), the probabilities of short and long
			// rows, causal or not.
			const batch, tokens, heads = 2, 7, 2
			for _, hd := range []int{10, 16} { // one value a thread; eight (a uint4)
				qkv := randSlice(rng, batch*tokens*3*heads*hd)
				qb := randSlice(rng, 3*heads*hd)
				qkvd, qbd := upload(t, d, qkv), upload(t, d, qb)
				// From a 16-bit q|k|v (its product written in 16 bits): the
				// rounding of SplitHeadsBias of the widened values, bit for bit.
				qkv16 := alloc16(t, d, len(qkv))
				if err := d.ToHalf(qkv16, qkvd, len(qkv)); err != nil {
					t.Fatal(err)
				}
				qw := make([]float32, len(qkv))
				for i, v := range qkv {
					qw[i] = halfValue(halfBits(v, f), f)
				}
				qwd := upload(t, d, qw)
				for _, bias := range []kernel.Buf{qbd, nil} {
					sd, s16 := upload(t, d, make([]float32, len(qkv))), alloc16(t, d, len(qkv))
					if err := d.SplitHeadsBias(sd, qwd, bias, batch, tokens, 3, heads, hd); err != nil {
						t.Fatal(err)
					}
					if err := d.SplitHeadsHalf16(s16, qkv16, bias, batch, tokens, 3, heads, hd); err != nil {
						t.Fatal(err)
					}
					want := download(t, d, sd, len(qkv))
					name := fmt.Sprintf("SplitHeadsHalf16, heads of %d (bias %t)", hd, bias != nil)
					same16(name, download16(t, d, s16, len(qkv)), want)
					// Into a buffer 4 bytes past a 16-byte boundary: one
					// value a thread whatever hd.
					off := alloc16(t, d, len(qkv)+8)
					part := off.Slice(1, 1+kernel.HalfLen(len(qkv)))
					if err := d.SplitHeadsHalf16(part, qkv16, bias, batch, tokens, 3, heads, hd); err != nil {
						t.Fatal(err)
					}
					same16(name+", unaligned", download16(t, d, part, len(qkv)), want)
				}
				if err := d.SplitHeadsHalf16(alloc16(t, d, len(qkv)), qkv16.Slice(0, len(qkv)/4), qbd, batch, tokens, 3, heads, hd); err == nil {
					t.Error("SplitHeadsHalf16 with x16 too short: no error")
				}
			}
			for _, c := range []int{tokens, 1500} {
				for _, causal := range []bool{false, true} {
					r := 3 * c // three heads of c×c scores
					if c > tokens {
						r = 9
					}
					sc := randSlice(rng, r*c)
					for i := range sc {
						sc[i] *= 8
					}
					scd := upload(t, d, sc)
					pd, p16 := upload(t, d, make([]float32, r*c)), alloc16(t, d, r*c)
					if err := d.Softmax(pd, scd, r, c, 0.7, causal); err != nil {
						t.Fatal(err)
					}
					before := halfSoftmaxes.Load()
					if err := d.SoftmaxHalf(p16, scd, r, c, 0.7, causal); err != nil {
						t.Fatal(err)
					}
					if halfSoftmaxes.Load() != before+1 {
						t.Error("SoftmaxHalf not counted")
					}
					same16(fmt.Sprintf("SoftmaxHalf %d×%d causal %t", r, c, causal), download16(t, d, p16, r*c), download(t, d, pd, r*c))
				}
			}

			// The product of 16-bit operands: against the CPU's float32
			// product of the same rounded values.
			m, nn, k := 33, 20, 300
			a, w := randSlice(rng, m*k), randSlice(rng, nn*k)
			a16, w16 := alloc16(t, d, m*k), alloc16(t, d, nn*k)
			if err := d.ToHalf(a16, upload(t, d, a), m*k); err != nil {
				t.Fatal(err)
			}
			if err := d.ToHalf(w16, upload(t, d, w), nn*k); err != nil {
				t.Fatal(err)
			}
			for i := range a {
				a[i] = halfValue(halfBits(a[i], f), f)
			}
			for i := range w {
				w[i] = halfValue(halfBits(w[i], f), f)
			}
			for _, beta := range []float32{0, 1} {
				c0 := randSlice(rng, m*nn)
				want := append([]float32(nil), c0...)
				kernel.Gemm(false, true, m, nn, k, 0.5, a, k, w, k, beta, want, nn)
				cd := upload(t, d, c0)
				before := halfGemms.Load()
				if err := d.GemmHalf(false, true, m, nn, k, 0.5, a16, k, w16, k, beta, cd, nn); err != nil {
					t.Fatal(err)
				}
				if halfGemms.Load() != before+1 {
					t.Error("GemmHalf not counted")
				}
				check(t, fmt.Sprintf("GemmHalf β=%g", beta), download(t, d, cd, m*nn), want)
			}
			if err := d.GemmHalf(false, true, m, nn, k, 1, a16, k, w16.Slice(0, 1), k, 0, upload(t, d, make([]float32, m*nn)), nn); err == nil {
				t.Error("GemmHalf with B too short: no error")
			}

			// The product into a 16-bit C: each value within half a unit
			// in the last place of the 16-bit format (2⁻⁸ relative for
			// bfloat16's 8 bits, 2⁻¹¹ for half's 11) of the CPU's float32
			// product, plus 1e-5 of the largest for the sums' order.
			ulp := math.Ldexp(1, -8)
			if f == kernel.HalfFP16 {
				ulp = math.Ldexp(1, -11)
			}
			for _, beta := range []float32{0, 1} {
				c0 := randSlice(rng, m*nn)
				c16 := alloc16(t, d, m*nn)
				if err := d.ToHalf(c16, upload(t, d, c0), m*nn); err != nil {
					t.Fatal(err)
				}
				want := make([]float32, m*nn)
				for i := range c0 {
					want[i] = halfValue(halfBits(c0[i], f), f)
				}
				kernel.Gemm(false, true, m, nn, k, 0.5, a, k, w, k, beta, want, nn)
				before := halfOutGemms.Load()
				if err := d.GemmHalf16(false, true, m, nn, k, 0.5, a16, k, w16, k, beta, c16, nn); err != nil {
					t.Fatal(err)
				}
				if halfOutGemms.Load() != before+1 {
					t.Error("GemmHalf16 not counted")
				}
				var big, worst float64
				for _, x := range want {
					big = max(big, math.Abs(float64(x)))
				}
				for i, h := range download16(t, d, c16, m*nn) {
					g, w := float64(halfValue(h, f)), float64(want[i])
					if e := math.Abs(g - w); e > ulp*math.Abs(w)+1e-5*big {
						t.Fatalf("GemmHalf16 β=%g: value %d is %g, want %g within half a unit in the last place", beta, i, g, w)
					} else {
						worst = max(worst, e/big)
					}
				}
				t.Logf("GemmHalf16 β=%g: worst error %.2e of the largest", beta, worst)
			}

			// The strided-batched product of 16-bit operands, as attention
			// runs it: S = s·Q·Kᵀ and P·V over three matrices, each operand
			// a part of a larger 16-bit buffer.
			const bt, tn, dh = 3, 13, 24
			qk := randSlice(rng, 2*bt*tn*dh+4)
			qk16 := alloc16(t, d, len(qk))
			if err := d.ToHalf(qk16, upload(t, d, qk), len(qk)); err != nil {
				t.Fatal(err)
			}
			for i := range qk {
				qk[i] = halfValue(halfBits(qk[i], f), f)
			}
			q, kk := qk[4:4+bt*tn*dh], qk[4+bt*tn*dh:]
			q16, k16 := qk16.Slice(2, 2+bt*tn*dh/2), qk16.Slice(2+bt*tn*dh/2, kernel.HalfLen(len(qk)))
			want := make([]float32, bt*tn*tn)
			kernel.GemmBatched(false, true, bt, tn, tn, dh, 0.25, q, dh, tn*dh, kk, dh, tn*dh, 0, want, tn, tn*tn)
			cd := upload(t, d, make([]float32, len(want)))
			before := halfBatchedGemms.Load()
			if err := d.GemmBatchedHalf(false, true, bt, tn, tn, dh, 0.25, q16, dh, tn*dh, k16, dh, tn*dh, 0, cd, tn, tn*tn); err != nil {
				t.Fatal(err)
			}
			if halfBatchedGemms.Load() != before+1 {
				t.Error("GemmBatchedHalf not counted")
			}
			check(t, "GemmBatchedHalf Q·Kᵀ", download(t, d, cd, len(want)), want)
			// P·V: the scores as the probabilities, rounded.
			pv := download(t, d, cd, len(want))
			p16 := alloc16(t, d, len(pv))
			if err := d.ToHalf(p16, cd, len(pv)); err != nil {
				t.Fatal(err)
			}
			for i := range pv {
				pv[i] = halfValue(halfBits(pv[i], f), f)
			}
			want = make([]float32, bt*tn*dh)
			kernel.GemmBatched(false, false, bt, tn, dh, tn, 1, pv, tn, tn*tn, kk, dh, tn*dh, 0, want, dh, tn*dh)
			od := upload(t, d, make([]float32, len(want)))
			if err := d.GemmBatchedHalf(false, false, bt, tn, dh, tn, 1, p16, tn, tn*tn, k16, dh, tn*dh, 0, od, dh, tn*dh); err != nil {
				t.Fatal(err)
			}
			check(t, "GemmBatchedHalf P·V", download(t, d, od, len(want)), want)
			if err := d.GemmBatchedHalf(false, true, bt, tn, tn, dh, 1, q16, dh, tn*dh, k16.Slice(0, 10), dh, tn*dh, 0, cd, tn, tn*tn); err == nil {
				t.Error("GemmBatchedHalf with B too short: no error")
			}
		})
	}
	d := openOrSkip(t, Options{})
	if f := d.HalfFormat(); f != kernel.HalfNone {
		t.Errorf("fp32 device: HalfFormat %d", f)
	}
	b := func() kernel.Buf { return upload(t, d, make([]float32, 8)) }
	for name, err := range map[string]error{
		"ToHalf":               d.ToHalf(b(), b(), 2),
		"SplitHeadsHalf16":     d.SplitHeadsHalf16(b(), b(), nil, 1, 2, 1, 1, 2),
		"SoftmaxHalf":          d.SoftmaxHalf(b(), b(), 2, 2, 1, false),
		"GemmBatchedHalf":      d.GemmBatchedHalf(false, false, 1, 2, 2, 2, 1, b(), 2, 4, b(), 2, 4, 0, b(), 2, 4),
		"GemmHalf16":           d.GemmHalf16(false, false, 2, 2, 2, 1, b(), 2, b(), 2, 0, b(), 2),
		"BiasActivationHalf16": d.BiasActivationHalf16(b(), b(), 2, 2, nil, kernel.GELUActivation),
	} {
		if err == nil {
			t.Errorf("%s on an fp32 device: no error", name)
		}
	}
}
