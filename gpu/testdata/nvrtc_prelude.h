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
// CUDA's vector types (vector_types.h), which NVRTC declares too, and the
// warp shuffles.
struct __attribute__((aligned(8))) uint2 {
	unsigned int x, y;
};
struct __attribute__((aligned(16))) uint4 {
	unsigned int x, y, z, w;
};
struct __attribute__((aligned(16))) float4 {
	float x, y, z, w;
};
// clang's __clang_cuda_intrinsics.h needs CUDA's headers for sm_70 and
// later: the shuffles the kernels call, on clang's built-ins, as there
// (full warps).
static __device__ __forceinline__ int __shfl_down_sync(unsigned mask, int v, unsigned delta) {
	return __nvvm_shfl_sync_down_i32(mask, v, delta, 0);
}
static __device__ __forceinline__ int __shfl_sync(unsigned mask, int v, int lane) {
	return __nvvm_shfl_sync_idx_i32(mask, v, lane, 0x1f);
}
static __device__ __forceinline__ float __shfl_down_sync(unsigned mask, float v, unsigned delta) {
	return __nvvm_shfl_sync_down_f32(mask, v, delta, 0);
}
static __device__ __forceinline__ float __shfl_sync(unsigned mask, float v, int lane) {
	return __nvvm_shfl_sync_idx_f32(mask, v, lane, 0x1f);
}
static __device__ __forceinline__ double __shfl_down_sync(unsigned mask, double v, unsigned delta) {
	long long x = __double_as_longlong(v);
	int lo = __shfl_down_sync(mask, (int)x, delta), hi = __shfl_down_sync(mask, (int)(x >> 32), delta);
	return __longlong_as_double((long long)hi << 32 | (unsigned)lo);
}
static __device__ __forceinline__ double __shfl_sync(unsigned mask, double v, int lane) {
	long long x = __double_as_longlong(v);
	int lo = __shfl_sync(mask, (int)x, lane), hi = __shfl_sync(mask, (int)(x >> 32), lane);
	return __longlong_as_double((long long)hi << 32 | (unsigned)lo);
}
