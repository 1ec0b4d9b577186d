package kernel

import (
	"fmt"
)

// GemmInt8 computes C = dequantise(quantise(A)·Q) + 1·biasᵀ for A [m, q.K]
// (leading dimension lda) and the quantised weight q (C [m, q.N], leading
// dimension ldc, overwritten): y = x·Wᵀ + b of a linear layer. bias may be
// nil. Each row of A is quantised to u8 with its own scale and zero point,
// to 256 levels for the AMX, AVX512-VNNI and AVX-VNNI kernels and the Go
// reference, to 128 for the AVX2 kernel (see quantizeRowU8): the two give
// different results, each the same bits at any thread count.
func GemmInt8(m int, a []float32, lda int, q *Int8Weight, bias, c []float32, ldc int) {
	if m == 0 {
		return
	}
	checkLow("GemmInt8", m, q.N, q.K, a, lda, bias, c, ldc)
	pa := quantizeA(m, q.K, a, lda)
	kern := int8Active
	q = q.packFor(kern)
	lowGemm(pa, q.N, bias, c, ldc, nil, func(at []uint8, t0, tiles, panel int, c []float32, ldc int, bias []float32) {
		bp := q.data[panel*q.groups*lowNR*4 : (panel+1)*q.groups*lowNR*4]
		j0 := panel * lowNR
		int8Tile(kern, q.groups, at, pa.lda(), bp, c, ldc, pa.scale[t0*lowMR:], pa.zero[t0*lowMR:], q.colSum[j0:j0+lowNR], q.scale[j0:j0+lowNR], bias, tiles)
	})
	packedAPool.Put(pa)
}

// lowTile computes tiles row tiles of C from tile t0 down, for column
// panel panel, into c (leading dimension ldc, lowNR columns wide), from
// the packed rows at of those tiles and the panel's bias (lowNR values).
type lowTile func(at []uint8, t0, tiles, panel int, c []float32, ldc int, bias []float32)

// lowGemm is the driver both reduced precisions share: the bias padded to
// whole panels, and tile run over the m×n product of the packed rows pa
// (lowDriver; post as there). The precision is in tile: which kernel, and
// how it reads its packed weight.
func lowGemm(pa *packedA, n int, bias, c []float32, ldc int, post lowPost, tile lowTile) {
	b := padBias(bias, n)
	lowDriver(pa.m, n, func(t0, tiles, panel int, c []float32, ldc int) {
		at := pa.data[t0*pa.panelBytes() : (t0+tiles)*pa.panelBytes()]
		j0 := panel * lowNR
		tile(at, t0, tiles, panel, c, ldc, (*b)[j0:j0+lowNR])
	}, c, ldc, post)
	putPad(b)
}

// GemmBF16 computes C = bf16(A)·Wᵀ + 1·biasᵀ for A [m, w.K] (leading
// dimension lda), each value of A rounded to bf16, products accumulated in
// float32; C [m, w.N] (leading dimension ldc) is overwritten. bias may be nil.
func GemmBF16(m int, a []float32, lda int, w *BF16Weight, bias, c []float32, ldc int) {
	if m == 0 {
		return
	}
	checkLow("GemmBF16", m, w.N, w.K, a, lda, bias, c, ldc)
	pa := roundA(m, w.K, a, lda)
	gemmBF16Packed(pa, w, bias, c, ldc, nil)
	packedAPool.Put(pa)
}

// Activation is an elementwise function GemmBF16Act applies to a product
// (and Device.BiasActivation after one).
type Activation int

const (
	// QuickGELUActivation is QuickGELU's float32 arithmetic.
	QuickGELUActivation Activation = iota
	// GELUActivation is GELU's (exact, erf-based) float32 arithmetic.
	GELUActivation
)

// apply computes the activation of v in place, in float32 (one goroutine).
func (a Activation) apply(v []float32) {
	if a == GELUActivation {
		gelu32(v, v)
	} else {
		quickGELU32(v, v)
	}
}

// BF16Rows is rows of activations already rounded to bf16, in the layout
// the bf16 kernels read: GemmBF16Act's result, GemmBF16Rows's input.
type BF16Rows struct {
	pa   *packedA
	m, k int
}

// Rows and Cols are the shape of r.
func (r *BF16Rows) Rows() int { return r.m }

// Cols: see Rows.
func (r *BF16Rows) Cols() int { return r.k }

// At returns the bf16 value of row i, column j, widened to float32.
func (r *BF16Rows) At(i, j int) float32 {
	o := i*r.pa.lda() + 2*j
	return FromBF16(uint16(r.pa.data[o]) | uint16(r.pa.data[o+1])<<8)
}

// GemmBF16Act computes act(bf16(A)·Wᵀ + 1·biasᵀ) for A [m, w.K] (leading
// dimension lda) and returns it rounded to bf16: the input of the next
// linear layer, for GemmBF16Rows. The activation runs on each block of
// products as it leaves the kernel, while it is in cache, so the [m, w.N]
// float32 product is never written out; the values are those of GemmBF16,
// then QuickGELU or GELU, then GemmBF16's rounding of its input, bit for
// bit. m ≥ 1.
func GemmBF16Act(m int, a []float32, lda int, w *BF16Weight, bias []float32, act Activation) *BF16Rows {
	checkLowA("GemmBF16Act", m, w.K, a, lda)
	checkBias("GemmBF16Act", bias, w.N)
	pa := roundA(m, w.K, a, lda)
	out := getPackedA(m, (w.N+1)/2)
	// Rows past m, and the pad column of an odd width, are zeros, as
	// roundA leaves them.
	ld := out.lda()
	clear(out.data[m*ld:])
	if w.N%2 == 1 {
		for i := 0; i < m; i++ {
			out.data[i*ld+2*w.N], out.data[i*ld+2*w.N+1] = 0, 0
		}
	}
	asm := bf16RoundAsm()
	gemmBF16Packed(pa, w, bias, nil, 0, func(t0, t1, panel int, buf []float32) {
		r0, r1 := t0*lowMR, min(t1*lowMR, m)
		vals := buf[:(r1-r0)*lowNR]
		act.apply(vals)
		j0 := panel * lowNR
		cols := min(lowNR, w.N-j0)
		if asm && cols == lowNR {
			toBF16Panel(out.data[r0*ld+2*j0:], ld, vals, r1-r0)
			return
		}
		for i := r0; i < r1; i++ {
			row := out.data[i*ld+2*j0:]
			for j, v := range vals[(i-r0)*lowNR : (i-r0)*lowNR+cols] {
				h := ToBF16(v)
				row[2*j], row[2*j+1] = uint8(h), uint8(h>>8)
			}
		}
	})
	packedAPool.Put(pa)
	return &BF16Rows{pa: out, m: m, k: w.N}
}

// GemmBF16Rows computes C = in·Wᵀ + 1·biasᵀ as GemmBF16 does, for input
// rows already rounded (in.Cols() = w.K), and releases in.
func GemmBF16Rows(in *BF16Rows, w *BF16Weight, bias, c []float32, ldc int) {
	if in.k != w.K {
		panic(fmt.Sprintf("kernel: GemmBF16Rows: input of %d columns for a weight [%d, %d]", in.k, w.N, w.K))
	}
	checkBias("GemmBF16Rows", bias, w.N)
	checkLowC("GemmBF16Rows", in.m, w.N, c, ldc)
	gemmBF16Packed(in.pa, w, bias, c, ldc, nil)
	packedAPool.Put(in.pa)
	in.pa = nil
}

// gemmBF16Packed runs the bf16 kernel on rounded rows pa: into C, or, with
// post set, into scratch handed to post block by block (see lowDriver).
func gemmBF16Packed(pa *packedA, w *BF16Weight, bias, c []float32, ldc int, post lowPost) {
	kern := bf16Active
	lowGemm(pa, w.N, bias, c, ldc, post, func(at []uint8, _, tiles, panel int, c []float32, ldc int, bias []float32) {
		bp := w.data[panel*w.groups*lowNR*2 : (panel+1)*w.groups*lowNR*2]
		bf16Tile(kern, w.groups, at, pa.lda(), bp, c, ldc, bias, tiles)
	})
}

func checkLow(name string, m, n, k int, a []float32, lda int, bias, c []float32, ldc int) {
	checkLowA(name, m, k, a, lda)
	checkBias(name, bias, n)
	checkLowC(name, m, n, c, ldc)
}

func checkLowA(name string, m, k int, a []float32, lda int) {
	if lda < k || len(a) < (m-1)*lda+k {
		panic(fmt.Sprintf("kernel: %s: A has %d values, leading dimension %d, for [%d, %d]", name, len(a), lda, m, k))
	}
}

func checkBias(name string, bias []float32, n int) {
	if bias != nil && len(bias) < n {
		panic(fmt.Sprintf("kernel: %s: bias has %d values, want %d", name, len(bias), n))
	}
}

func checkLowC(name string, m, n int, c []float32, ldc int) {
	if ldc < n || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("kernel: %s: C has %d values, leading dimension %d, for [%d, %d]", name, len(c), ldc, m, n))
	}
}

// padBias returns bias (zeros if nil) padded with zeros to a multiple of
// lowNR, in pooled scratch.
func padBias(bias []float32, n int) *[]float32 {
	npad := (n + lowNR - 1) / lowNR * lowNR
	b := getScratch(npad)
	clear(*b)
	copy(*b, bias[:min(len(bias), n)])
	return b
}

func putPad(b *[]float32) { putScratch(b) }
