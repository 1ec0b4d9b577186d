package kernel

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Precision is the arithmetic of a forward pass's linear layers.
type Precision int

const (
	// FP32 is float32 throughout: the default, and the only precision of
	// passes that record gradients.
	FP32 Precision = iota
	// BF16 rounds weights and activations to bfloat16 (to nearest, ties to
	// even) and accumulates their products in float32.
	BF16
	// Int8 quantises weights to signed 8 bits per output channel
	// (symmetric) and activations to unsigned 8 bits per row (asymmetric,
	// with a zero point), accumulates in int32 and dequantises to float32.
	Int8
)

// ErrPrecision is returned for an unknown precision's name.
var ErrPrecision = errors.New("kernel: unknown precision")

// ErrPrecisionUnsupported is returned for a precision this CPU has no
// kernel for.
var ErrPrecisionUnsupported = errors.New("kernel: precision not supported on this CPU")

// ErrNonFinite is returned when a weight to be quantised holds NaN or ±Inf.
var ErrNonFinite = errors.New("kernel: weight is not finite")

// String is the precision's name: "fp32", "bf16" or "int8".
func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case BF16:
		return "bf16"
	case Int8:
		return "int8"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// ParsePrecision returns the precision named s ("fp32", "bf16", "int8").
func ParsePrecision(s string) (Precision, error) {
	for _, p := range []Precision{FP32, BF16, Int8} {
		if s == p.String() {
			return p, nil
		}
	}
	return FP32, fmt.Errorf("%w %q (want fp32, bf16 or int8)", ErrPrecision, s)
}

// CheckPrecision returns nil when this CPU has an assembly kernel for p
// (fp32 always), else an error wrapping ErrPrecisionUnsupported that names
// the instructions missing. The portable Go kernels of the same arithmetic
// exist for tests, not as a path: they are far slower than fp32.
func CheckPrecision(p Precision) error {
	switch p {
	case FP32:
		return nil
	case Int8:
		if int8Active.ref == "" {
			return fmt.Errorf("%w: int8 needs AVX2 (VPMADDUBSW) or AVX512-VNNI (VPDPBUSD)", ErrPrecisionUnsupported)
		}
	case BF16:
		if bf16Active.ref == "" {
			return fmt.Errorf("%w: bf16 needs AVX512_BF16 (VDPBF16PS) or AMX-BF16 (TDPBF16PS)", ErrPrecisionUnsupported)
		}
	default:
		return fmt.Errorf("%w %d", ErrPrecision, int(p))
	}
	return nil
}

// lowNR is the panel width of the reduced-precision kernels: two registers
// of 16 32-bit lanes.
const lowNR = 32

// lowKernel computes tiles mr×lowNR tiles of C, one below the other, from
// packed panels. Its arguments are in the operands the driver passes.
type lowKernel struct {
	name   string
	mr     int
	levels int32  // int8: the largest code of the activations (255, or 127)
	ref    string // an assembly kernel's Go reference, whose bits it gives; "" for a Go kernel
}

var (
	int8Active = bestInt8Kernel()
	bf16Active = bestBF16Kernel()
)

// Int8Kernels and BF16Kernels list the kernels this CPU can run for each
// precision, best first, then the Go references of the arithmetic: "go"
// (the last), and for bf16 also "go-amx" (see LowReference).
func Int8Kernels() []string { return lowNames(int8Available()) }

// BF16Kernels: see Int8Kernels.
func BF16Kernels() []string { return lowNames(bf16Available()) }

func lowNames(ks []lowKernel) []string {
	var names []string
	for _, k := range ks {
		names = append(names, k.name)
	}
	return names
}

// LowReference names the Go kernel whose results the kernel name of prec
// (Int8 or BF16) gives bit for bit: "go" for every int8 kernel and for
// bf16's avx512bf16, "go-amx" for bf16's amx (TDPBF16PS adds the products
// in another order); "" for a Go kernel or an unknown name.
func LowReference(prec Precision, name string) string {
	ks := int8Available()
	if prec == BF16 {
		ks = bf16Available()
	}
	for _, k := range ks {
		if k.name == name {
			return k.ref
		}
	}
	return ""
}

// LowArithmetic says how the arithmetic of the kernel that runs prec now
// differs from that of the AVX512-VNNI and AVX512_BF16 kernels, or "" when
// it does not: "7-bit activations" for the AVX2 int8 kernel, "TDPBF16PS
// sums" for the AMX bf16 kernel (LowReference). Results then differ in
// their last bits, or more, so records of results (eval's model identity,
// embed's settings) name it; "" keeps the records made before it existed.
func LowArithmetic(prec Precision) string {
	switch prec {
	case Int8:
		if int8Active.levels != 255 {
			return "7-bit activations"
		}
	case BF16:
		ref := bf16Active.ref
		if ref == "" { // a Go kernel: its own reference
			ref = bf16Active.name
		}
		if ref == goAMXBF16Kernel.name {
			return "TDPBF16PS sums"
		}
	}
	return ""
}

// LowKernel names the kernel that runs prec (Int8 or BF16) now, "" for
// FP32.
func LowKernel(prec Precision) string {
	switch prec {
	case Int8:
		return int8Active.name
	case BF16:
		return bf16Active.name
	}
	return ""
}

// SetInt8Kernel selects the int8 kernel by name (for tests and benchmarks)
// and returns the previous one's name. Weights packed before stay valid:
// every int8 kernel reads the same layout.
func SetInt8Kernel(name string) (string, error) { return setLow(&int8Active, int8Available(), name) }

// SetBF16Kernel selects the bf16 kernel by name; see SetInt8Kernel.
func SetBF16Kernel(name string) (string, error) { return setLow(&bf16Active, bf16Available(), name) }

func setLow(active *lowKernel, ks []lowKernel, name string) (string, error) {
	for _, k := range ks {
		if k.name == name {
			prev := active.name
			*active = k
			return prev, nil
		}
	}
	return active.name, fmt.Errorf("kernel: reduced-precision kernel %q not available on this CPU (have %v)", name, lowNames(ks))
}

func bestInt8Kernel() lowKernel { return int8Available()[0] }
func bestBF16Kernel() lowKernel { return bf16Available()[0] }

// lowMR is the height of the driver's tiles: one call of a 12-row kernel
// (AVX-512, and the Go references), or four of the AVX2 kernel's 3 rows;
// activations are padded to a multiple of it.
const lowMR = 12

var (
	goInt8Kernel    = lowKernel{name: "go", mr: lowMR, levels: 255}
	goBF16Kernel    = lowKernel{name: "go", mr: lowMR}
	goAMXBF16Kernel = lowKernel{name: "go-amx", mr: lowMR}
)

// Int8Weight is a weight [n, k] (a linear layer's [out, in]) quantised to
// signed 8 bits per output channel, w[j, p] ≈ Scale[j]·q[j, p] with
// Scale[j] = max_p |w[j, p]|/127 and q rounded to nearest (ties to even),
// packed for the int8 kernels: per panel of 32 channels, for each group of
// 4 consecutive inputs, each channel's 4 values (k padded with zeros).
type Int8Weight struct {
	N, K   int
	groups int       // k rounded up to a multiple of 4, over 4
	data   []int8    // panels of groups·32·4 values
	colSum []int32   // Σ_p q[j, p], padded to a multiple of 32
	scale  []float32 // Scale[j], padded with zeros
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
	pa := getPackedA(m, (k+3)/4)
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
	b := padBias(bias, q.N)
	lowDriver(m, q.N, func(t0, tiles, panel int, c []float32, ldc int) {
		at := pa.data[t0*pa.panelBytes() : (t0+tiles)*pa.panelBytes()]
		bp := q.data[panel*q.groups*lowNR*4 : (panel+1)*q.groups*lowNR*4]
		j0 := panel * lowNR
		int8Tile(kern, q.groups, at, pa.lda(), bp, c, ldc, pa.scale[t0*lowMR:], pa.zero[t0*lowMR:], q.colSum[j0:j0+lowNR], q.scale[j0:j0+lowNR], (*b)[j0:j0+lowNR], tiles)
	}, c, ldc, nil)
	putPad(b)
	packedAPool.Put(pa)
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

// Activation is an elementwise function GemmBF16Act applies to a product.
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
	b := padBias(bias, w.N)
	lowDriver(pa.m, w.N, func(t0, tiles, panel int, c []float32, ldc int) {
		at := pa.data[t0*pa.panelBytes() : (t0+tiles)*pa.panelBytes()]
		bp := w.data[panel*w.groups*lowNR*2 : (panel+1)*w.groups*lowNR*2]
		j0 := panel * lowNR
		bf16Tile(kern, w.groups, at, pa.lda(), bp, c, ldc, (*b)[j0:j0+lowNR], tiles)
	}, c, ldc, post)
	putPad(b)
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

// lowTileRun computes tiles lowMR-row tiles of C from tile t0 down, for
// column panel panel, into c (leading dimension ldc, lowNR columns wide).
type lowTileRun func(t0, tiles, panel int, c []float32, ldc int)

// lowPost receives the products of row tiles t0 to t1 − 1 of column panel
// panel in buf, rows lowNR values apart (padding rows and columns
// included), for as long as it runs.
type lowPost func(t0, t1, panel int, buf []float32)

// lowDriver runs the tiles of an m×n product over Threads() goroutines:
// units of a block of row tiles and a range of column panels, handed out
// one at a time as gemmPacked does. Full tiles are written in place; a last
// partial row tile or column panel goes through scratch. With post set,
// C is not written: every block of tiles goes through scratch to post.
func lowDriver(m, n int, run lowTileRun, c []float32, ldc int, post lowPost) {
	tiles := (m + lowMR - 1) / lowMR
	full := m / lowMR
	panels := (n + lowNR - 1) / lowNR
	// Units small enough for every thread to get about eight: with the
	// AMX kernel a unit takes tens of microseconds, and the last ones to
	// finish leave the other threads idle.
	t := Threads()
	blockTiles := max(1, min(12, (tiles+4*t-1)/(4*t))) // at most 96 rows: an A block of 96·k bytes stays in L2
	blocks := (tiles + blockTiles - 1) / blockTiles
	want := (8*t + blocks - 1) / blocks // column ranges per block
	perRange := max(1, min(8, panels/want))
	ranges := (panels + perRange - 1) / perRange
	units := blocks * ranges
	var next atomic.Int64
	work := func(_, _, _ int) {
		size := lowMR * lowNR // a partial tile
		if post != nil {
			size *= blockTiles // a whole block of tiles
		}
		tmp := getScratch(size)
		defer putScratch(tmp)
		for {
			u := int(next.Add(1)) - 1
			if u >= units {
				return
			}
			b, r := u/ranges, u%ranges
			t0, t1 := b*blockTiles, min((b+1)*blockTiles, tiles)
			for q := r * perRange; q < min((r+1)*perRange, panels); q++ {
				if post != nil {
					run(t0, t1-t0, q, *tmp, lowNR)
					post(t0, t1, q, *tmp)
					continue
				}
				j0 := q * lowNR
				cols := min(lowNR, n-j0)
				inPlace := t0
				if cols == lowNR && full > t0 {
					inPlace = min(full, t1)
					run(t0, inPlace-t0, q, c[t0*lowMR*ldc+j0:], ldc)
				}
				for tt := inPlace; tt < t1; tt++ {
					run(tt, 1, q, *tmp, lowNR)
					rows := min(lowMR, m-tt*lowMR)
					for i := 0; i < rows; i++ {
						copy(c[(tt*lowMR+i)*ldc+j0:(tt*lowMR+i)*ldc+j0+cols], (*tmp)[i*lowNR:i*lowNR+cols])
					}
				}
			}
		}
	}
	if t == 1 || units == 1 {
		work(0, 0, 0)
		return
	}
	splitRange(t, 1, t, work)
}

// int8Tile runs the int8 kernel kern on tiles tiles, checking the bounds
// the assembly relies on.
func int8Tile(kern lowKernel, groups int, a []uint8, lda int, b []int8, c []float32, ldc int, scale []float32, zero []int32, colSum []int32, colScale, bias []float32, tiles int) {
	_ = a[(tiles*lowMR-1)*lda+groups*4-1]
	_ = b[groups*lowNR*4-1]
	_ = c[(tiles*lowMR-1)*ldc+lowNR-1]
	_ = scale[tiles*lowMR-1]
	_ = zero[tiles*lowMR-1]
	_, _, _ = colSum[lowNR-1], colScale[lowNR-1], bias[lowNR-1]
	if kern.name == "go" {
		goInt8Tile(groups, a, lda, b, c, ldc, scale, zero, colSum, colScale, bias, tiles)
		return
	}
	int8TileAsm(kern, groups, a, lda, b, c, ldc, scale, zero, colSum, colScale, bias, tiles)
}

// bf16Tile runs the bf16 kernel kern on tiles tiles (bounds checked).
func bf16Tile(kern lowKernel, groups int, a []uint8, lda int, b []uint16, c []float32, ldc int, bias []float32, tiles int) {
	_ = a[(tiles*lowMR-1)*lda+groups*4-1]
	_ = b[groups*lowNR*2-1]
	_ = c[(tiles*lowMR-1)*ldc+lowNR-1]
	_ = bias[lowNR-1]
	switch kern.name {
	case goBF16Kernel.name:
		goBF16Tile(groups, a, lda, b, c, ldc, bias, tiles)
		return
	case goAMXBF16Kernel.name:
		goAMXBF16Tile(groups, a, lda, b, c, ldc, bias, tiles)
		return
	}
	bf16TileAsm(kern, groups, a, lda, b, c, ldc, bias, tiles)
}

// goInt8Tile is the reference of the int8 kernels: the same integer sums
// (exact, so in any order) and the same float32 epilogue,
// float32(acc − zero·colSum)·(scale·colScale) + bias, each operation rounded.
func goInt8Tile(groups int, a []uint8, lda int, b []int8, c []float32, ldc int, scale []float32, zero []int32, colSum []int32, colScale, bias []float32, tiles int) {
	for t := 0; t < tiles; t++ {
		for r := 0; r < lowMR; r++ {
			var acc [lowNR]int32
			ar := a[(t*lowMR+r)*lda:]
			for g := 0; g < groups; g++ {
				av := ar[g*4 : g*4+4]
				bg := b[g*lowNR*4 : (g+1)*lowNR*4]
				for j := 0; j < lowNR; j++ {
					bv := bg[j*4 : j*4+4]
					acc[j] += int32(av[0])*int32(bv[0]) + int32(av[1])*int32(bv[1]) + int32(av[2])*int32(bv[2]) + int32(av[3])*int32(bv[3])
				}
			}
			i := t*lowMR + r
			cr := c[i*ldc : i*ldc+lowNR]
			for j := range cr {
				f := float32(acc[j] - zero[i]*colSum[j])
				s := float32(colScale[j] * scale[i])
				cr[j] = float32(f*s) + bias[j]
			}
		}
	}
}

// goBF16Tile is the reference of the bf16 kernels: per pair of k, the odd
// product then the even one added to the float32 sum, each addition rounded
// to nearest and a subnormal result flushed to zero, as VDPBF16PS does (the
// products of two bf16 values are exact in float32); then the bias.
func goBF16Tile(groups int, a []uint8, lda int, b []uint16, c []float32, ldc int, bias []float32, tiles int) {
	for t := 0; t < tiles; t++ {
		for r := 0; r < lowMR; r++ {
			var acc [lowNR]float32
			ar := a[(t*lowMR+r)*lda:]
			for g := 0; g < groups; g++ {
				o := g * 4
				a0 := FromBF16(uint16(ar[o]) | uint16(ar[o+1])<<8)
				a1 := FromBF16(uint16(ar[o+2]) | uint16(ar[o+3])<<8)
				bg := b[g*lowNR*2 : (g+1)*lowNR*2]
				for j := 0; j < lowNR; j++ {
					s := flushSubnormal(acc[j] + float32(a1*FromBF16(bg[2*j+1])))
					acc[j] = flushSubnormal(s + float32(a0*FromBF16(bg[2*j])))
				}
			}
			i := t*lowMR + r
			cr := c[i*ldc : i*ldc+lowNR]
			for j := range cr {
				cr[j] = acc[j] + bias[j]
			}
		}
	}
}

// goAMXBF16Tile is the reference of the AMX bf16 kernel, the arithmetic
// of TDPBF16PS as measured on an Intel Xeon of the Sapphire Rapids family
// (it differs from VDPBF16PS's, and the SDM's pseudo-code does not pin it):
// C starts from the bias (flushed if subnormal) and takes one instruction
// per 16 pairs of k. An instruction keeps two float32 sums, of the even
// products and of the odd ones, each product added exactly and the sum
// rounded to nearest (ties to even) and flushed to zero if subnormal, in
// the order of k; then C += (even + odd), each of the two additions
// rounded and flushed. (Measured over 853,248 results of random, wide-range,
// subnormal and constructed inputs, every one equal.)
func goAMXBF16Tile(groups int, a []uint8, lda int, b []uint16, c []float32, ldc int, bias []float32, tiles int) {
	for i := 0; i < tiles*lowMR; i++ {
		for j, v := range bias[:lowNR] {
			c[i*ldc+j] = flushSubnormal(v)
		}
	}
	addAMXBF16Pairs(0, groups, a, lda, b, c, ldc, tiles*lowMR)
}

// addAMXBF16Pairs adds the products of pairs g0 to g1 − 1 (g0 a multiple
// of 16) to rows of C (lowNR wide) as TDPBF16PS does, one instruction per
// 16 pairs and the last one short (as if padded with zeros): the AMX
// kernel's tail, and with g0 = 0 its reference.
func addAMXBF16Pairs(g0, g1 int, a []uint8, lda int, b []uint16, c []float32, ldc, rows int) {
	for i := 0; i < rows; i++ {
		ar := a[i*lda:]
		cr := c[i*ldc : i*ldc+lowNR]
		for g := g0; g < g1; g += 16 {
			for j := range cr {
				var even, odd float32
				for h := g; h < min(g+16, g1); h++ {
					o := h * 4
					a0 := float64(FromBF16(uint16(ar[o]) | uint16(ar[o+1])<<8))
					a1 := float64(FromBF16(uint16(ar[o+2]) | uint16(ar[o+3])<<8))
					bh := b[(h*lowNR+j)*2:]
					// The float64 product of two bf16 values is exact, and
					// so is its sum with a float32 whenever the rounding to
					// float32 could depend on it: one rounding, as the
					// instruction's.
					even = flushSubnormal(float32(float64(even) + a0*float64(FromBF16(bh[0]))))
					odd = flushSubnormal(float32(float64(odd) + a1*float64(FromBF16(bh[1]))))
				}
				cr[j] = flushSubnormal(cr[j] + flushSubnormal(even+odd))
			}
		}
	}
}

// flushSubnormal returns x, or a zero of its sign if x is subnormal.
func flushSubnormal(x float32) float32 {
	if u := math.Float32bits(x); u&0x7f800000 == 0 {
		return math.Float32frombits(u & 0x80000000)
	}
	return x
}
