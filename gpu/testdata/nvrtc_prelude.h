// nvrtc_prelude.h lets clang compile package gpu's CUDA C as CUDA device
// code without a CUDA installation (clang++ -x cuda --cuda-device-only
// -nocudainc -nocudalib -include nvrtc_prelude.h), for
// TestKernelsCompileAsCUDA. NVRTC declares CUDA's keywords, built-in
// variables and device math functions without any header; clang's own CUDA
// headers declare the same, given the few definitions below that CUDA's
// headers would otherwise supply. Math functions stay calls to libdevice's
// __nv_* (not linked: the PTX is only checked, never run).
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define CUDA_VERSION 12000
typedef __SIZE_TYPE__ size_t;
#define INT_MAX __INT_MAX__
#define INT_MIN (-__INT_MAX__ - 1)
#define HUGE_VAL __builtin_huge_val()
#define HUGE_VALF __builtin_huge_valf()
#include "__clang_cuda_builtin_vars.h"
#include "__clang_cuda_libdevice_declares.h"
#undef __DEVICE__
#define __DEVICE__ static __device__ __forceinline__
#include "__clang_cuda_device_functions.h"
#undef __DEVICE__
#include "__clang_cuda_math.h"
