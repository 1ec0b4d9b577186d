package kernel

import (
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// Int8Weight is a weight [n, k] (a linear layer's [out, in]) quantised to
// signed 8 bits per output channel, w[j, p] ≈ Scale[j]·q[j, p] with
// Scale[j] = max_p |w[j, p]|/127 and q rounded to nearest (ties to even),
// packed for the int8 kernels: per panel of 32 channels, for each group of
// 4 consecutive inputs, each channel's 4 values (k padded with zeros).
//
// The AVX2 kernel reads the values halved, at 7 bits (half): its
// VPMADDUBSW sums two products in int16, and with 7-bit weights two such
// sums add in int16 too, which saves a quarter of its multiplies.
type Int8Weight struct {
	N, K   int
	groups int       // k rounded up to a multiple of 4, over 4
	data   []int8    // panels of groups·32·4 values
	colSum []int32   // Σ_p q[j, p], padded to a multiple of 32
	scale  []float32 // Scale[j], padded with zeros

	halfOnce sync.Once
	halved   *Int8Weight // half's result
}

// half returns the weight at 7 bits, for the kernels that read it so
// (lowKernel.w7): q'[j, p] = RoundToEven(q[j, p]/2), so |q'| ≤ 64, with
// Scale'[j] = 2·Scale[j] (exact), packed as the weight is, with k padded
// with zeros to a multiple of 8 (an even number of groups: the kernel
// takes two at a time). Made once, on first use.
func (q *Int8Weight) half() *Int8Weight {
	q.halfOnce.Do(func() {
		g := int8Groups(q.K, true)
		npad := len(q.colSum)
		h := &Int8Weight{N: q.N, K: q.K, groups: g, data: make([]int8, npad*g*4), colSum: make([]int32, npad), scale: make([]float32, npad)}
		for j := range q.scale {
			h.scale[j] = 2 * q.scale[j]
		}
		// The same layout, panel by panel; the group added to an odd count
		// stays zeros.
		src, dst := q.groups*lowNR*4, g*lowNR*4
		for p := 0; p < npad/lowNR; p++ {
			in, out := q.data[p*src:(p+1)*src], h.data[p*dst:]
			sums := h.colSum[p*lowNR : (p+1)*lowNR]
			for i, v := range in {
				hv := halfToEven(v)
				out[i] = hv
				sums[i/4%lowNR] += int32(hv)
			}
		}
		q.halved = h
	})
	return q.halved
}

// halfToEven is v/2 rounded to nearest, ties to even.
func halfToEven(v int8) int8 {
	h := v >> 1 // floor(v/2)
	if v&1 != 0 && h&1 != 0 {
		h++ // v/2 = h + 1/2: the even neighbour is h + 1
	}
	return h
}

// int8Groups is the number of groups of 4 inputs a row of k values is
// packed in: rounded up to an even number for a kernel that reads 7-bit
// weights (w7), which takes two groups at a time; the weight (half) and
// the activations (quantizeA) are padded alike.
func int8Groups(k int, w7 bool) int {
	g := (k + 3) / 4
	if w7 {
		g = (g + 1) &^ 1
	}
	return g
}

// packFor returns the weight kern reads: q itself, or half.
func (q *Int8Weight) packFor(kern lowKernel) *Int8Weight {
	if kern.w7 {
		return q.half()
	}
	return q
}

// QuantizeInt8 quantises w [n, k] (row j the weights of output j) by
// QuantizeInt8Rows and packs the result for the int8 kernels. name names the
// tensor in the error returned when w holds NaN or ±Inf.
func QuantizeInt8(name string, w []float32, n, k int) (*Int8Weight, error) {
	if len(w) < n*k || n <= 0 || k <= 0 {
		return nil, fmt.Errorf("kernel: QuantizeInt8 %s: %d values for [%d, %d]", name, len(w), n, k)
	}
	rows, scales, err := QuantizeInt8Rows(name, w, n, k)
	if err != nil {
		return nil, err
	}
	g := (k + 3) / 4
	npad := (n + lowNR - 1) / lowNR * lowNR
	q := &Int8Weight{N: n, K: k, groups: g, data: make([]int8, npad*g*4), colSum: make([]int32, npad), scale: make([]float32, npad)}
	copy(q.scale, scales)
	for j := 0; j < n; j++ {
		panel := q.data[j/lowNR*g*lowNR*4:]
		col := j % lowNR
		var sum int32
		for p, v := range rows[j*k : j*k+k] {
			panel[(p/4*lowNR+col)*4+p%4] = v
			sum += int32(v)
		}
		q.colSum[j] = sum
	}
	if int8Active.w7 {
		q.half() // now, with the rest of the packing, not in a pass
	}
	return q, nil
}

// QuantizeInt8Rows quantises w [n, k] (row j the weights of output j) to
// signed 8 bits per row, symmetrically: with m the largest |w[j, p]| of row
// j, computed in float64, Scale[j] = float32(m/127) and q[j, p] =
// RoundToEven(w[j, p]·127/m), clamped to ±127, so that w[j, p] ≈
// Scale[j]·q[j, p]. A row whose scale is zero (zeros, or values too small
// for a float32 scale) gets q = 0. It returns q row-major [n, k] and the n
// scales. This is the one rule of the package's int8 weights: QuantizeInt8
// packs its result for the kernels, and a file that stores weights in int8
// stores it (weights.Convert). name names the tensor in the error, wrapping
// ErrNonFinite, returned when w holds NaN or ±Inf.
func QuantizeInt8Rows(name string, w []float32, n, k int) (q []int8, scale []float32, err error) {
	if len(w) < n*k || n < 0 || k < 0 {
		return nil, nil, fmt.Errorf("kernel: QuantizeInt8Rows %s: %d values for [%d, %d]", name, len(w), n, k)
	}
	q, scale = make([]int8, n*k), make([]float32, n)
	for j := 0; j < n; j++ {
		row := w[j*k : j*k+k]
		var hi float64
		for p, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, nil, fmt.Errorf("%w: %s[%d, %d] = %v", ErrNonFinite, name, j, p, v)
			}
			hi = max(hi, math.Abs(float64(v)))
		}
		s := float32(hi / 127)
		if s == 0 {
			continue // row of zeros (or of values too small for a scale): q = 0
		}
		inv := 127 / hi
		out := q[j*k : j*k+k]
		for p, v := range row {
			r := math.RoundToEven(float64(v) * inv)
			out[p] = int8(max(-127, min(127, r)))
		}
		scale[j] = s
	}
	return q, scale, nil
}

// Dequantize returns the weight [n, k] the quantised values stand for,
// Scale[j]·q[j, p] (computed in float64).
func (q *Int8Weight) Dequantize() []float64 {
	w := make([]float64, q.N*q.K)
	for j := 0; j < q.N; j++ {
		for p := 0; p < q.K; p++ {
			w[j*q.K+p] = float64(q.scale[j]) * float64(q.at(j, p))
		}
	}
	return w
}

// Unpack returns the quantised values row-major [N, K] and the N scales,
// read back from the packed layout: QuantizeInt8Rows's result for the
// weight q was made from.
func (q *Int8Weight) Unpack() (values []int8, scale []float32) {
	values = make([]int8, q.N*q.K)
	for j := 0; j < q.N; j++ {
		for p := 0; p < q.K; p++ {
			values[j*q.K+p] = q.at(j, p)
		}
	}
	return values, append([]float32(nil), q.scale[:q.N]...)
}

// at is the quantised value of w[j, p].
func (q *Int8Weight) at(j, p int) int8 {
	return q.data[j/lowNR*q.groups*lowNR*4+(p/4*lowNR+j%lowNR)*4+p%4]
}

// BF16Weight is a weight [n, k] rounded to bfloat16, packed for the bf16
// kernels: per panel of 32 channels, for each pair of consecutive inputs,
// each channel's 2 values (k padded with zeros).
type BF16Weight struct {
	N, K   int
	groups int // k rounded up to even, over 2
	data   []uint16
}

// PackBF16 rounds w [n, k] to bfloat16 and packs it. name names the tensor
// in the error returned when w holds NaN or ±Inf.
func PackBF16(name string, w []float32, n, k int) (*BF16Weight, error) {
	if len(w) < n*k || n <= 0 || k <= 0 {
		return nil, fmt.Errorf("kernel: PackBF16 %s: %d values for [%d, %d]", name, len(w), n, k)
	}
	g := (k + 1) / 2
	npad := (n + lowNR - 1) / lowNR * lowNR
	b := &BF16Weight{N: n, K: k, groups: g, data: make([]uint16, npad*g*2)}
	for j := 0; j < n; j++ {
		panel := b.data[j/lowNR*g*lowNR*2:]
		for p, v := range w[j*k : j*k+k] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("%w: %s[%d, %d] = %v", ErrNonFinite, name, j, p, v)
			}
			panel[(p/2*lowNR+j%lowNR)*2+p%2] = ToBF16(v)
		}
	}
	return b, nil
}

// ToBF16 rounds x to bfloat16 (to nearest, ties to even), as the upper 16
// bits of a float32. Subnormals become zero of the same sign (the bf16
// instructions read them as zero); NaN stays NaN.
func ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	switch {
	case u&0x7f800000 == 0:
		return uint16(u>>16) & 0x8000
	case u&0x7fffffff > 0x7f800000:
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// FromBF16 widens a bfloat16 to float32 (exactly).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// minNormal32 is the smallest normal float32, 2⁻¹²⁶.
const minNormal32 = 0x1p-126

// magicRound is 1.5·2²³: adding it to a float32 of magnitude below 2²²
// rounds it to an integer (to nearest, ties to even) in the low mantissa bits.
const magicRound = 0x1.8p23

// quantizeRowU8 quantises a row of activations x to unsigned 8 bits over
// the range [min(x, 0), max(x, 0)]: x ≈ scale·(q − zero), q written to dst.
// A row of zeros gets scale 0; a row holding NaN or ±Inf gets scale NaN, so
// that its outputs are NaN as in float32. vec selects the loops over whole
// groups of values: AVX-512 (16), AVX2 (8) or none (the same results, bit
// for bit).
//
// levels is the largest code: 255, or 127 for the AVX2 kernel, whose
// VPMADDUBSW adds two u8·s8 products in int16 with saturation: with 7-bit
// activations the pair stays within 2·127·127 = 32258, so no sum saturates.
func quantizeRowU8(dst []uint8, x []float32, vec quantVec, levels int32) (scale float32, zero int32) {
	dst = dst[:len(x)]
	var lo, hi, bad float32
	n16 := 0 // values the vector loops take
	switch vec {
	case quantAVX512:
		n16 = len(x) &^ 15
	case quantAVX2:
		n16 = len(x) &^ 7
	}
	if n16 > 0 {
		if vec == quantAVX512 {
			lo, hi, bad = rowRangeAVX512(&x[0], n16)
		} else {
			lo, hi, bad = rowRangeAVX2(&x[0], n16)
		}
	}
	for _, v := range x[n16:] {
		lo = min(lo, v)
		hi = max(hi, v)
		bad += v - v // 0 unless v is NaN or ±Inf
	}
	if bad != 0 || bad != bad {
		clear(dst)
		return float32(math.NaN()), 0
	}
	l := float32(levels)
	scale = hi/l - lo/l // not (hi − lo)/levels, which can overflow
	if scale < minNormal32 {
		// Every |x| < 255·2⁻¹²⁶: a subnormal scale has too few bits to
		// quantise with, and the outputs' share of such a row is below
		// float32's range anyway. The row counts as zeros.
		clear(dst)
		return 0, 0
	}
	inv := 1 / scale
	zf := float32(-lo*inv) + magicRound
	zero = max(0, min(levels, int32(math.Float32bits(zf))-0x4b400000))
	if n16 > 0 {
		if vec == quantAVX512 {
			quantizeU8AVX512(&dst[0], &x[0], n16, inv, zero, levels)
		} else {
			quantizeU8AVX2(&dst[0], &x[0], n16, inv, zero, levels)
		}
	}
	for p := n16; p < len(x); p++ {
		r := float32(x[p]*inv) + magicRound
		q := int32(math.Float32bits(r)) - 0x4b400000 + zero
		dst[p] = uint8(max(0, min(levels, q)))
	}
	return scale, zero
}

// quantVec names the vector loops of quantizeRowU8.
type quantVec uint8

const (
	quantGo     quantVec = iota // none
	quantAVX2                   // groups of 8 values
	quantAVX512                 // groups of 16 values
)

// quantVecs returns the loops this CPU runs, best last: with an assembly
// int8 kernel selected (any, the AVX2 kernel's too) the activations are
// quantised with the best; selecting the Go kernel runs Go throughout.
func quantVecs() []quantVec {
	v := []quantVec{quantGo}
	if haveQuantizeAVX2 {
		v = append(v, quantAVX2)
	}
	if haveQuantizeAVX512 {
		v = append(v, quantAVX512)
	}
	return v
}

// packedA is activations quantised (int8) or rounded (bf16), row-major,
// each row groups·4 bytes (k padded with zeros), m padded with rows of zeros
// to a multiple of lowMR.
type packedA struct {
	m, groups int
	data      []uint8
	scale     []float32 // int8: per row, padded rows 0
	zero      []int32   // int8: per row
}

var packedAPool sync.Pool

func getPackedA(m, groups int) *packedA {
	mpad := (m + lowMR - 1) / lowMR * lowMR
	p, _ := packedAPool.Get().(*packedA)
	if p == nil {
		p = &packedA{}
	}
	p.m, p.groups = m, groups
	n := mpad * groups * 4
	if cap(p.data) < n {
		p.data = make([]uint8, n)
	}
	p.data = p.data[:n]
	if cap(p.scale) < mpad {
		p.scale, p.zero = make([]float32, mpad), make([]int32, mpad)
	}
	p.scale, p.zero = p.scale[:mpad], p.zero[:mpad]
	return p
}

// lda is the distance in bytes between two rows.
func (p *packedA) lda() int { return p.groups * 4 }

// panelBytes is the size of lowMR rows.
func (p *packedA) panelBytes() int { return lowMR * p.groups * 4 }

// packRows fills pa's rows from m rows of input in parallel, by panels of
// lowMR rows: fill(i, row) writes row i (its bytes, up to pa.lda()); the
// rows past m, up to a whole panel, are zeros.
func packRows(pa *packedA, m int, fill func(i int, row []uint8)) {
	ld := pa.lda()
	ParallelFor((m+lowMR-1)/lowMR, func(lo, hi int) {
		for i := lo * lowMR; i < hi*lowMR; i++ {
			row := pa.data[i*ld : (i+1)*ld]
			if i >= m {
				clear(row)
				continue
			}
			fill(i, row)
		}
	})
}

// quantizeA quantises the m rows of x (leading dimension lda, k columns)
// for the int8 kernels.
func quantizeA(m, k int, x []float32, lda int) *packedA {
	pa := getPackedA(m, int8Groups(k, int8Active.w7))
	vec := quantGo
	if int8Active.ref != "" {
		vec = quantVecs()[len(quantVecs())-1]
	}
	levels := int8Active.levels
	clear(pa.scale[m:])
	clear(pa.zero[m:])
	packRows(pa, m, func(i int, row []uint8) {
		clear(row[k:])
		pa.scale[i], pa.zero[i] = quantizeRowU8(row, x[i*lda:i*lda+k], vec, levels)
	})
	return pa
}

// bf16RoundAsm reports whether activations are rounded to bf16 in
// AVX-512: with an assembly bf16 kernel; the Go references run Go
// throughout.
func bf16RoundAsm() bool { return haveQuantizeAVX512 && bf16Active.ref != "" }

// roundA rounds the m rows of x to bf16 for the bf16 kernels.
func roundA(m, k int, x []float32, lda int) *packedA {
	pa := getPackedA(m, (k+1)/2)
	asm := bf16RoundAsm()
	packRows(pa, m, func(i int, row []uint8) {
		clear(row[2*k:])
		// The bytes of a row are its bf16 values, little-endian.
		toBF16Row(unsafe.Slice((*uint16)(unsafe.Pointer(&row[0])), len(row)/2), x[i*lda:i*lda+k], asm)
	})
	return pa
}
