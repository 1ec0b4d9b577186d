package rowdot

import (
	"fmt"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/mat"
)

// gonum's Dgemm constants that decide the order of the sums.
const (
	blockSize   = 64 // k is summed in blocks this long ...
	minParBlock = 4  // ... when C has at least this many blockSize² tiles
)

// tile is the block of C that the vector kernel computes at once.
const (
	tileRows = 3
	tileCols = 4
)

// parallelMin is the number of multiply-adds from which the rows of C are
// split over the cores.
const parallelMin = 1 << 20

// Mul returns A·Bᵀ (A m×k, B n×k), bit for bit what gonum's
// mat.Dense.Mul(a, b.T()) computes on amd64.
func Mul(a, b *mat.Dense) (*mat.Dense, error) {
	m, k := a.Dims()
	n, kb := b.Dims()
	if kb != k {
		return nil, fmt.Errorf("rowdot: A is %d×%d, B is %d×%d: the columns differ", m, k, n, kb)
	}
	if m == 0 || n == 0 {
		return &mat.Dense{}, nil
	}
	c := mat.NewDense(m, n, nil)
	ar, br, cr := a.RawMatrix(), b.RawMatrix(), c.RawMatrix()
	block := k
	if blocks(m)*blocks(n) >= minParBlock {
		block = blockSize
	}
	rows := func(i0, i1 int) {
		c, a := cr.Data[i0*cr.Stride:], ar.Data[i0*ar.Stride:]
		m := i1 - i0
		tiled := 0                                       // rows of C done by the kernel
		if useAVX && k%4 == 0 && block%4 == 0 && k > 0 { // every block a multiple of 4
			tiled = m - m%tileRows
		}
		nt := n - n%tileCols
		// One block of k at a time over the whole tile grid, B's columns
		// of the block (1,000 rows of 64 at most: 512 KiB) staying in the
		// core's cache while A's rows pass, rather than all of B read
		// again for each three rows of A.
		for k0 := 0; k0 < k && tiled > 0; k0 += block {
			kl := min(block, k-k0)
			for j := 0; j < nt; j += tileCols {
				bj := br.Data[j*br.Stride+k0:]
				_ = bj[(tileCols-1)*br.Stride+kl-1]
				for i := 0; i < tiled; i += tileRows {
					ai, ci := a[i*ar.Stride+k0:], c[i*cr.Stride+j:]
					_, _ = ai[(tileRows-1)*ar.Stride+kl-1], ci[(tileRows-1)*cr.Stride+tileCols-1]
					dotTileAdd(&ai[0], ar.Stride, &bj[0], br.Stride, kl, &ci[0], cr.Stride)
				}
			}
		}
		if nt < n && tiled > 0 {
			addDots(c[nt:], cr.Stride, a, ar.Stride, br.Data[nt*br.Stride:], br.Stride, tiled, n-nt, k, block)
		}
		if tiled < m {
			addDots(c[tiled*cr.Stride:], cr.Stride, a[tiled*ar.Stride:], ar.Stride, br.Data, br.Stride, m-tiled, n, k, block)
		}
	}
	parts := min(runtime.GOMAXPROCS(0), m*n*k/parallelMin, (m+tileRows-1)/tileRows)
	if parts <= 1 {
		rows(0, m)
		return c, nil
	}
	var wg sync.WaitGroup
	// Whole tiles per part, so that only the last rows are left to Go.
	tiles := (m + tileRows - 1) / tileRows
	for p := range parts {
		i0, i1 := p*tiles/parts*tileRows, min((p+1)*tiles/parts*tileRows, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows(i0, i1)
		}()
	}
	wg.Wait()
	return c, nil
}

// MulMatrix is Mul for any gonum matrices: Mul where both are *mat.Dense,
// and gonum's mat.Dense.Mul(a, b.T()) otherwise, or when the shapes do not
// fit (it panics with gonum's shape error, as that call would).
func MulMatrix(a, b mat.Matrix) *mat.Dense {
	ad, ok1 := a.(*mat.Dense)
	bd, ok2 := b.(*mat.Dense)
	if ok1 && ok2 {
		if c, err := Mul(ad, bd); err == nil && !c.IsEmpty() {
			return c
		}
	}
	var c mat.Dense
	c.Mul(a, b.T())
	return &c
}

// blocks is the number of blockSize-long blocks that cover n.
func blocks(n int) int { return (n + blockSize - 1) / blockSize }

// addDots adds to each c[i·ldc + j] (i < m, j < n) the dot product of the
// first k elements of a's row i and b's row j (rows lda and ldb apart),
// summed block by block, each block as gonum's DotUnitary sums it.
func addDots(c []float64, ldc int, a []float64, lda int, b []float64, ldb int, m, n, k, block int) {
	for k0 := 0; k0 < k; k0 += block {
		k1 := min(k0+block, k)
		for i := range m {
			for j := range n {
				c[i*ldc+j] += dot(a[i*lda+k0:i*lda+k1], b[j*ldb+k0:j*ldb+k1])
			}
		}
	}
}

// dot is gonum's DotUnitary on amd64, in Go: lane l sums the products of
// the terms l, l+4, l+8, … of the longest prefix whose length is a
// multiple of 4, the rest (fewer than four) are added to lane 0 in turn,
// and the lanes are folded as (s0+s2) + (s1+s3). The conversions round
// each product, so that no build fuses it into an FMA.
func dot(x, y []float64) float64 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		xs, ys := x[i:i+4:i+4], y[i:i+4:i+4]
		s0 += float64(xs[0] * ys[0])
		s1 += float64(xs[1] * ys[1])
		s2 += float64(xs[2] * ys[2])
		s3 += float64(xs[3] * ys[3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i] * y[i])
	}
	return (s0 + s2) + (s1 + s3)
}
