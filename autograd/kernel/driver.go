package kernel

import (
	"fmt"
	"sync/atomic"
)

// microKernel computes tiles mr×nr tiles of C, one below the other, each
// from a packed kb×mr panel of A (for each k, the tile's mr row values; the
// panels consecutive) and the same packed kb×nr panel of B: C = alpha·A·B,
// plus the old C when load is set, else plus bias (nr values added to every
// row) when bias is not nil.
type microKernel struct {
	name   string
	mr, nr int
	tile   func(kb int, a, b, c []float32, ldc int, alpha float32, load bool, bias []float32, tiles int)
	// rows, when set, is tile with A read in place (the tiles' rows of a
	// row-major matrix with leading dimension lda) instead of packed, which
	// saves packing A when op(A) = A.
	rows func(kb int, a []float32, lda int, b, c []float32, ldc int, alpha float32, load bool, bias []float32, tiles int)
}

// active is the micro-kernel GEMM uses; chosen at start-up from the CPU.
var active = bestKernel()

// Kernel names the GEMM micro-kernel in use ("avx512", "avx2", "go").
func Kernel() string { return active.name }

// Kernels lists the micro-kernels this CPU can run, best first.
func Kernels() []string {
	var names []string
	for _, k := range available() {
		names = append(names, k.name)
	}
	return names
}

// SetKernel selects a micro-kernel by name (for tests and benchmarks) and
// returns the previous one's name. Matrices packed before the switch must be
// packed again.
func SetKernel(name string) (string, error) {
	for _, k := range available() {
		if k.name == name {
			prev := active.name
			active = k
			return prev, nil
		}
	}
	return active.name, fmt.Errorf("kernel: micro-kernel %q not available on this CPU (have %v)", name, Kernels())
}

func bestKernel() microKernel { return available()[0] }

// goKernel is the portable micro-kernel: 4×16, accumulating in float32 in the
// same order as the assembly kernels (one k at a time).
var goKernel = microKernel{name: "go", mr: 4, nr: 16, tile: goTile}

func goTile(kb int, a, b, c []float32, ldc int, alpha float32, load bool, bias []float32, tiles int) {
	for t := range tiles {
		goTile1(kb, a[t*kb*4:], b, c[t*4*ldc:], ldc, alpha, load, bias)
	}
}

func goTile1(kb int, a, b, c []float32, ldc int, alpha float32, load bool, bias []float32) {
	var acc [4][16]float32
	for p := 0; p < kb; p++ {
		bp := (*[16]float32)(b[p*16 : p*16+16])
		ap := (*[4]float32)(a[p*4 : p*4+4])
		for r := 0; r < 4; r++ {
			av := ap[r]
			row := &acc[r]
			for j := 0; j < 16; j++ {
				row[j] += av * bp[j]
			}
		}
	}
	for r := 0; r < 4; r++ {
		cr := c[r*ldc : r*ldc+16]
		for j := 0; j < 16; j++ {
			switch {
			case load:
				cr[j] += alpha * acc[r][j]
			case bias != nil:
				cr[j] = alpha*acc[r][j] + bias[j]
			default:
				cr[j] = alpha * acc[r][j]
			}
		}
	}
}

// GemmPacked computes C = alpha·op(A)·B + beta·C with B packed by PackB.
// op(A) is m×p.K (A itself, or Aᵀ of a stored p.K×m matrix when transA).
func GemmPacked(transA bool, m int, alpha float32, a []float32, lda int, p *PackedB, beta float32, c []float32, ldc int) {
	gemmPacked(transA, m, alpha, a, lda, p, beta, nil, c, ldc, true)
}

// GemmPackedBias computes C = alpha·op(A)·B + 1·biasᵀ (bias, of length p.N,
// added to every row of the product, as a linear layer's bias), overwriting
// C. The bias is added as each tile of C is stored, which saves a pass over C.
func GemmPackedBias(transA bool, m int, alpha float32, a []float32, lda int, p *PackedB, bias, c []float32, ldc int) {
	if len(bias) < p.N {
		panic(fmt.Sprintf("kernel: GemmPackedBias: bias has %d values, want %d", len(bias), p.N))
	}
	gemmPacked(transA, m, alpha, a, lda, p, 0, bias[:p.N], c, ldc, true)
}

func gemmPackedSerial(transA bool, m int, alpha float32, a []float32, lda int, p *PackedB, beta float32, c []float32, ldc int) {
	gemmPacked(transA, m, alpha, a, lda, p, beta, nil, c, ldc, false)
}

// gemmPacked is GemmPacked, with a bias when beta is 0 and bias not nil.
func gemmPacked(transA bool, m int, alpha float32, a []float32, lda int, p *PackedB, beta float32, bias, c []float32, ldc int, parallel bool) {
	n, k := p.N, p.K
	if m == 0 || n == 0 {
		return
	}
	kern := active
	if p.nr != kern.nr {
		panic(fmt.Sprintf("kernel: B packed for panel width %d, kernel %s uses %d", p.nr, kern.name, kern.nr))
	}
	if beta != 0 && beta != 1 {
		for i := 0; i < m; i++ {
			scaleRow(c[i*ldc:i*ldc+n], beta)
		}
	}
	if k == 0 {
		if beta == 0 {
			for i := 0; i < m; i++ {
				if bias != nil {
					copy(c[i*ldc:i*ldc+n], bias)
				} else {
					clear(c[i*ldc : i*ldc+n])
				}
			}
		}
		return
	}
	panels := (n + kern.nr - 1) / kern.nr
	run := func(r0, r1, q0, q1 int) {
		gemmBlock(kern, r0, r1, q0, q1, alpha, transA, a, lda, p, beta != 0, bias, c, ldc)
	}
	t := Threads()
	switch {
	case !parallel || t == 1:
		run(0, m, 0, panels)
	case m >= t*2*kern.mr:
		// Row blocks handed out one at a time rather than one fixed half per
		// goroutine: on a shared machine one core often runs slower (other
		// goroutines, the collector, neighbours), and a static split waits
		// for it at the end of every product.
		//
		// A unit of work is a row block and a range of column panels of
		// about unitFlops: the goroutine that finishes first waits on
		// average half a unit at the end, and whole row blocks of a ViT
		// layer (up to 450 MFLOP, 5 ms) left 3% of the cores idle.
		block := min(mc, (m+4*t-1)/(4*t))
		block = (block + kern.mr - 1) / kern.mr * kern.mr
		blocks := (m + block - 1) / block
		perRange := max(1, unitFlops/(2*block*k*kern.nr))
		ranges := (panels + perRange - 1) / perRange
		perRange = (panels + ranges - 1) / ranges // even the ranges out
		units := blocks * ranges
		var next atomic.Int64
		splitRange(t, 1, t, func(_, _, _ int) {
			for {
				u := int(next.Add(1)) - 1
				if u >= units {
					return
				}
				b, q := u/ranges, u%ranges*perRange
				run(b*block, min((b+1)*block, m), q, min(q+perRange, panels))
			}
		})
	default:
		ParallelFor(panels, func(lo, hi int) { run(0, m, lo, hi) })
	}
}

// unitFlops is the size of the units of work gemmPacked hands out to its
// goroutines: about 0.6 ms of one core.
const unitFlops = 64 << 20

// gemmBlock computes rows r0…r1−1 and column panels q0…q1−1 of C. For each
// K block it takes up to mc rows of op(A), packed into mr-row panels
// (zero-padding the last) unless the kernel reads A in place, then sweeps
// every B panel over them. Unless loadC, bias (if not nil) is added to every
// row as the first K block is stored.
func gemmBlock(kern microKernel, r0, r1, q0, q1 int, alpha float32, transA bool, a []float32, lda int, p *PackedB, loadC bool, bias, c []float32, ldc int) {
	mr, nr := kern.mr, kern.nr
	n, k := p.N, p.K
	inPlace := !transA && kern.rows != nil
	ap := getScratch((mc + mr) * kc)
	tmpC := getScratch(mr * nr)
	defer putScratch(ap)
	defer putScratch(tmpC)
	for k0 := 0; k0 < k; k0 += kc {
		kb := min(kc, k-k0)
		load := loadC || k0 > 0
		for i0 := r0; i0 < r1; i0 += mc {
			i1 := min(i0+mc, r1)
			// In place, only a last panel of fewer than mr rows is packed
			// (at the start of ap).
			packFrom := i0
			if inPlace {
				packFrom = i0 + (i1-i0)/mr*mr
			}
			if packFrom < i1 {
				packA(*ap, transA, a, lda, packFrom, i1, k0, kb, mr)
			}
			for q := q0; q < q1; q++ {
				j0 := q * nr
				cols := min(nr, n-j0)
				bp := p.panel(k0, kb, j0)
				var bb []float32 // this panel's bias, when it is added now
				if bias != nil && !load {
					bb = bias[j0 : j0+cols]
				}
				// Full tiles: one kernel call for the tiles read in place and
				// one for the packed ones.
				full := i0 + (i1-i0)/mr*mr
				if cols < nr {
					full = i0 // every tile is an edge tile
				}
				if packFrom > i0 && full > i0 {
					kern.rows(kb, a[i0*lda+k0:], lda, bp, c[i0*ldc+j0:], ldc, alpha, load, bb, (min(packFrom, full)-i0)/mr)
				}
				if full > packFrom {
					kern.tile(kb, (*ap)[:(full-packFrom)*kb], bp, c[packFrom*ldc+j0:], ldc, alpha, load, bb, (full-packFrom)/mr)
				}
				// Edge tiles: compute a full tile into scratch, keep the valid part.
				for i := full; i < i1; i += mr {
					rows := min(mr, i1-i)
					if i < packFrom {
						kern.rows(kb, a[i*lda+k0:], lda, bp, *tmpC, nr, alpha, false, nil, 1)
					} else {
						at := (*ap)[(i-packFrom)*kb : (i-packFrom+mr)*kb]
						kern.tile(kb, at, bp, *tmpC, nr, alpha, false, nil, 1)
					}
					for r := 0; r < rows; r++ {
						cr := c[(i+r)*ldc+j0 : (i+r)*ldc+j0+cols]
						tr := (*tmpC)[r*nr : r*nr+cols]
						switch {
						case load:
							for j := range cr {
								cr[j] += tr[j]
							}
						case bb != nil:
							for j := range cr {
								cr[j] = tr[j] + bb[j]
							}
						default:
							copy(cr, tr)
						}
					}
				}
			}
		}
	}
}

// packA writes rows i0…i1−1, columns k0…k0+kb−1 of op(A) into dst as
// consecutive kb×mr panels: panel t holds, for each k, the values of rows
// i0+t·mr … i0+t·mr+mr−1 (zero past i1).
func packA(dst []float32, transA bool, a []float32, lda, i0, i1, k0, kb, mr int) {
	for t := i0; t < i1; t += mr {
		panel := dst[(t-i0)*kb : (t-i0+mr)*kb]
		rows := min(mr, i1-t)
		if rows < mr {
			clear(panel)
		}
		if transA {
			// op(A)[i, k] = a[k·lda + i]: rows of the panel are contiguous in a.
			for kk := 0; kk < kb; kk++ {
				copy(panel[kk*mr:kk*mr+rows], a[(k0+kk)*lda+t:(k0+kk)*lda+t+rows])
			}
			continue
		}
		for r := 0; r < rows; r++ {
			src := a[(t+r)*lda+k0 : (t+r)*lda+k0+kb]
			for kk, v := range src {
				panel[kk*mr+r] = v
			}
		}
	}
}

func scaleRow(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}
