package kernel

import (
	"math"
)

// Float is the element type of the row-wise kernels. Model code runs them in
// float32; gradient checks run the very same code in float64.
type Float interface{ ~float32 | ~float64 }

// rowGrain is the number of elements below which a row-wise kernel runs on
// the calling goroutine: smaller inputs do not repay starting goroutines.
const rowGrain = 1 << 14

// forRows splits rows 0…rows−1 into at most Threads() contiguous ranges and
// runs fn on each in parallel when the matrix (rows×cols) is large enough.
// fn receives the index of its chunk (0 … rowChunks(rows, cols)−1) and the
// range, so that callers can keep per-chunk partial sums.
func forRows(rows, cols int, fn func(chunk, lo, hi int)) {
	splitRange(rows, 1, rowChunks(rows, cols), fn)
}

// rowChunks is the number of chunks forRows uses for a rows×cols matrix.
func rowChunks(rows, cols int) int {
	if rows*cols < rowGrain {
		return 1
	}
	return max(1, min(Threads(), rows, rows*cols/rowGrain))
}

func checkLen[T Float](name string, s []T, n int) {
	if len(s) < n {
		panic("kernel: " + name + ": slice shorter than rows×cols")
	}
}

// LayerNorm normalises each row of x (rows×cols) to zero mean and unit
// variance (biased, as PyTorch), then applies gamma and beta (length cols):
// y = (x−mean)·rstd·gamma + beta with rstd = 1/sqrt(var+eps). The per-row
// mean and rstd are written to mean and rstd (length rows) for the backward
// pass. y may alias x. Row statistics are accumulated in float64. On AVX2
// CPUs a float32 row whose length is a multiple of 8 runs in assembly
// (layerNormRowAVX2): the same operations, with the sums in another order,
// so mean and rstd can differ from the Go loop's in their last bit.
func LayerNorm[T Float](y, x []T, rows, cols int, gamma, beta []T, eps float64, mean, rstd []T) {
	checkLen("LayerNorm", x, rows*cols)
	checkLen("LayerNorm", y, rows*cols)
	y32, is32 := any(y).([]float32)
	x32, _ := any(x).([]float32)
	g32, _ := any(gamma).([]float32)
	b32, _ := any(beta).([]float32)
	mean32, _ := any(mean).([]float32)
	rstd32, _ := any(rstd).([]float32)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			if is32 && layerNormRow32(y32[r*cols:r*cols+cols], x32[r*cols:r*cols+cols], g32[:cols], b32[:cols], eps, &mean32[r], &rstd32[r]) {
				continue
			}
			xr := x[r*cols : r*cols+cols]
			yr := y[r*cols : r*cols+cols]
			mu := sum64(xr) / float64(cols)
			rs := 1 / math.Sqrt(sumSqDev64(xr, mu)/float64(cols)+eps)
			m, q := T(mu), T(rs)
			mean[r], rstd[r] = m, q
			g, b := gamma[:cols], beta[:cols]
			for j, v := range xr {
				yr[j] = (v-m)*q*g[j] + b[j]
			}
		}
	})
}

// sum64 returns Σx in float64, in four interleaved partial sums: one chain
// of additions would wait out the adder's latency at every element, and
// LayerNorm's statistics took twice as long.
func sum64[T Float](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		q := x[i : i+4 : i+4]
		s0 += float64(q[0])
		s1 += float64(q[1])
		s2 += float64(q[2])
		s3 += float64(q[3])
	}
	for _, v := range x[i:] {
		s0 += float64(v)
	}
	return (s0 + s1) + (s2 + s3)
}

// sumSqDev64 returns Σ(x−mu)² in float64, as sum64 does.
func sumSqDev64[T Float](x []T, mu float64) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		q := x[i : i+4 : i+4]
		d0, d1, d2, d3 := float64(q[0])-mu, float64(q[1])-mu, float64(q[2])-mu, float64(q[3])-mu
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for _, v := range x[i:] {
		d := float64(v) - mu
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// LayerNormBackward computes the gradients of LayerNorm given dy, the input x
// and the saved mean and rstd. dx (rows×cols) is overwritten when non-nil;
// dgamma and dbeta (length cols) are accumulated into when non-nil.
// With x̂ = (x−mean)·rstd and g = dy·gamma:
// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), dgamma += Σ_rows dy·x̂, dbeta += Σ_rows dy.
// On AVX2 CPUs a float32 row whose length is a multiple of 8 runs in
// assembly when dx is wanted (layerNormBackwardRowAVX2, or
// layerNormInputGradRowAVX2 without parameter gradients): the parameter
// gradients get the Go loop's bits, dx can differ in its last bit (the two
// means are summed in another order).
//
// The result does not depend on the number of threads. dγ and dβ are
// summed over a fixed partition of the rows (sumRanges), row by row
// within a range and the ranges in order, one goroutine per range; without
// them, the rows are split over every thread.
func LayerNormBackward[T Float](dx, dgamma, dbeta, dy, x []T, rows, cols int, gamma, mean, rstd []T) {
	checkLen("LayerNormBackward", x, rows*cols)
	checkLen("LayerNormBackward", dy, rows*cols)
	chunks := rowChunks(rows, cols)
	var partial []T
	if dgamma != nil || dbeta != nil {
		chunks = sumRanges(rows, cols)
		partial = make([]T, 2*chunks*cols)
	}
	dx32, is32 := any(dx).([]float32)
	dy32, _ := any(dy).([]float32)
	x32, _ := any(x).([]float32)
	g32, _ := any(gamma).([]float32)
	splitRange(rows, 1, chunks, func(c, lo, hi int) {
		var pg, pb []T
		if partial != nil {
			pg = partial[2*c*cols : 2*c*cols+cols]
			pb = partial[2*c*cols+cols : 2*c*cols+2*cols]
		}
		pg32, _ := any(pg).([]float32)
		pb32, _ := any(pb).([]float32)
		g := gamma[:cols]
		for r := lo; r < hi; r++ {
			xr := x[r*cols : r*cols+cols]
			dyr := dy[r*cols : r*cols+cols]
			m, q := mean[r], rstd[r]
			if is32 && dx != nil && layerNormBackwardRow32(dx32[r*cols:r*cols+cols], pg32, pb32,
				dy32[r*cols:r*cols+cols], x32[r*cols:r*cols+cols], g32[:cols], float32(m), float32(q)) {
				continue
			}
			if pg != nil && dx != nil {
				layerNormBackwardRow(dx[r*cols:r*cols+cols], pg, pb, dyr, xr, g, m, q)
				continue
			}
			if pg != nil {
				for j, v := range xr {
					pg[j] += dyr[j] * ((v - m) * q) // as layerNormBackwardRow
					pb[j] += dyr[j]
				}
			}
			if dx == nil {
				continue
			}
			// Two interleaved partial sums each, as in sum64.
			var sg0, sg1, sgx0, sgx1 float64
			j := 0
			for ; j+2 <= cols; j += 2 {
				xv, dv, gv := xr[j:j+2:j+2], dyr[j:j+2:j+2], g[j:j+2:j+2]
				g0, g1 := float64(dv[0]*gv[0]), float64(dv[1]*gv[1])
				sg0 += g0
				sg1 += g1
				sgx0 += g0 * float64((xv[0]-m)*q)
				sgx1 += g1 * float64((xv[1]-m)*q)
			}
			for ; j < cols; j++ {
				gj := float64(dyr[j] * g[j])
				sg0 += gj
				sgx0 += gj * float64((xr[j]-m)*q)
			}
			mg, mgx := T((sg0+sg1)/float64(cols)), T((sgx0+sgx1)/float64(cols))
			dxr := dx[r*cols : r*cols+cols]
			for j, v := range xr {
				dxr[j] = q * (dyr[j]*g[j] - mg - (v-m)*q*mgx)
			}
		}
	})
	for c := 0; partial != nil && c < chunks; c++ {
		pg := partial[2*c*cols : 2*c*cols+cols]
		pb := partial[2*c*cols+cols : 2*c*cols+2*cols]
		if dgamma != nil {
			for j, v := range pg {
				dgamma[j] += v
			}
		}
		if dbeta != nil {
			for j, v := range pb {
				dbeta[j] += v
			}
		}
	}
}

// sumRanges is the number of row ranges over which the column sums of a
// rows×cols matrix are taken (LayerNormBackward's dγ and dβ, SumRows): the
// two halves of a matrix of at least 2·rowGrain values, else one; each
// range is summed row by row and the ranges added in order. It is fixed
// rather than the number of threads, so that the sums are the same on
// every machine; two is what two threads used, so results computed that
// way keep their bits. Parameter gradients are a small part of a backward
// pass: two goroutines suffice.
func sumRanges(rows, cols int) int {
	if rows*cols < rowGrain {
		return 1
	}
	return max(1, min(2, rows, rows*cols/rowGrain))
}

// layerNormBackwardRow is one row of LayerNormBackward with every gradient
// wanted: the parameter gradients' partial sums and the two means dx needs
// come from one pass over x and dy.
func layerNormBackwardRow[T Float](dxr, pg, pb, dyr, xr, g []T, m, q T) {
	n := len(xr)
	dyr, g, pg, pb, dxr = dyr[:n], g[:n], pg[:n], pb[:n], dxr[:n]
	var sg0, sg1, sgx0, sgx1 float64
	j := 0
	for ; j+2 <= n; j += 2 {
		h0, h1 := (xr[j]-m)*q, (xr[j+1]-m)*q
		d0, d1 := dyr[j], dyr[j+1]
		pg[j] += d0 * h0
		pg[j+1] += d1 * h1
		pb[j] += d0
		pb[j+1] += d1
		g0, g1 := float64(d0*g[j]), float64(d1*g[j+1])
		sg0 += g0
		sg1 += g1
		sgx0 += g0 * float64(h0)
		sgx1 += g1 * float64(h1)
	}
	for ; j < n; j++ {
		h, d := (xr[j]-m)*q, dyr[j]
		pg[j] += d * h
		pb[j] += d
		gj := float64(d * g[j])
		sg0 += gj
		sgx0 += gj * float64(h)
	}
	mg, mgx := T((sg0+sg1)/float64(n)), T((sgx0+sgx1)/float64(n))
	for j, v := range xr {
		dxr[j] = q * (dyr[j]*g[j] - mg - (v-m)*q*mgx)
	}
}

// Softmax computes y = softmax(scale·x) over each row of x (rows×cols),
// subtracting the row maximum first. With causal set, row r sees only
// columns 0…(r mod cols): the matrix is read as a stack of square
// cols×cols blocks (one per attention head), and masked entries of y are 0.
// y may alias x. On AVX2 CPUs a float32 row runs in assembly
// (softmaxRowAVX2): the same exponentials, summed in float64 in another
// order than the Go loop, so the two agree within one float32 rounding.
func Softmax[T Float](y, x []T, rows, cols int, scale T, causal bool) {
	checkLen("Softmax", x, rows*cols)
	checkLen("Softmax", y, rows*cols)
	y32, is32 := any(y).([]float32)
	x32, _ := any(x).([]float32)
	scale32, _ := any(scale).(float32)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			n := cols
			if causal {
				n = r%cols + 1
			}
			xr := x[r*cols : r*cols+n]
			yr := y[r*cols : r*cols+cols]
			if is32 && softmaxRow32(y32[r*cols:r*cols+n], x32[r*cols:r*cols+n], scale32) {
				clear(yr[n:])
				continue
			}
			mx := xr[0] * scale
			for _, v := range xr {
				mx = max(mx, v*scale)
			}
			var s float64
			if is32 {
				for j, v := range xr {
					yr[j] = v*scale - mx
				}
				expInPlace32(y32[r*cols : r*cols+n])
				for _, e := range yr[:n] {
					s += float64(e)
				}
			} else {
				for j, v := range xr {
					e := T(math.Exp(float64(v*scale - mx)))
					yr[j] = e
					s += float64(e)
				}
			}
			inv := T(1 / s)
			for j := range n {
				yr[j] *= inv
			}
			clear(yr[n:])
		}
	})
}

// SoftmaxBackward computes dx = scale·y⊙(dy − Σ_j y·dy) for each row, the
// gradient of y = softmax(scale·x) (with or without the causal mask: masked
// entries have y = 0 and get dx = 0). dx may alias dy.
func SoftmaxBackward[T Float](dx, dy, y []T, rows, cols int, scale T) {
	checkLen("SoftmaxBackward", y, rows*cols)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			yr := y[r*cols : r*cols+cols]
			dyr := dy[r*cols : r*cols+cols]
			var s float64
			for j, v := range yr {
				s += float64(v * dyr[j])
			}
			dot := T(s)
			dxr := dx[r*cols : r*cols+cols]
			for j, v := range yr {
				dxr[j] = scale * v * (dyr[j] - dot)
			}
		}
	})
}

// LogSoftmax computes y = x − log Σ exp(x) over each row. y may alias x.
func LogSoftmax[T Float](y, x []T, rows, cols int) {
	checkLen("LogSoftmax", x, rows*cols)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := x[r*cols : r*cols+cols]
			mx := xr[0]
			for _, v := range xr {
				mx = max(mx, v)
			}
			var s float64
			for _, v := range xr {
				s += math.Exp(float64(v - mx))
			}
			lse := mx + T(math.Log(s))
			yr := y[r*cols : r*cols+cols]
			for j, v := range xr {
				yr[j] = v - lse
			}
		}
	})
}

// LogSoftmaxBackward computes dx = dy − exp(y)·Σ_j dy for each row, where y
// is the output of LogSoftmax. dx may alias dy.
func LogSoftmaxBackward[T Float](dx, dy, y []T, rows, cols int) {
	checkLen("LogSoftmaxBackward", y, rows*cols)
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			dyr := dy[r*cols : r*cols+cols]
			var s float64
			for _, v := range dyr {
				s += float64(v)
			}
			sum := T(s)
			yr := y[r*cols : r*cols+cols]
			dxr := dx[r*cols : r*cols+cols]
			for j, v := range yr {
				dxr[j] = dyr[j] - T(math.Exp(float64(v)))*sum
			}
		}
	})
}

// quickGELUAlpha is the sigmoid slope of CLIP's QuickGELU.
const quickGELUAlpha = 1.702

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// QuickGELU computes y = x·σ(1.702·x) elementwise (CLIP's activation).
// y may alias x.
func QuickGELU[T Float](y, x []T) {
	if x32, ok := any(x).([]float32); ok {
		y32 := any(y).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { quickGELU32(y32[lo:hi], x32[lo:hi]) })
		return
	}
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			y[lo+i] = v * T(sigmoid(quickGELUAlpha*float64(v)))
		}
	})
}

// QuickGELUBackward computes dx = dy·(s + 1.702·x·s·(1−s)) with
// s = σ(1.702·x). dx may alias dy.
func QuickGELUBackward[T Float](dx, dy, x []T) {
	if x32, ok := any(x).([]float32); ok {
		dx32, dy32 := any(dx).([]float32), any(dy).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { quickGELUBackward32(dx32[lo:hi], dy32[lo:hi], x32[lo:hi]) })
		return
	}
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			s := sigmoid(quickGELUAlpha * float64(v))
			dx[lo+i] = dy[lo+i] * T(s+quickGELUAlpha*float64(v)*s*(1-s))
		}
	})
}

// GELU computes the exact GELU y = x·Φ(x) = x·(1+erf(x/√2))/2 elementwise.
// y may alias x.
func GELU[T Float](y, x []T) {
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			f := float64(v)
			y[lo+i] = T(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
		}
	})
}

// GELUBackward computes dx = dy·(Φ(x) + x·φ(x)), φ the standard normal
// density. dx may alias dy.
func GELUBackward[T Float](dx, dy, x []T) {
	const invSqrt2Pi = 0.3989422804014327
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			f := float64(v)
			d := 0.5*(1+math.Erf(f/math.Sqrt2)) + f*invSqrt2Pi*math.Exp(-0.5*f*f)
			dx[lo+i] = dy[lo+i] * T(d)
		}
	})
}

// GELUSlope computes slope = Φ(x) + x·φ(x), the derivative of GELU, which
// a forward pass keeps for backward. slope may alias x.
func GELUSlope[T Float](slope, x []T) {
	slope = slope[:len(x)]
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			f := float64(v)
			slope[lo+i] = T(0.5*(1+math.Erf(f/math.Sqrt2)) + f*math.Exp(-0.5*f*f)/math.Sqrt(2*math.Pi))
		}
	})
}

// Mul computes y = a·b elementwise. y may alias a or b.
func Mul[T Float](y, a, b []T) {
	b, y = b[:len(a)], y[:len(a)]
	forRows(len(a), 1, func(_, lo, hi int) {
		for i, v := range a[lo:hi] {
			y[lo+i] = v * b[lo+i]
		}
	})
}

// Add computes y = a + b elementwise. y may alias a or b.
func Add[T Float](y, a, b []T) {
	b, y = b[:len(a)], y[:len(a)]
	forRows(len(a), 1, func(_, lo, hi int) {
		for i, v := range a[lo:hi] {
			y[lo+i] = v + b[lo+i]
		}
	})
}

// Axpy computes y += alpha·x elementwise.
func Axpy[T Float](y []T, alpha T, x []T) {
	y = y[:len(x)]
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			y[lo+i] += alpha * v
		}
	})
}

// Scale computes y = alpha·x elementwise. y may alias x.
func Scale[T Float](y []T, alpha T, x []T) {
	y = y[:len(x)]
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			y[lo+i] = alpha * v
		}
	})
}

// AddRowVector adds v (length cols) to every row of y (rows×cols): a bias.
func AddRowVector[T Float](y []T, rows, cols int, v []T) {
	checkLen("AddRowVector", y, rows*cols)
	v = v[:cols]
	forRows(rows, cols, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			yr := y[r*cols : r*cols+cols]
			for j, b := range v {
				yr[j] += b
			}
		}
	})
}

// SumRows accumulates the column sums of x (rows×cols) into dst (length
// cols): dst[j] += Σ_r x[r,j]. It is the gradient of a bias. The sums do
// not depend on the number of threads (sumRanges).
func SumRows[T Float](dst, x []T, rows, cols int) {
	checkLen("SumRows", x, rows*cols)
	chunks := sumRanges(rows, cols)
	partial := dst[:cols]
	if chunks > 1 {
		partial = make([]T, chunks*cols)
	}
	splitRange(rows, 1, chunks, func(c, lo, hi int) {
		p := partial[c*cols : c*cols+cols]
		for r := lo; r < hi; r++ {
			for j, v := range x[r*cols : r*cols+cols] {
				p[j] += v
			}
		}
	})
	if chunks > 1 {
		for c := range chunks {
			for j, v := range partial[c*cols : c*cols+cols] {
				dst[j] += v
			}
		}
	}
}

// expInPlace32 replaces every x by exp(x) in float32, within 2e-7
// relative (under 2 ulp) and about three times faster than math.Exp through
// float64: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split in two so that n·ln2Hi
// is exact), exp(r) by its Taylor series to degree 7 (truncation below 5e-9
// relative) evaluated in Estrin's scheme for a short dependency chain, then
// scaled by 2ⁿ through the exponent bits. Inputs are clamped to
// [−87.33, 88], so tiny results stay normal (1.2e-38) and large ones finite
// (1.65e38); a NaN gives an unspecified value. On AVX2 CPUs eight lanes run
// at once (expAVX2 in rowwise_avx2_amd64.s) with the same operations, hence
// the same bits.
func expInPlace32(x []float32) {
	done := expVector(x)
	expInPlace32Go(x[done:])
}

// expInPlace32Go is expInPlace32 one value at a time.
func expInPlace32Go(x []float32) {
	const (
		log2e = 1.44269504088896341
		ln2Hi = 0.693359375
		ln2Lo = -2.12194440054690583e-4
		// Adding round to a float32 of magnitude below 2²² rounds it to an
		// integer n held in the low mantissa bits: bits(t) = 0x4B400000 + n.
		round = 0x1.8p23
	)
	for i, v := range x {
		if v > 88 {
			v = 88
		}
		if v < -87.33 {
			v = -87.33
		}
		t := float32(v*log2e) + round
		n := t - round
		r := v - n*ln2Hi - n*ln2Lo
		r2 := r * r
		r4 := r2 * r2
		p := (1 + r) + r2*(1.0/2+r*(1.0/6)) + r4*((1.0/24+r*(1.0/120))+r2*(1.0/720+r*(1.0/5040)))
		// (bits(t) − 0x400000 + 127) << 23 drops the exponent of t and
		// leaves n + 127 as the exponent of 2ⁿ.
		x[i] = p * math.Float32frombits((math.Float32bits(t)-0x400000+127)<<23)
	}
}

// expBlock is the number of elements the float32 activations process per
// pass, so that their scratch stays in L1.
const expBlock = 512

// QuickGELUSlope computes y = QuickGELU(x) like QuickGELU and, in the same
// pass, slope = dy/dx = s + 1.702·y·(1−s) with s = σ(1.702·x): what the
// backward pass needs, one exponential per value for both. slope may alias x.
func QuickGELUSlope[T Float](y, slope, x []T) {
	checkLen("QuickGELUSlope", y, len(x))
	checkLen("QuickGELUSlope", slope, len(x))
	if x32, ok := any(x).([]float32); ok {
		y32, s32 := any(y).([]float32), any(slope).([]float32)
		forRows(len(x), 1, func(_, lo, hi int) { quickGELUSlope32(y32[lo:hi], s32[lo:hi], x32[lo:hi]) })
		return
	}
	forRows(len(x), 1, func(_, lo, hi int) {
		for i, v := range x[lo:hi] {
			s := T(sigmoid(quickGELUAlpha * float64(v)))
			yv := v * s
			y[lo+i] = yv
			slope[lo+i] = s + quickGELUAlpha*yv*(1-s)
		}
	})
}

func quickGELUSlope32(y, slope, x []float32) {
	done := quickGELUSlopeVector(y, slope, x)
	quickGELUSlope32Go(y[done:], slope[done:], x[done:])
}

// quickGELUSlope32Go is quickGELUSlope32 one value at a time (after the vector prefix).
func quickGELUSlope32Go(y, slope, x []float32) {
	var e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		ys := y[i0 : i0+len(xs)]
		ss := slope[i0 : i0+len(xs)]
		es := e[:len(xs)]
		for i, v := range xs {
			es[i] = -quickGELUAlpha * v
		}
		expInPlace32(es)
		for i, v := range xs {
			yv := v / (1 + es[i]) // as quickGELU32, so y is the same
			s := 1 / (1 + es[i])
			ys[i] = yv
			ss[i] = s + quickGELUAlpha*yv*(1-s)
		}
	}
}

func quickGELU32(y, x []float32) {
	done := quickGELUVector(y, x)
	quickGELU32Go(y[done:], x[done:])
}

// quickGELU32Go is quickGELU32 one value at a time (after the vector prefix).
func quickGELU32Go(y, x []float32) {
	var e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		ys := y[i0 : i0+len(xs)]
		es := e[:len(xs)]
		for i, v := range xs {
			es[i] = -quickGELUAlpha * v
		}
		expInPlace32(es)
		for i, v := range xs {
			ys[i] = v / (1 + es[i])
		}
	}
}

func quickGELUBackward32(dx, dy, x []float32) {
	done := quickGELUBackwardVector(dx, dy, x)
	quickGELUBackward32Go(dx[done:], dy[done:], x[done:])
}

// quickGELUBackward32Go is quickGELUBackward32 one value at a time (after the vector prefix).
func quickGELUBackward32Go(dx, dy, x []float32) {
	var e [expBlock]float32
	for i0 := 0; i0 < len(x); i0 += expBlock {
		xs := x[i0:min(i0+expBlock, len(x))]
		dys := dy[i0 : i0+len(xs)]
		dxs := dx[i0 : i0+len(xs)]
		es := e[:len(xs)]
		for i, v := range xs {
			es[i] = -quickGELUAlpha * v
		}
		expInPlace32(es)
		for i, v := range xs {
			s := 1 / (1 + es[i])
			dxs[i] = dys[i] * s * (1 + quickGELUAlpha*v*(1-s))
		}
	}
}
