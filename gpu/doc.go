// Package gpu runs the model's kernels on an NVIDIA GPU: Open returns a
// kernel.Device whose buffers are device memory, whose products are cuBLAS
// SGEMMs and whose row-wise kernels (LayerNorm, softmax, QuickGELU, GELU,
// their backward passes, residual add, bias rows) are CUDA C compiled at run
// time by NVRTC for the GPU at hand. autograd.SetDevice puts it under the model (see there for
// what runs on it).
//
// The package is built with CUDA only under the build tag cuda, with cgo:
//
//	CGO_ENABLED=1 go build -tags cuda ./cmd/subtta
//
// Otherwise, the default, it is pure Go and Available reports that the
// binary was built without the tag. With the tag, the CUDA libraries are
// not linked but opened at run time with dlopen: libcudart and libcublas
// (sonames .so.13, .so.12, then CUDA 11's, tried in that order), libnvrtc
// and the driver's libcuda.so.1; libcusolver (.so.12, .so.11) is opened at
// the first SymEig, and without it only SymEig fails. The few C signatures used are declared in
// the package, so it builds where CUDA is not installed (only -ldl is
// linked) and the binary runs on a machine that has it; without it,
// Available names the library it did not find.
//
// Matrices are row-major, as in package kernel; cuBLAS is column-major, so
// C = op(A)·op(B) runs as Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped,
// which copies nothing. Products are float32 as on the CPU unless
// Options.Precision asks for tf32, bf16 or fp16 tensor cores (sums in
// float32). Work goes to one CUDA stream of the device's own; uploads go
// through pinned host memory and do not wait for the GPU, downloads wait
// for everything queued before them. The device is a kernel.Prefetcher:
// UploadAhead copies the next batch's images up on a second stream, beside
// the current batch's work, and Await orders the passes that read it after
// that copy. It is a kernel.Grapher: Capture records the work a function
// queues as a CUDA Graph (stream capture), which autograd.TowerGraphs
// replays for the vision tower's repeated passes without gradients. Every
// failed CUDA, cuBLAS, NVRTC or driver call is an *Error naming the call
// and its status.
package gpu
