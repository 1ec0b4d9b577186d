package kernel

// kc is the depth of one K block: a packed panel of kc×nr floats stays in L1
// while the micro-kernel sweeps it over a block of A rows.
const kc = 256

// mc is the number of A rows processed against one K block before moving on;
// an mc×kc block of A (96 KiB) stays in L2.
const mc = 96

// PackedB is the right-hand operand op(B) (k×n) rearranged for the
// micro-kernel: K is cut into blocks of kc rows, and each block into column
// panels of nr columns stored contiguously (kc×nr, the last panel zero-padded).
// Pack a frozen weight once (PackBToKeep) and reuse it for every call.
type PackedB struct {
	K, N   int
	nr     int // panel width of the kernel the data was packed for
	npad   int // N rounded up to a multiple of nr
	data   []float32
	pooled *[]float32
}

// PackB packs op(B), which is k×n: B itself (k×n, leading dimension ldb) when
// trans is false, or Bᵀ of a stored n×k matrix when trans is true (a Linear
// weight [out, in] gives op(B) = Wᵀ with trans = true). A large operand is
// packed on Threads() goroutines.
func PackB(trans bool, k, n int, b []float32, ldb int) *PackedB {
	return packBInto(nil, trans, k, n, b, ldb)
}

// PackBToKeep is PackB into memory of its own, sized exactly, rather than
// pooled scratch sized to a power of two: for an operand packed once and
// kept, such as a frozen weight. Release is a no-op on the result.
func PackBToKeep(trans bool, k, n int, b []float32, ldb int) *PackedB {
	npad := (n + active.nr - 1) / active.nr * active.nr
	return packBInto(make([]float32, k*npad), trans, k, n, b, ldb)
}

// packBInto is PackB into data (k·npad values), or into pooled scratch when
// data is nil.
func packBInto(data []float32, trans bool, k, n int, b []float32, ldb int) *PackedB {
	nr := active.nr
	npad := (n + nr - 1) / nr * nr
	p := &PackedB{K: k, N: n, nr: nr, npad: npad, data: data}
	if data == nil {
		p.pooled = getScratch(k * npad)
		p.data = *p.pooled
	}
	if k*n < parallelPack || Threads() < 2 {
		packB(p.data, nr, trans, k, n, b, ldb)
		return p
	}
	ParallelFor(packedPanels(k, n, nr), func(lo, hi int) { packPanels(p.data, nr, trans, k, n, b, ldb, lo, hi) })
	return p
}

// parallelPack is the size (k·n) from which PackB packs in parallel: a
// ViT-B/32 weight (590k–2.4M values) takes 1–3 ms on one core, a head's
// keys in attention (3200 values) a few µs, less than starting a goroutine
// is worth.
const parallelPack = 1 << 16

// packB writes the packed form of op(B) for panel width nr into data, which
// holds k·npad floats (npad = n rounded up to a multiple of nr). Every element
// of data is written, padding included (pooled buffers are not zeroed).
func packB(data []float32, nr int, trans bool, k, n int, b []float32, ldb int) {
	packPanels(data, nr, trans, k, n, b, ldb, 0, packedPanels(k, n, nr))
}

// packedPanels is the number of kc×nr panels in the packed form of a k×n
// operand: one per K block and nr columns.
func packedPanels(k, n, nr int) int {
	return (k + kc - 1) / kc * ((n + nr - 1) / nr)
}

// packPanels writes panels lo…hi−1 of packB's output, numbered K block by K
// block (panel q of block k0/kc is (k0/kc)·npad/nr + q).
func packPanels(data []float32, nr int, trans bool, k, n int, b []float32, ldb int, lo, hi int) {
	npad := (n + nr - 1) / nr * nr
	panels := npad / nr
	for i := lo; i < hi; i++ {
		k0, j0 := i/panels*kc, i%panels*nr
		kb := min(kc, k-k0)
		panel := data[k0*npad+j0*kb : k0*npad+(j0+nr)*kb]
		w := min(nr, n-j0)
		if trans {
			packPanelT(panel, nr, kb, w, b[j0*ldb+k0:], ldb)
			continue
		}
		for kk := 0; kk < kb; kk++ {
			dst := panel[kk*nr : kk*nr+nr]
			copy(dst[:w], b[(k0+kk)*ldb+j0:(k0+kk)*ldb+j0+w])
			clear(dst[w:])
		}
	}
}

// packPanelT fills one kb×nr panel from w rows of a stored n×k matrix
// (leading dimension ldb, b starting at the panel's first row and K block's
// first column): panel[kk*nr+j] = b[j*ldb+kk], columns w…nr−1 zero. Full
// 8×8 blocks go through transposeStrip8 where available; the columns past the
// last multiple of 8 of w and the rows past the last multiple of 8 of kb stay
// scalar.
func packPanelT(panel []float32, nr, kb, w int, b []float32, ldb int) {
	j8, k8 := 0, 0
	if haveTransposeStrip8 {
		k8 = kb &^ 7
		if k8 > 0 {
			for ; j8+8 <= w; j8 += 8 {
				transposeStrip8(panel[j8:], nr, b[j8*ldb:], ldb, k8/8)
			}
		}
	}
	for kk := 0; kk < kb; kk++ {
		dst := panel[kk*nr : kk*nr+nr]
		j := j8
		if kk >= k8 {
			j = 0
		}
		for ; j < w; j++ {
			dst[j] = b[j*ldb+kk]
		}
		clear(dst[w:])
	}
}

// Release returns the packed buffer to the pool; p must not be used after.
// Calling it is optional (a packed weight kept for the model's life never is).
func (p *PackedB) Release() {
	if p.pooled != nil {
		putScratch(p.pooled)
		p.pooled, p.data = nil, nil
	}
}

// ForActiveKernel reports whether p was packed for the micro-kernel now
// active: a PackedB kept across calls must be packed again after SetKernel
// changes the panel width.
func (p *PackedB) ForActiveKernel() bool { return p.nr == active.nr }

// panel returns the kb×nr panel of K block k0 holding columns j0…j0+nr−1.
func (p *PackedB) panel(k0, kb, j0 int) []float32 {
	base := k0*p.npad + j0*kb
	return p.data[base : base+kb*p.nr]
}
