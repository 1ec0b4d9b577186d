package symeig

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"

	"gonum.org/v1/gonum/mat"
)

// Decomposition is A = Σ_i Values[i]·v_i·v_iᵀ, the eigenvalues in ascending
// order and v_i the i-th row of Vectors (orthonormal rows).
type Decomposition struct {
	Values  []float64
	Vectors *mat.Dense // n×n, row i is the eigenvector of Values[i]
}

// maxSweeps bounds the QL sweeps, per eigenvalue on average, as LAPACK's
// dsteqr does (30·n in all).
const maxSweeps = 30

// Factorize decomposes the symmetric matrix a. It fails if a holds a
// non-finite value or the iteration does not converge.
func Factorize(a mat.Symmetric) (*Decomposition, error) {
	return factorize(a, runtime.GOMAXPROCS(0))
}

// FactorizeSerial is Factorize with the rotations applied on the calling
// goroutine alone, to the same bits (each column is rotated alone,
// however the columns are split). It suits callers that run several
// decompositions at once, one a core, where splitting each over the cores
// adds only contention (a split waits for its slowest part at every
// sweep).
func FactorizeSerial(a mat.Symmetric) (*Decomposition, error) {
	return factorize(a, 1)
}

// factorize is Factorize with a sweep's rotations split over at most
// parts goroutines.
func factorize(a mat.Symmetric, parts int) (*Decomposition, error) {
	n := a.SymmetricDim()
	if n == 0 {
		return &Decomposition{Vectors: &mat.Dense{}}, nil
	}
	q := make([]float64, n*n) // row-major, upper triangle of a
	for i := range n {
		for j := i; j < n; j++ {
			v := a.At(i, j)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("symeig: element (%d, %d) is %v", i, j, v)
			}
			q[i*n+j] = v
		}
	}
	d := make([]float64, n)
	e := make([]float64, n) // e[i] couples i and i+1; e[n-1] stays 0
	if n == 1 {
		d[0] = q[0]
		return &Decomposition{Values: d, Vectors: mat.NewDense(1, 1, []float64{1})}, nil
	}
	// A = Q·T·Qᵀ with T tridiagonal (d, e); z holds Qᵀ: T's rotations act
	// on its rows, and row i ends up as the eigenvector of d[i].
	z := make([]float64, n*n)
	tridiagonalize(q, n, d, e[:n-1], z)
	rot, err := tridiagonalQL(d, e, n)
	if err != nil {
		return nil, err
	}
	applyRotations(z, n, rot, parts)

	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return d[order[x]] < d[order[y]] })
	values := make([]float64, n)
	vecs := make([]float64, n*n)
	for dst, src := range order {
		values[dst] = d[src]
		copy(vecs[dst*n:(dst+1)*n], z[src*n:(src+1)*n])
	}
	return &Decomposition{Values: values, Vectors: mat.NewDense(n, n, vecs)}, nil
}

var errNoConvergence = errors.New("symeig: the QL iteration did not converge")

// rotations are the plane rotations of a QL iteration in the order they
// were made: sweep k applies, for i = hi−1 down to lo, the rotation
// (cs[off+i−lo], sn[off+i−lo]) to rows i and i+1.
type rotations struct {
	sweeps []sweep
	cs, sn []float64
}

type sweep struct{ lo, hi, off int }

// count is the number of rotations.
func (r *rotations) count() int { return len(r.cs) }

// tridiagonalQL diagonalises the symmetric tridiagonal matrix (d, e) by the
// implicit QL algorithm with Wilkinson's shift, in place: d becomes the
// eigenvalues (unordered), e is destroyed. The plane rotations, which
// depend on d and e alone, are returned for applyRotations to apply to
// the eigenvectors afterwards, column block by column block, instead of
// sweep by sweep over the whole matrix.
func tridiagonalQL(d, e []float64, n int) (*rotations, error) {
	const eps = 0x1p-53
	// A sweep per eigenvalue, one and a half on average, each of about
	// n/2 rotations: n² rotations is ample, and more are appended.
	rot := &rotations{cs: make([]float64, 0, n*n), sn: make([]float64, 0, n*n), sweeps: make([]sweep, 0, 2*n)}
	cs := make([]float64, n)
	sn := make([]float64, n)
	sweeps := 0
	for l := 0; l < n; l++ {
		for {
			// The first negligible coupling at or after l splits the matrix.
			m := l
			for ; m < n-1; m++ {
				if math.Abs(e[m]) <= eps*(math.Abs(d[m])+math.Abs(d[m+1])) {
					break
				}
			}
			if m == l {
				break // d[l] is an eigenvalue
			}
			if sweeps++; sweeps > maxSweeps*n {
				return nil, errNoConvergence
			}
			// Shift: the eigenvalue of the leading 2×2 block nearer d[l].
			g := (d[l+1] - d[l]) / (2 * e[l])
			r := math.Hypot(g, 1)
			g = d[m] - d[l] + e[l]/(g+math.Copysign(r, g))
			s, c, p := 1.0, 1.0, 0.0
			// Chase the bulge from the bottom of the block (m) up to l.
			i := m - 1
			deflated := false
			for ; i >= l; i-- {
				f := s * e[i]
				b := c * e[i]
				r = math.Hypot(f, g)
				e[i+1] = r
				if r == 0 { // underflow: the block splits at i+1
					d[i+1] -= p
					e[m] = 0
					deflated = true
					break
				}
				s, c = f/r, g/r
				g = d[i+1] - p
				// The conversions round each product, so that no build fuses
				// one into an FMA: the bits are the same for every GOAMD64.
				r = float64((d[i]-g)*s) + float64(2*c*b)
				p = float64(s * r)
				d[i+1] = g + p
				g = float64(c*r) - b
				cs[i], sn[i] = c, s
			}
			// Rotations i+1 … m−1 were computed (all of l … m−1 unless the
			// block split).
			if i+1 < m {
				rot.sweeps = append(rot.sweeps, sweep{lo: i + 1, hi: m, off: len(rot.cs)})
				rot.cs = append(rot.cs, cs[i+1:m]...)
				rot.sn = append(rot.sn, sn[i+1:m]...)
			}
			if deflated {
				continue
			}
			d[l] -= p
			e[l] = g
			e[m] = 0
		}
	}
	return rot, nil
}

// parallelMin is the number of row-pair updates (rotations × columns) from
// which the rotations are split over two goroutines.
const parallelMin = 1 << 14

// minPartWidth is the fewest columns a goroutine's part of the rotations
// gets. Narrower parts run several times slower: a rotation loads row i at
// the offsets where the previous one just stored row i+1, and with rows a
// multiple of 4 KiB apart the CPU takes the load to depend on the store
// (4K aliasing); over 64 columns the stores have retired (measured at
// 512×512: 8 columns 176 ms, 32 columns 27 ms, 64 or more 22 ms).
const minPartWidth = 64

// applyRotations applies rot to the rows of z (n×n, row-major), in order:
// a sweep's rotation i makes zᵢ₊₁ ← s·zᵢ + c·zᵢ₊₁, zᵢ ← c·zᵢ − s·zᵢ₊₁.
// Columns are independent, so they are split over up to maxParts
// goroutines, each applying every sweep to its columns without waiting
// for the others. Each element sees the same operations in the same order
// as with the rotations applied one at a time over whole rows, so the
// bits are the same however the columns are split.
func applyRotations(z []float64, n int, rot *rotations, maxParts int) {
	if rot.count() == 0 {
		return
	}
	apply := func(c0, c1 int) {
		for _, sw := range rot.sweeps {
			rotateSweep(z[sw.lo*n+c0:], n, sw.hi-sw.lo, c1-c0, rot.cs[sw.off:], rot.sn[sw.off:])
		}
	}
	parts := min(maxParts, rot.count()*n/parallelMin, n/minPartWidth)
	if parts <= 1 {
		apply(0, n)
		return
	}
	// Each part works on a copy of its columns: in place, a core's
	// prefetches run on past its columns into the next part's, whose
	// writes then take the lines back (at 512×512 on two cores each part
	// took 3.5 times as long as alone).
	own := func(c0, c1 int) {
		w := c1 - c0
		block := make([]float64, n*w)
		for i := range n {
			copy(block[i*w:(i+1)*w], z[i*n+c0:i*n+c1])
		}
		for _, sw := range rot.sweeps {
			rotateSweep(block[sw.lo*w:], w, sw.hi-sw.lo, w, rot.cs[sw.off:], rot.sn[sw.off:])
		}
		for i := range n {
			copy(z[i*n+c0:i*n+c1], block[i*w:(i+1)*w])
		}
	}
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Add(1)
		go func(c0, c1 int) {
			defer wg.Done()
			own(c0, c1)
		}(p*n/parts, (p+1)*n/parts)
	}
	own(0, n/parts)
	wg.Wait()
}
