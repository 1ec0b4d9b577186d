package symeig

import "math"

// tridiagonalize reduces the symmetric matrix A whose upper triangle is
// held in a (n×n, row-major; the strict lower triangle is not read, and a
// is overwritten) to tridiagonal form, A = Q·T·Qᵀ, with T's diagonal in d
// (length n) and its off-diagonal in e (length n−1, e[i] couples i and
// i+1). It writes Qᵀ into z (n×n, row-major): row i of z is column i of Q.
//
// The reduction is Householder's, from the last column to the first, as
// LAPACK's dsytd2 does for an upper triangle: step k (k = n−1, …, 1)
// chooses the reflector H_k = I − τ·v·vᵀ (v zero from k on, v[k−1] = 1)
// that maps column k's part above the diagonal onto its last element, and
// replaces the leading matrix B = A[:k, :k] by H_k·B·H_k = B − v·wᵀ − w·vᵀ,
// where p = τ·B·v and w = p − (τ/2)(pᵀv)·v. Then T = Qᵀ·A·Q with Q =
// H_{n−1}⋯H_1. Reducing from the bottom up, rather than from the top down,
// leaves T graded as the QL iteration that follows wants it: with a
// rank-deficient matrix (a batch covariance) the reduction's small
// elements end up at the top of T, the large ones at the bottom, as with
// gonum's (LAPACK's) reduction before; from the top down, the same QL
// iteration gave eigenvectors with 4–6 times larger residuals.
//
// Two choices make it fast on one core:
//
//   - One pass over B per step. B·v needs B's row i both for y[i] (a dot
//     product along the row) and, by symmetry, for y[j] (j > i; an axpy
//     with the row), so each stored element is read once for both. The same
//     pass first applies the previous step's rank-2 update to the element,
//     which the previous step therefore never writes back on its own: the
//     stored triangle is read and written once per step rather than read
//     twice and written once (a product, then an update). Only column k−1,
//     which the next reflector is made from, gets its update ahead of the
//     pass.
//   - Qᵀ's rows are formed a few at a time: row r of Qᵀ is
//     e_rᵀ·H_1⋯H_{n−1}, and applying a reflector to a row (a dot product
//     with v, then an axpy) needs nothing but that row. A block of rows
//     stays in the L1 cache while the reflectors pass over it, and Qᵀ is
//     written in z's layout directly, with no transpose.
//
// The row kernels (symvRows2, reflectRow) have AVX2 and AVX-512 assembly
// forms on amd64 and a Go form, all performing the same fused
// multiply-adds in the same order (their dot products keep eight partial
// sums, which the Go form models lane by lane), so the bits do not depend
// on the CPU, on GOAMD64 or on GODEBUG; every other product or sum here is
// written so that the compiler cannot fuse it either. The total is 8n³/3
// flops for n×n (4n³/3 in the reduction, 4n³/3 for Qᵀ), as with LAPACK's
// dsytrd and dorgtr.
func tridiagonalize(a []float64, n int, d, e, z []float64) {
	if n == 0 {
		return
	}
	clear(z[:n*n])
	// tau[k] is H_k's τ; H_k's v is kept in row k of a left of the
	// diagonal, which the reduction does not otherwise use.
	tau := make([]float64, n)
	// The work vectors are ld apart, not a multiple of 4 KiB: the kernels
	// load from some at the offsets where they store to others.
	ld := n + 16
	work := make([]float64, 5*ld)
	vp, wp := work[:n], work[ld:ld+n] // the pending rank-2 update
	v, y := work[2*ld:2*ld+n], work[3*ld:3*ld+n]
	zero := work[4*ld : 4*ld+n] // stands in for vp, wp or v when there is none
	pending := false

	for k := n - 1; k >= 0; k-- {
		if pending {
			// Column k gets the previous step's update ahead of the pass
			// (element (i, k) as in upd below).
			vk, wk := vp[k], wp[k]
			for i := 0; i <= k; i++ {
				b := math.FMA(-vp[i], wk, a[i*n+k])
				a[i*n+k] = math.FMA(-wp[i], vk, b)
			}
		}
		d[k] = a[k*n+k]
		if k == 0 {
			break
		}
		x := a[k*n : k*n+k] // column k above the diagonal, then v
		for i := range x {
			x[i] = a[i*n+k]
		}
		beta, t := householder(x[k-1], x[:k-1])
		e[k-1], tau[k] = beta, t
		x[k-1] = 1

		if t == 0 && !pending {
			continue
		}
		// The pass over B = A[:k, :k]: apply the pending update, then
		// y = B·v (v = x, or nothing when τ = 0).
		vv := v[:k]
		if t != 0 {
			copy(vv, x)
		} else {
			vv = zero[:k]
		}
		pv, pw := vp[:k], wp[:k]
		if !pending {
			pv, pw = zero[:k], zero[:k]
		}
		yy := y[:k]
		clear(yy)
		// upd is element (r, c) of B after the pending update.
		upd := func(x float64, r, c int) float64 {
			b := math.FMA(-pv[r], pw[c], x)
			return math.FMA(-pw[r], pv[c], b)
		}
		// Rows i and i+1 in pairs: row i's first element right of the
		// diagonal (column i+1) alone, then both rows together from
		// column i+2 on. y[i] is complete (every earlier row has added its
		// share) before row i's own dot product is added.
		for i := 0; i < k; i += 2 {
			ri := a[i*n+i : i*n+k]
			bii := upd(ri[0], i, i)
			ri[0] = bii
			if i+1 == k {
				yy[i] = math.FMA(bii, vv[i], yy[i])
				break
			}
			lead := upd(ri[1], i, i+1)
			ri[1] = lead
			yy[i+1] = math.FMA(lead, vv[i], yy[i+1])
			rj := a[(i+1)*n+i+1 : (i+1)*n+k]
			bjj := upd(rj[0], i+1, i+1)
			rj[0] = bjj
			h0, h1 := symvRows2(ri[2:], rj[1:], pv[i+2:], pw[i+2:], vv[i+2:], yy[i+2:],
				pv[i], pw[i], vv[i], pv[i+1], pw[i+1], vv[i+1])
			yy[i] = math.FMA(bii, vv[i], yy[i]+math.FMA(lead, vv[i+1], h0))
			yy[i+1] = math.FMA(bjj, vv[i+1], yy[i+1]+h1)
		}
		if t == 0 {
			pending = false
			continue
		}
		// p = τ·y; w = p − (τ/2)(pᵀv)·v, the new pending update.
		var pv2 float64
		for i := range k {
			yy[i] = float64(t * yy[i])
			pv2 = math.FMA(yy[i], vv[i], pv2)
		}
		alpha := float64(-0.5*t) * pv2
		for i := range k {
			vp[i] = vv[i]
			wp[i] = math.FMA(alpha, vv[i], yy[i])
		}
		pending = true
	}
	formQT(a, n, tau, z)
}

// householder chooses the reflector H = I − τ·v·vᵀ, v = (1, rest), that
// maps (alpha, x) to (β, 0), as LAPACK's dlarfg does: τ = 0 (H = I) when x
// is zero, else β = −sign(alpha)·‖(alpha, x)‖ and τ = (β − alpha)/β, which
// is in [1, 2], so H is a reflection. It returns β and τ and leaves v's
// rest in x.
func householder(alpha float64, x []float64) (beta, tau float64) {
	xnorm := norm2(x)
	if xnorm == 0 {
		return alpha, 0
	}
	beta = -math.Copysign(hypot(alpha, xnorm), alpha)
	tau = (beta - alpha) / beta
	s := 1 / (alpha - beta)
	for i := range x {
		x[i] *= s
	}
	return beta, tau
}

// hypot is √(p²+q²) without undue overflow or underflow, as math.Hypot,
// but with its operations written out unfused, so that its bits are the
// same on every architecture (math.Hypot is assembly on amd64 and Go,
// which the compiler may fuse, elsewhere).
func hypot(p, q float64) float64 {
	p, q = math.Abs(p), math.Abs(q)
	if p < q {
		p, q = q, p
	}
	if p == 0 {
		return 0
	}
	q /= p
	return p * math.Sqrt(1+float64(q*q))
}

// norm2 is ‖x‖₂. The plain sum of squares is exact enough and fast; it is
// redone on x scaled by its largest magnitude when it overflows or is so
// small that the squares may have lost bits to underflow.
func norm2(x []float64) float64 {
	var ssq float64
	for _, v := range x {
		ssq = math.FMA(v, v, ssq)
	}
	if ssq > 0x1p-900 && ssq <= math.MaxFloat64 {
		return math.Sqrt(ssq)
	}
	var big float64
	for _, v := range x {
		big = math.Max(big, math.Abs(v))
	}
	if big == 0 {
		return 0
	}
	ssq = 0
	for _, v := range x {
		s := v / big
		ssq = math.FMA(s, s, ssq)
	}
	return big * math.Sqrt(ssq)
}

// kernelForm is a form of the row kernels: all give the same bits.
type kernelForm int

const (
	kernelsGo     kernelForm = iota // symvRows2Go, reflectRowGo
	kernelsAVX2                     // AVX2 and FMA assembly, 4-lane registers
	kernelsAVX512                   // AVX-512 assembly, 8-lane registers
)

func (f kernelForm) String() string {
	return [...]string{"Go", "AVX2", "AVX-512"}[f]
}

// qtRows is the number of rows of Qᵀ formed together: 8 rows of 512
// float64 are 32 KiB, which stay in a 48 KiB L1 cache while the
// reflectors pass over them.
const qtRows = 8

// formQT writes Qᵀ = H_1⋯H_{n−1} into z (zeroed, n×n, row-major), H_j's
// v being row j of a up to column j−1 and its τ tau[j]. Row r of Qᵀ is
// e_rᵀ·H_1⋯H_{n−1}; H_j (v zero from j on) leaves e_r alone while j ≤ r, so
// row r starts as e_r and takes H_{r+1}, …, H_{n−1} in turn, each on
// columns 0 to j−1: zᵣ ← zᵣ − τ_j·(zᵣ·v)·vᵀ.
func formQT(a []float64, n int, tau, z []float64) {
	for r0 := 0; r0 < n; r0 += qtRows {
		r1 := min(r0+qtRows, n)
		for r := r0; r < r1; r++ {
			z[r*n+r] = 1
		}
		for j := r0 + 1; j < n; j++ {
			if t := tau[j]; t != 0 {
				reflectRows(z[r0*n:], n, min(r1, j)-r0, j, a[j*n:j*n+j], t)
			}
		}
	}
}

// dotLanes is the dot product of x and y (len(y) ≥ len(x)) in the order
// the assembly kernels compute it: eight partial sums, lane l taking the
// terms i ≡ l (mod 8) of the longest prefix whose length is a multiple of
// 8, lanes 0–3 then the next four terms if there are four more; the lanes
// folded as ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)); then the last terms,
// one by one. Every term is a fused multiply-add.
func dotLanes(x, y []float64) float64 {
	y = y[:len(x)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float64
	i := 0
	for ; i+8 <= len(x); i += 8 {
		xs, ys := x[i:i+8:i+8], y[i:i+8:i+8]
		s0 = math.FMA(xs[0], ys[0], s0)
		s1 = math.FMA(xs[1], ys[1], s1)
		s2 = math.FMA(xs[2], ys[2], s2)
		s3 = math.FMA(xs[3], ys[3], s3)
		s4 = math.FMA(xs[4], ys[4], s4)
		s5 = math.FMA(xs[5], ys[5], s5)
		s6 = math.FMA(xs[6], ys[6], s6)
		s7 = math.FMA(xs[7], ys[7], s7)
	}
	if i+4 <= len(x) {
		xs, ys := x[i:i+4:i+4], y[i:i+4:i+4]
		s0 = math.FMA(xs[0], ys[0], s0)
		s1 = math.FMA(xs[1], ys[1], s1)
		s2 = math.FMA(xs[2], ys[2], s2)
		s3 = math.FMA(xs[3], ys[3], s3)
		i += 4
	}
	h := foldLanes(&[8]float64{s0, s1, s2, s3, s4, s5, s6, s7})
	for ; i < len(x); i++ {
		h = math.FMA(x[i], y[i], h)
	}
	return h
}

// foldLanes sums the eight partial sums as the assembly does.
func foldLanes(s *[8]float64) float64 {
	c0, c1, c2, c3 := s[0]+s[4], s[1]+s[5], s[2]+s[6], s[3]+s[7]
	return (c0 + c2) + (c1 + c3)
}

// symvRows2Go is symvRows2's Go form. a0 and a1 are rows i and i+1 of B
// over the same columns (from i+2 on), with vp, wp, v and y the same
// columns of the pending update's vectors, of the reflector and of B·v,
// and vpi, wpi, vi (vpi1, wpi1, vi1) the values at row i (i+1). Column by
// column, it applies the pending update to row i's element b0,
// b0 ← b0 − vpᵢ·wpⱼ − wpᵢ·vpⱼ, then to row i+1's b1, adds b0·vᵢ then b1·vᵢ₊₁
// to y[j], and returns Σⱼ b0·v[j] and Σⱼ b1·v[j], each in dotLanes' order.
func symvRows2Go(a0, a1, vp, wp, v, y []float64, vpi, wpi, vi, vpi1, wpi1, vi1 float64) (h0, h1 float64) {
	var s0, s1 [8]float64
	n := len(a0)
	a1, vp, wp, v, y = a1[:n], vp[:n], wp[:n], v[:n], y[:n]
	elem := func(j int) (b0, b1 float64) {
		b0 = math.FMA(-vpi, wp[j], a0[j])
		b0 = math.FMA(-wpi, vp[j], b0)
		a0[j] = b0
		b1 = math.FMA(-vpi1, wp[j], a1[j])
		b1 = math.FMA(-wpi1, vp[j], b1)
		a1[j] = b1
		y[j] = math.FMA(b1, vi1, math.FMA(b0, vi, y[j]))
		return b0, b1
	}
	lanes := func(j, count int) {
		for l := range count {
			b0, b1 := elem(j + l)
			s0[l] = math.FMA(b0, v[j+l], s0[l])
			s1[l] = math.FMA(b1, v[j+l], s1[l])
		}
	}
	j := 0
	for ; j+8 <= n; j += 8 {
		lanes(j, 8)
	}
	if j+4 <= n {
		lanes(j, 4)
		j += 4
	}
	h0, h1 = foldLanes(&s0), foldLanes(&s1)
	for ; j < n; j++ {
		b0, b1 := elem(j)
		h0 = math.FMA(b0, v[j], h0)
		h1 = math.FMA(b1, v[j], h1)
	}
	return h0, h1
}

// reflectRowGo is reflectRow's Go form: z ← z − (τ·(z·v))·v, the dot
// product in dotLanes' order.
func reflectRowGo(z, v []float64, tau float64) {
	v = v[:len(z)]
	t := -(tau * dotLanes(z, v))
	for i, x := range v {
		z[i] = math.FMA(t, x, z[i])
	}
}
