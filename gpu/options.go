package gpu

// Options configure Open.
type Options struct {
	// Ordinal is the CUDA device number: 0 for the first GPU.
	Ordinal int
	// TF32 lets cuBLAS round the operands of float32 products to TF32 on
	// tensor cores (CUBLAS_TF32_TENSOR_OP_MATH): several times faster, with
	// errors near 1e-3 relative. Off, products are float32 throughout
	// (CUBLAS_DEFAULT_MATH), as on the CPU.
	TF32 bool
}
