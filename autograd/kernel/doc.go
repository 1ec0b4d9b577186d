// Package kernel holds the float32 compute kernels the model runs on: SGEMM
// in the layouts a transformer needs (A·B, A·Bᵀ, Aᵀ·B, and against a weight
// packed once), batched small GEMMs for attention, and fused row-wise kernels
// (LayerNorm, softmax, GELU variants, add, scale) with their backward passes.
//
// The GEMM micro-kernels are Go assembly for AVX-512 and AVX2+FMA, chosen at
// run time from the CPU's features; a pure-Go reference runs on other CPUs
// and in tests. All matrices are row-major with an explicit leading dimension
// (the distance in elements between the starts of two rows).
//
// Reduced precision for passes without gradients: GemmInt8 (weights
// quantised to s8 per output channel by QuantizeInt8, activations to u8 per
// row with a zero point, int32 sums; AVX512-VNNI) and GemmBF16 (bfloat16
// operands, float32 sums; AVX512_BF16), each with a Go reference of the
// same arithmetic that the assembly matches bit for bit. CheckPrecision
// says whether the CPU has a kernel for a Precision.
//
// Device is the seam to memory and kernels apart from the CPU's (a GPU's,
// in package gpu); Host implements it with this package's functions.
//
// The package never imports the autodiff tape: it works on plain slices.
package kernel
