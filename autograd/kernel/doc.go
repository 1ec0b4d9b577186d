// Package kernel holds the float32 compute kernels the model runs on: SGEMM
// in the layouts a transformer needs (A·B, A·Bᵀ, Aᵀ·B, and against a weight
// packed once), batched small GEMMs for attention, and fused row-wise kernels
// (LayerNorm, softmax, GELU variants, add, scale) with their backward passes.
//
// The GEMM micro-kernels are Go assembly for AVX-512 and AVX2+FMA, chosen at
// run time from the CPU's features; a pure-Go reference runs on other CPUs
// and in tests. The AVX2 kernel prefetches into L2 the packed B panel that
// follows the one it sweeps, which the driver sweeps next: at the model's
// shapes the first tile of each panel otherwise waits for B from L3 or
// memory (docs/performance.md, "AVX2 kernels on an AVX-512 EPYC"). All matrices are row-major with an explicit leading dimension
// (the distance in elements between the starts of two rows).
//
// Reduced precision for passes without gradients: GemmInt8 (weights
// quantised to s8 per output channel by QuantizeInt8, activations to u8 per
// row with a zero point, int32 sums; AMX, AVX512-VNNI, AVX-VNNI or AVX2)
// and GemmBF16 (bfloat16 operands, float32 sums; AMX or AVX512_BF16), each
// kernel with a Go reference of its instruction's arithmetic that it
// matches bit for bit (LowReference). GemmBF16Act and GemmBF16Rows run an
// MLP's two layers with the activation fused into the first. Select
// decides how a Precision runs on this CPU, once: its kernel and its
// arithmetic (Choice), or an error when the CPU has none (no fallback to
// fp32). The files follow the fp32 path's split: lowprec.go (precisions
// and the choice of kernel), lowprec_pack.go, lowprec_gemm.go,
// lowprec_driver.go and lowprec_ref.go (the Go references).
//
// To run an AVX-512 CPU's tests and benchmarks on the AVX2 paths (as on Zen
// 2/3 or Haswell), start the program with
// GODEBUG=cpu.avx512f=off,cpu.avxvnni=off: golang.org/x/sys/cpu, which
// this package consults once at start-up, then reports neither feature, and
// every choice (GEMM micro-kernel, int8 kernel, the activations'
// quantisation loops; Kernels and CheckPrecision say which) is the one an
// AVX2 CPU without VNNI gets. The runtime's own parser warns that it does
// not know avxvnni; the setting takes effect all the same. Give it to the
// test binary only (go test -exec 'env GODEBUG=...'), not to the go
// command: the compiler would print the warning too, and the build cache
// would replay it with the packages' output in later builds.
//
// Device is the seam to memory and kernels apart from the CPU's (a GPU's,
// in package gpu); Host implements it with this package's functions. Half
// is a Device whose products also take 16-bit operands (package gpu in
// bf16 or fp16).
//
// The package never imports the autodiff tape: it works on plain slices.
package kernel
