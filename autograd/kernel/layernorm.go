package kernel

import (
	"math"
)

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
				yr[j] = T((v-m)*q*g[j]) + b[j] // T(…) rounds the product: no fused multiply-add (GOAMD64=v3), as the assembly
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
		s0 += float64(d0 * d0) // float64(…) rounds: no fused multiply-add, as in the assembly
		s1 += float64(d1 * d1)
		s2 += float64(d2 * d2)
		s3 += float64(d3 * d3)
	}
	for _, v := range x[i:] {
		d := float64(v) - mu
		s0 += float64(d * d)
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
					pg[j] += T(dyr[j] * ((v - m) * q)) // as layerNormBackwardRow
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
				sgx0 += float64(g0 * float64((xv[0]-m)*q))
				sgx1 += float64(g1 * float64((xv[1]-m)*q))
			}
			for ; j < cols; j++ {
				gj := float64(dyr[j] * g[j])
				sg0 += gj
				sgx0 += float64(gj * float64((xr[j]-m)*q))
			}
			mg, mgx := T((sg0+sg1)/float64(cols)), T((sgx0+sgx1)/float64(cols))
			dxr := dx[r*cols : r*cols+cols]
			for j, v := range xr {
				dxr[j] = q * (T(dyr[j]*g[j]) - mg - T((v-m)*q*mgx))
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
		pg[j] += T(d0 * h0) // T(…) and float64(…) round: no fused multiply-adds
		pg[j+1] += T(d1 * h1)
		pb[j] += d0
		pb[j+1] += d1
		g0, g1 := float64(d0*g[j]), float64(d1*g[j+1])
		sg0 += g0
		sg1 += g1
		sgx0 += float64(g0 * float64(h0))
		sgx1 += float64(g1 * float64(h1))
	}
	for ; j < n; j++ {
		h, d := (xr[j]-m)*q, dyr[j]
		pg[j] += T(d * h)
		pb[j] += d
		gj := float64(d * g[j])
		sg0 += gj
		sgx0 += float64(gj * float64(h))
	}
	mg, mgx := T((sg0+sg1)/float64(n)), T((sgx0+sgx1)/float64(n))
	for j, v := range xr {
		dxr[j] = q * (T(dyr[j]*g[j]) - mg - T((v-m)*q*mgx))
	}
}
