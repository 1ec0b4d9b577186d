package kernel

// HalfFormat is the format of a Half device's 16-bit operands.
type HalfFormat int

const (
	HalfNone HalfFormat = iota // float32 operands
	HalfBF16                   // bfloat16: 8 bits of mantissa, float32's range
	HalfFP16                   // IEEE half: 11 bits of mantissa, up to 65504
)

// HalfLen is the length of a Buf holding n 16-bit values: two to a
// float32 slot. A 16-bit buffer is allocated with Alloc(HalfLen(n)).
func HalfLen(n int) int { return (n + 1) / 2 }

// Half is a Device whose products can take 16-bit operands, so that a
// forward pass keeps its frozen weights in 16 bits on the device and the
// kernels that produce a product's input write it in 16 bits (half the
// memory traffic of float32, and the tensor cores' own format). Sums stay
// float32, as do LayerNorm's and softmax's statistics and everything kept
// for backward. Package gpu's device implements it; with --precision bf16 or
// fp16 its HalfFormat is that format, otherwise HalfNone. Host does not:
// the CPU's 16-bit products are GemmBF16's.
//
// Each method rounds to nearest, ties to even, subnormals kept; a 16-bit
// buffer holds n values in HalfLen(n) slots and is read by nothing but
// these methods.
type Half interface {
	Device
	// HalfFormat is the format of the 16-bit operands, or HalfNone when
	// the products take float32 operands.
	HalfFormat() HalfFormat
	// ToHalf rounds x's n values into the 16-bit y: a weight, once.
	ToHalf(y, x Buf, n int) error
	// GemmHalf is Gemm with 16-bit a and b, a float32 c and float32 sums.
	GemmHalf(transA, transB bool, m, n, k int, alpha float32, a Buf, lda int, b Buf, ldb int, beta float32, c Buf, ldc int) error
	// LayerNormHalf is LayerNorm without statistics, its output rounded
	// into the 16-bit y16; with res set it writes res = x + bias in
	// float32 as LayerNormResidual does (res nil: bias unread).
	LayerNormHalf(y16, x Buf, rows, cols int, gamma, beta Buf, eps float64, res, bias Buf) error
	// MergeHeadsHalf is MergeHeads with groups = 1 into the 16-bit x16.
	MergeHeadsHalf(x16, y Buf, batch, tokens, heads, headDim int) error
	// SplitHeadsHalf16 is SplitHeadsBias from and into 16 bits: attention's
	// q|k|v (its product written in 16 bits in x16) split into heads with
	// in_proj's bias, added in float32 to the values widened, as the
	// operands of its products in y16. y16 must not overlap x16.
	SplitHeadsHalf16(y16, x16, bias Buf, batch, tokens, groups, heads, headDim int) error
	// GemmBatchedHalf is GemmBatched with 16-bit a and b, a float32 c and
	// float32 sums: attention's S = Q·Kᵀ and P·V over batch×heads. The
	// strides count 16-bit values for a and b, float32 values for c.
	GemmBatchedHalf(transA, transB bool, batch, m, n, k int, alpha float32, a Buf, lda, strideA int, b Buf, ldb, strideB int, beta float32, c Buf, ldc, strideC int) error
	// SoftmaxHalf is Softmax with its output rounded into the 16-bit y16:
	// attention's P, from float32 scores, the row's maximum and sum in
	// float32 (and double) as Softmax's.
	SoftmaxHalf(y16, x Buf, rows, cols int, scale float32, causal bool) error
	// BiasActivationHalf is BiasActivation keeping nothing, its output
	// rounded into the 16-bit y16.
	BiasActivationHalf(y16, x Buf, rows, cols int, bias Buf, act Activation) error
	// GemmHalf16 is GemmHalf with a 16-bit c: the float32 sums, alpha and
	// beta applied, rounded to 16 bits (the MLP's pre-activation).
	GemmHalf16(transA, transB bool, m, n, k int, alpha float32, a Buf, lda int, b Buf, ldb int, beta float32, c Buf, ldc int) error
	// BiasActivationHalf16 is BiasActivationHalf reading a 16-bit x16,
	// the bias added in float32 to its values widened. y16 may be x16.
	BiasActivationHalf16(y16, x16 Buf, rows, cols int, bias Buf, act Activation) error
}

// HalfOf returns d as a Half device and its format, or nil and HalfNone
// when its products take float32 operands.
func HalfOf(d Device) (Half, HalfFormat) {
	if h, ok := d.(Half); ok {
		if f := h.HalfFormat(); f != HalfNone {
			return h, f
		}
	}
	return nil, HalfNone
}
