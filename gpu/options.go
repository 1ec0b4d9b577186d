package gpu

import "fmt"

// Options configure Open.
type Options struct {
	// Ordinal is the CUDA device number: 0 for the first GPU.
	Ordinal int
	// TF32 is Precision TF32, kept for callers that set it alone.
	TF32 bool
	// Precision is the arithmetic of the products (every GEMM of the
	// device): FP32, the default, float32 throughout as on the CPU; or
	// tensor cores on operands rounded to TF32, BF16 or FP16, accumulating
	// in float32. The row-wise kernels (LayerNorm, softmax, activations)
	// and the values kept in memory stay float32 in every precision.
	Precision Precision
	// NoGraphs turns the recording of passes off (kernel.Grapher: Capture
	// then fails with kernel.ErrGraphsOff and every pass runs op by op).
	NoGraphs bool
}

// Precision is the arithmetic of a device's products.
type Precision int

const (
	// FP32: float32 products (CUBLAS_COMPUTE_32F, TF32 off).
	FP32 Precision = iota
	// TF32: operands rounded to TF32 (10 bits of mantissa) on tensor cores
	// (CUBLAS_TF32_TENSOR_OP_MATH); errors near 1e-3 relative.
	TF32
	// BF16: operands rounded to bfloat16 (7 bits) on tensor cores, sums in
	// float32 (CUBLAS_COMPUTE_32F_FAST_16BF); errors near 1e-2 relative.
	BF16
	// FP16: operands rounded to IEEE half (10 bits, range ±65,504) on
	// tensor cores, sums in float32 (CUBLAS_COMPUTE_32F_FAST_16F).
	FP16
)

var precisionNames = []string{"fp32", "tf32", "bf16", "fp16"}

func (p Precision) String() string {
	if p < 0 || int(p) >= len(precisionNames) {
		return fmt.Sprintf("Precision(%d)", int(p))
	}
	return precisionNames[p]
}

// ParsePrecision returns the Precision named fp32, tf32, bf16 or fp16.
func ParsePrecision(name string) (Precision, error) {
	for i, n := range precisionNames {
		if n == name {
			return Precision(i), nil
		}
	}
	return FP32, fmt.Errorf("gpu: precision %q: want fp32, tf32, bf16 or fp16", name)
}

// precision is the Precision o asks for, TF32 included.
func (o Options) precision() (Precision, error) {
	p := o.Precision
	if p < FP32 || p > FP16 {
		return p, fmt.Errorf("gpu: unknown %v", p)
	}
	if o.TF32 {
		if p != FP32 && p != TF32 {
			return p, fmt.Errorf("gpu: Options.TF32 with precision %v", p)
		}
		p = TF32
	}
	return p, nil
}

// PrecisionOf returns the Precision of the products of d, a device from
// Open; FP32 for any other device, and for nil.
func PrecisionOf(d any) Precision {
	if p, ok := d.(interface{ precision() Precision }); ok {
		return p.precision()
	}
	return FP32
}
