package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// rowTol bounds max|float32 kernel − float64 reference| / max|reference| for
// the row-wise kernels: float32 rounding (6e-8) through a few sums of up to
// a few hundred terms stays below 1e-5; a wrong formula gives O(1).
const rowTol = 1e-5

// rowShapes are ragged sizes: single elements, widths off any SIMD multiple,
// and matrices large enough (≥ rowGrain elements) for the parallel path.
var rowShapes = [][2]int{{1, 1}, {1, 5}, {3, 1}, {7, 33}, {9, 31}, {129, 257}, {300, 77}}

func randVec(rng *rand.Rand, n int, center, spread float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = center + spread*rng.NormFloat64()
	}
	return v
}

func to32(v []float64) []float32 {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return f
}

// relErr32 is max|a − b| / max|b|.
func relErr32(a []float32, b []float64) float64 {
	var d, m float64
	for i := range b {
		d = max(d, math.Abs(float64(a[i])-b[i]))
		m = max(m, math.Abs(b[i]))
	}
	if m == 0 {
		return d
	}
	return d / m
}

func checkClose(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	e := relErr32(got, want)
	if e > rowTol || math.IsNaN(e) {
		t.Errorf("%s: relative error %.3g", what, e)
	}
	t.Logf("%s [%d]: worst relative error %.3g", what, len(want), e)
}

// refLayerNorm is LayerNorm written out from its definition, with the
// backward pass from the explicit Jacobian ∂x̂_i/∂x_j = rstd·(δ_ij − 1/n − x̂_i·x̂_j/n).
func refLayerNorm(x, gamma, beta, dy []float64, rows, cols int, eps float64) (y, dx, dg, db []float64) {
	y, dx = make([]float64, rows*cols), make([]float64, rows*cols)
	dg, db = make([]float64, cols), make([]float64, cols)
	n := float64(cols)
	for r := range rows {
		xr := x[r*cols : (r+1)*cols]
		var mu, v float64
		for _, a := range xr {
			mu += a / n
		}
		for _, a := range xr {
			v += (a - mu) * (a - mu) / n
		}
		rs := 1 / math.Sqrt(v+eps)
		xh := make([]float64, cols)
		for j, a := range xr {
			xh[j] = (a - mu) * rs
			y[r*cols+j] = xh[j]*gamma[j] + beta[j]
			dg[j] += dy[r*cols+j] * xh[j]
			db[j] += dy[r*cols+j]
		}
		for j := range cols {
			var s float64
			for i := range cols {
				d := 0.0
				if i == j {
					d = 1
				}
				s += dy[r*cols+i] * gamma[i] * rs * (d - 1/n - xh[i]*xh[j]/n)
			}
			dx[r*cols+j] = s
		}
	}
	return
}

// forEachPath runs body as a subtest or sub-benchmark of r once with the
// AVX2 row kernels ("avx2", where the CPU has them) and once with the Go
// loops ("go").
func forEachPath[T any](r interface{ Run(string, func(T)) bool }, body func(T)) {
	for _, vector := range []bool{true, false} {
		name := "go"
		if vector {
			if !haveAVX2 {
				continue
			}
			name = "avx2"
		}
		r.Run(name, func(x T) {
			saved := haveAVX2
			haveAVX2 = vector
			defer func() { haveAVX2 = saved }()
			body(x)
		})
	}
}

func TestLayerNorm(t *testing.T) { forEachPath(t, testLayerNorm) }

func testLayerNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	// The AVX2 rows take widths that are multiples of 8; the others fall
	// back to the Go loop.
	for _, sh := range append([][2]int{{2, 8}, {5, 64}, {40, 768}}, rowShapes...) {
		rows, cols := sh[0], sh[1]
		x := randVec(rng, rows*cols, 0.5, 2)
		g, b := randVec(rng, cols, 1, 0.2), randVec(rng, cols, 0, 0.2)
		dy := randVec(rng, rows*cols, 0, 1)
		y, dx, dg, db := refLayerNorm(x, g, b, dy, rows, cols, 1e-5)

		x32, g32 := to32(x), to32(g)
		y32 := make([]float32, rows*cols)
		mean, rstd := make([]float32, rows), make([]float32, rows)
		LayerNorm(y32, x32, rows, cols, g32, to32(b), 1e-5, mean, rstd)
		checkClose(t, "LayerNorm y", y32, y)

		dx32 := make([]float32, rows*cols)
		dg32, db32 := make([]float32, cols), make([]float32, cols)
		for j := range cols { // dgamma and dbeta accumulate
			dg32[j], db32[j] = 1, -1
			dg[j]++
			db[j]--
		}
		LayerNormBackward(dx32, dg32, db32, to32(dy), x32, rows, cols, g32, mean, rstd)
		if cols > 1 { // with one column, dx is 0 up to rounding
			checkClose(t, "LayerNorm dx", dx32, dx)
		}
		checkClose(t, "LayerNorm dgamma", dg32, dg)
		checkClose(t, "LayerNorm dbeta", db32, db)
		// dx alone and the parameters alone give the same answers.
		dxOnly := make([]float32, rows*cols)
		LayerNormBackward(dxOnly, nil, nil, to32(dy), x32, rows, cols, g32, mean, rstd)
		for i := range dxOnly {
			if dxOnly[i] != dx32[i] {
				t.Fatalf("%v: dx differs when computed alone", sh)
			}
		}
		dgOnly, dbOnly := make([]float32, cols), make([]float32, cols)
		for j := range cols {
			dgOnly[j], dbOnly[j] = 1, -1
		}
		LayerNormBackward(nil, dgOnly, dbOnly, to32(dy), x32, rows, cols, g32, mean, rstd)
		for j := range cols {
			if dgOnly[j] != dg32[j] || dbOnly[j] != db32[j] {
				t.Fatalf("%v: dgamma or dbeta differs when computed without dx", sh)
			}
		}
	}
}

// TestLayerNormVector compares the AVX2 LayerNorm rows with the Go loops
// they replace. The row sums run in another order, so mean and rstd may
// differ in their last bit and every output with them: the bound is 4 ulps
// of the largest value (4.8e-7 relative), where a wrong lane or a missed
// term gives errors of order 1e-3 and above.
func TestLayerNormVector(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2: the Go loops are the only path")
	}
	const tol = 4.8e-7
	rng := rand.New(rand.NewPCG(3, 8))
	type result struct{ y, mean, rstd, dx, dg, db, dxOnly []float32 }
	run := func(vector bool, x, g, b, dy []float32, rows, cols int) result {
		saved := haveAVX2
		haveAVX2 = vector
		defer func() { haveAVX2 = saved }()
		r := result{y: make([]float32, len(x)), mean: make([]float32, rows), rstd: make([]float32, rows),
			dx: make([]float32, len(x)), dg: make([]float32, cols), db: make([]float32, cols), dxOnly: make([]float32, len(x))}
		LayerNorm(r.y, x, rows, cols, g, b, 1e-5, r.mean, r.rstd)
		LayerNormBackward(r.dx, r.dg, r.db, dy, x, rows, cols, g, r.mean, r.rstd)
		LayerNormBackward(r.dxOnly, nil, nil, dy, x, rows, cols, g, r.mean, r.rstd)
		return r
	}
	for _, sh := range [][2]int{{1, 8}, {3, 16}, {7, 24}, {64, 768}, {5, 1024}} {
		rows, cols := sh[0], sh[1]
		// A large mean against a small spread, as residual streams have:
		// the statistics' cancellation is where float64 sums matter.
		x := to32(randVec(rng, rows*cols, 30, 0.5))
		g, b := to32(randVec(rng, cols, 1, 0.2)), to32(randVec(rng, cols, 0, 0.2))
		dy := to32(randVec(rng, rows*cols, 0, 1))
		got, want := run(true, x, g, b, dy, rows, cols), run(false, x, g, b, dy, rows, cols)
		for _, c := range []struct {
			name      string
			got, want []float32
		}{{"y", got.y, want.y}, {"mean", got.mean, want.mean}, {"rstd", got.rstd, want.rstd},
			{"dx", got.dx, want.dx}, {"dgamma", got.dg, want.dg}, {"dbeta", got.db, want.db}, {"dx alone", got.dxOnly, want.dxOnly}} {
			w := make([]float64, len(c.want))
			for i, v := range c.want {
				w[i] = float64(v)
			}
			e := relErr32(c.got, w)
			if e > tol || math.IsNaN(e) {
				t.Errorf("[%d×%d] %s: AVX2 and Go differ by %.3g relative to the largest value", rows, cols, c.name, e)
			}
			t.Logf("[%d×%d] %s: %.3g", rows, cols, c.name, e)
		}
	}
}

func TestSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 1))
	for _, sh := range rowShapes {
		for _, causal := range []bool{false, true} {
			rows, cols := sh[0], sh[1]
			const scale = 0.7
			x := randVec(rng, rows*cols, 0, 4)
			dy := randVec(rng, rows*cols, 0, 1)
			y := make([]float64, rows*cols)
			dx := make([]float64, rows*cols)
			for r := range rows {
				n := cols
				if causal {
					n = r%cols + 1
				}
				var s float64
				for j := range n {
					s += math.Exp(scale * x[r*cols+j])
				}
				for j := range n {
					y[r*cols+j] = math.Exp(scale*x[r*cols+j]) / s
				}
				for j := range cols { // dx_j = scale·Σ_i dy_i·y_i·(δ_ij − y_j)
					var d float64
					for i := range cols {
						k := 0.0
						if i == j {
							k = 1
						}
						d += dy[r*cols+i] * y[r*cols+i] * (k - y[r*cols+j])
					}
					dx[r*cols+j] = scale * d
				}
			}
			y32 := to32(x)
			Softmax(y32, y32, rows, cols, scale, causal) // in place
			checkClose(t, "Softmax y", y32, y)
			dx32 := to32(dy)
			SoftmaxBackward(dx32, dx32, y32, rows, cols, scale)
			checkClose(t, "Softmax dx", dx32, dx)

			// Log-softmax (no mask): dx = dy − softmax·Σdy.
			if causal {
				continue
			}
			ly := make([]float32, rows*cols)
			LogSoftmax(ly, to32(x), rows, cols)
			want := make([]float64, rows*cols)
			wantDx := make([]float64, rows*cols)
			for r := range rows {
				var s, sdy float64
				for j := range cols {
					s += math.Exp(x[r*cols+j])
					sdy += dy[r*cols+j]
				}
				for j := range cols {
					want[r*cols+j] = x[r*cols+j] - math.Log(s)
					wantDx[r*cols+j] = dy[r*cols+j] - math.Exp(x[r*cols+j])/s*sdy
				}
			}
			checkClose(t, "LogSoftmax y", ly, want)
			ldx := make([]float32, rows*cols)
			LogSoftmaxBackward(ldx, to32(dy), ly, rows, cols)
			checkClose(t, "LogSoftmax dx", ldx, wantDx)
		}
	}
}

func TestActivations(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	n := 40001 // above rowGrain: the parallel path
	x := randVec(rng, n, 0, 3)
	dy := randVec(rng, n, 0, 1)
	cases := []struct {
		name     string
		fwd      func(y, x []float32)
		bwd      func(dx, dy, x []float32)
		f        func(float64) float64
		h        float64 // step of the central difference for the derivative
		derivTol float64
	}{
		{"QuickGELU", QuickGELU[float32], QuickGELUBackward[float32],
			func(v float64) float64 { return v / (1 + math.Exp(-1.702*v)) }, 1e-4, 1e-5},
		{"GELU", GELU[float32], GELUBackward[float32],
			func(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }, 1e-4, 1e-5},
	}
	for _, c := range cases {
		y, dx := make([]float64, n), make([]float64, n)
		for i, v := range x {
			y[i] = c.f(v)
			// Central difference of the float64 definition: error O(h²) ≈ 1e-8.
			dx[i] = dy[i] * (c.f(v+c.h) - c.f(v-c.h)) / (2 * c.h)
		}
		x32 := to32(x)
		y32 := make([]float32, n)
		c.fwd(y32, x32)
		checkClose(t, c.name+" y", y32, y)
		dx32 := to32(dy)
		c.bwd(dx32, dx32, x32)
		checkClose(t, c.name+" dx", dx32, dx)
		if c.name == "QuickGELU" {
			// The fused form: same y bit for bit, and the slope dy/dx, here
			// written over its input as the transformer block does.
			y2, slope := make([]float32, n), to32(x)
			QuickGELUSlope(y2, slope, slope)
			for i := range y2 {
				if y2[i] != y32[i] {
					t.Fatalf("QuickGELUSlope y[%d] = %g, QuickGELU gives %g", i, y2[i], y32[i])
				}
			}
			want := make([]float64, n)
			for i, v := range x {
				want[i] = (c.f(v+c.h) - c.f(v-c.h)) / (2 * c.h)
			}
			checkClose(t, "QuickGELUSlope slope", slope, want)
			slope64 := make([]float64, n)
			QuickGELUSlope(make([]float64, n), slope64, x)
			checkClose(t, "QuickGELUSlope float64 slope", to32(slope64), want)
		}
		if c.name == "GELU" {
			// The slope alone, written over its input.
			want := make([]float64, n)
			for i, v := range x {
				want[i] = (c.f(v+c.h) - c.f(v-c.h)) / (2 * c.h)
			}
			slope := to32(x)
			GELUSlope(slope, slope)
			checkClose(t, "GELUSlope", slope, want)
		}
	}
}

func TestElementwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 1))
	for _, sh := range rowShapes {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		a, b := randVec(rng, n, 0, 1), randVec(rng, n, 0, 1)
		v := randVec(rng, cols, 0, 1)
		sum, axpy, scaled, bias := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		colSum := make([]float64, cols)
		for i := range n {
			sum[i] = a[i] + b[i]
			axpy[i] = b[i] - 0.5*a[i]
			scaled[i] = 3 * a[i]
			bias[i] = a[i] + v[i%cols]
			colSum[i%cols] += a[i]
		}
		for j := range cols {
			colSum[j] += 2 // SumRows accumulates
		}
		y := make([]float32, n)
		Add(y, to32(a), to32(b))
		checkClose(t, "Add", y, sum)
		y = to32(b)
		Axpy(y, -0.5, to32(a))
		checkClose(t, "Axpy", y, axpy)
		prod := make([]float64, n)
		for i := range n {
			prod[i] = a[i] * b[i]
		}
		y = to32(a)
		Mul(y, y, to32(b))
		checkClose(t, "Mul", y, prod)
		y = to32(a)
		Scale(y, 3, y)
		checkClose(t, "Scale", y, scaled)
		y = to32(a)
		AddRowVector(y, rows, cols, to32(v))
		checkClose(t, "AddRowVector", y, bias)
		cs := make([]float32, cols)
		for j := range cs {
			cs[j] = 2
		}
		SumRows(cs, to32(a), rows, cols)
		checkClose(t, "SumRows", cs, colSum)
	}
}

func TestExpInPlace32(t *testing.T) {
	// Sweep [−87.3, 88] densely; the bound 3e-7 is 2.5 float32 ulps.
	const n = 1 << 20
	x := make([]float32, n)
	for i := range x {
		x[i] = -87.3 + float32(i)*(88+87.3)/n
	}
	y := append([]float32(nil), x...)
	expInPlace32(y)
	var worst float64
	for i, v := range x {
		want := math.Exp(float64(v))
		worst = max(worst, math.Abs(float64(y[i])-want)/want)
	}
	t.Logf("expInPlace32: worst relative error %.3g", worst)
	if worst > 3e-7 {
		t.Errorf("expInPlace32: relative error %.3g", worst)
	}
	// The vector path must give the Go loop's bits, at every length (so also
	// in the scalar tail after the last full vector).
	scalar := append([]float32(nil), x...)
	expInPlace32Go(scalar)
	for i := range y {
		if math.Float32bits(y[i]) != math.Float32bits(scalar[i]) {
			t.Fatalf("expInPlace32(%g) = %g, the Go loop gives %g", x[i], y[i], scalar[i])
		}
	}
	for _, in := range [][]float32{
		{0, -200, 200, float32(math.Inf(-1)), float32(math.Inf(1))},
		{0, -200, 200, float32(math.Inf(-1)), float32(math.Inf(1)), 0, -200, 200, float32(math.Inf(-1)), float32(math.Inf(1))},
	} {
		edge := append([]float32(nil), in...)
		expInPlace32(edge)
		for i, v := range edge {
			ok := v == 1
			switch x := in[i]; {
			case x < 0:
				ok = v >= 0 && v <= 2e-38
			case x > 0:
				ok = !math.IsInf(float64(v), 0) && v >= 1e38
			}
			if !ok {
				t.Errorf("expInPlace32(%g) = %g (length %d)", in[i], v, len(in))
			}
		}
	}
}

// TestQuickGELUVector checks that the AVX2 QuickGELU kernels give the Go
// loops' bits at every length (vector prefix plus scalar tail), in place
// and not, over values from the saturated ends to zero.
func TestQuickGELUVector(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2: the Go loops are the only path")
	}
	rng := rand.New(rand.NewPCG(5, 9))
	x := make([]float32, 1037)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 6)
	}
	copy(x, []float32{0, -0, 1e-30, -1e-30, 60, -60, 200, -200, float32(math.Inf(1))})
	dy := to32(randVec(rng, len(x), 0, 1))
	same := func(name string, n int, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s, length %d: value %d (x = %g) is %g, the Go loop gives %g", name, n, i, x[i], got[i], want[i])
			}
		}
	}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 64, 1037} {
		xs, dys := x[:n], dy[:n]
		y, want := make([]float32, n), make([]float32, n)
		quickGELU32(y, xs)
		quickGELU32Go(want, xs)
		same("quickGELU32", n, y, want)

		slope, wantSlope := make([]float32, n), make([]float32, n)
		quickGELUSlope32(y, slope, xs)
		quickGELUSlope32Go(want, wantSlope, xs)
		same("quickGELUSlope32 y", n, y, want)
		same("quickGELUSlope32 slope", n, slope, wantSlope)
		inPlace := append([]float32(nil), xs...)
		quickGELUSlope32(y, inPlace, inPlace) // slope may alias x
		same("quickGELUSlope32 slope in place", n, inPlace, wantSlope)

		dx := append([]float32(nil), dys...)
		quickGELUBackward32(dx, dx, xs) // dx may alias dy
		quickGELUBackward32Go(want, dys, xs)
		same("quickGELUBackward32", n, dx, want)
	}
}

// TestSoftmaxVector compares the AVX2 softmax row with the Go loop it
// replaces. They differ only in the order of the float64 sum, so they agree
// within one rounding of the float32 result (bound 2.4e-7 = 2 ulps).
func TestSoftmaxVector(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2: the Go loop is the only path")
	}
	rng := rand.New(rand.NewPCG(7, 3))
	run := func(vector bool, x []float32, rows, cols int, causal bool) []float32 {
		saved := haveAVX2
		haveAVX2 = vector
		defer func() { haveAVX2 = saved }()
		y := make([]float32, len(x))
		Softmax(y, x, rows, cols, 0.9, causal)
		return y
	}
	for _, sh := range [][2]int{{1, 1}, {1, 7}, {1, 8}, {1, 9}, {3, 50}, {50, 50}, {2, 1000}, {4, 1003}} {
		for _, causal := range []bool{false, true} {
			rows, cols := sh[0], sh[1]
			x := to32(randVec(rng, rows*cols, 0, 5))
			x[0] = 3e4 // a large logit: the maximum is subtracted first
			got, want := run(true, x, rows, cols, causal), run(false, x, rows, cols, causal)
			var worst float64
			for i := range want {
				d := math.Abs(float64(got[i]) - float64(want[i]))
				if want[i] == 0 && got[i] != 0 {
					t.Fatalf("[%d×%d causal=%v] value %d: %g where the Go loop gives 0", rows, cols, causal, i, got[i])
				}
				if want[i] != 0 {
					worst = max(worst, d/float64(want[i]))
				}
			}
			if worst > 2.4e-7 {
				t.Errorf("[%d×%d causal=%v] vector and Go softmax differ by %.3g relative", rows, cols, causal, worst)
			}
		}
	}
}

// TestSumsIndependentOfThreads: the column sums of LayerNormBackward (dγ,
// dβ) and SumRows, and LayerNormBackward's dx, have the same bits with 1 to
// 5 threads, in float32 and float64, on matrices large enough to be split.
func TestSumsIndependentOfThreads(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct{ rows, cols int }{{1040, 128}, {3200, 96}, {777, 101}, {5, 7}} {
		t.Run(fmt.Sprintf("%dx%d", c.rows, c.cols), func(t *testing.T) {
			checkSumsIndependentOfThreads[float32](t, c.rows, c.cols)
			checkSumsIndependentOfThreads[float64](t, c.rows, c.cols)
		})
	}
}

func checkSumsIndependentOfThreads[T Float](t *testing.T, rows, cols int) {
	rng := rand.New(rand.NewPCG(uint64(rows), uint64(cols)))
	vec := func(n int) []T {
		v := make([]T, n)
		for i := range v {
			v[i] = T(rng.NormFloat64())
		}
		return v
	}
	x, dy, g, b := vec(rows*cols), vec(rows*cols), vec(cols), vec(cols)
	dg0, db0, sum0 := vec(cols), vec(cols), vec(cols) // accumulated into
	mean, rstd := make([]T, rows), make([]T, rows)
	LayerNorm(make([]T, rows*cols), x, rows, cols, g, b, 1e-5, mean, rstd)
	run := func(threads int) []T {
		runtime.GOMAXPROCS(threads)
		dx, dg, db, sum := make([]T, rows*cols), slices.Clone(dg0), slices.Clone(db0), slices.Clone(sum0)
		LayerNormBackward(dx, dg, db, dy, x, rows, cols, g, mean, rstd)
		SumRows(sum, dy, rows, cols)
		return slices.Concat(dx, dg, db, sum)
	}
	want := run(1)
	for threads := 2; threads <= 5; threads++ {
		for i, v := range run(threads) {
			if v != want[i] {
				t.Fatalf("%T, %d threads: value %d is %v, with one thread %v", v, threads, i, v, want[i])
			}
		}
	}
}

// TestAddBits: Add's vector loop (addAVX2 where the CPU has AVX2) gives
// the bits of the Go sum, at lengths around its steps of 32 and 8 and
// offsets that misalign the slices, with y apart, y = a and y = b.
func TestAddBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 40, 63, 64, 65, 100, 1000, 4099} {
		for _, off := range []int{0, 1, 3} {
			a, b := to32(randVec(rng, n+off, 0, 1e3)), to32(randVec(rng, n+off, 0, 1e-3))
			a, b = a[off:], b[off:]
			want := make([]float32, n)
			for i := range want {
				want[i] = a[i] + b[i]
			}
			for _, alias := range []string{"apart", "y = a", "y = b"} {
				var y []float32
				switch alias {
				case "apart":
					y = make([]float32, n)
					Add(y, a, b)
				case "y = a":
					y = slices.Clone(a)
					Add(y, y, b)
				case "y = b":
					y = slices.Clone(b)
					Add(y, a, y)
				}
				for i := range want {
					if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n %d, offset %d, %s: y[%d] = %v, want %v", n, off, alias, i, y[i], want[i])
					}
				}
			}
		}
	}
}

// BenchmarkAdd: a residual of ViT-B/32's blocks at batch 64 (3,200 rows of
// 768), in GB/s of the three slices' traffic: the same slices each time
// (cached), and eight sets in turn (from memory: 240 MB, more than the
// caches).
func BenchmarkAdd(b *testing.B) {
	const n = 3200 * 768
	rng := rand.New(rand.NewPCG(4, 3))
	for _, sets := range []int{1, 8} {
		name := "cached"
		if sets > 1 {
			name = "from-memory"
		}
		b.Run(name, func(b *testing.B) {
			xs, ys, outs := make([][]float32, sets), make([][]float32, sets), make([][]float32, sets)
			for i := range sets {
				xs[i], ys[i], outs[i] = to32(randVec(rng, n, 0, 1)), to32(randVec(rng, n, 0, 1)), make([]float32, n)
			}
			b.SetBytes(3 * 4 * n)
			i := 0
			for b.Loop() {
				Add(outs[i%sets], xs[i%sets], ys[i%sets])
				i++
			}
		})
	}
}
