// fakecuda_emu.h lets the CUDA C of package gpu's row-wise kernels compile
// as C++ and run on the CPU, for the fake NVRTC of fakecuda.c. A launch runs
// the grid's blocks one after another; a block's threads are fibers on one
// OS thread, run in turn from one __syncthreads to the next, so that block
// reductions through __shared__ memory work as on a GPU. A block where some
// threads finish while others wait at a barrier is reported as an error.
// Each thread has a 64 KB stack.
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <cstddef>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __forceinline__ inline
// One block runs at a time, so a function's static array is its block's
// shared memory.
#define __shared__ static

// CUDA's vector types that the kernels load and store whole.
struct alignas(8) uint2 {
	unsigned x, y;
};
struct alignas(16) uint4 {
	unsigned x, y, z, w;
};
struct alignas(16) float4 {
	float x, y, z, w;
};

struct fake_dim3 {
	unsigned x, y, z;
};

// Not static: the compiler must assume __syncthreads changes them.
fake_dim3 threadIdx, blockIdx, gridDim, blockDim;

static inline unsigned __float_as_uint(float f) {
	unsigned u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float __int_as_float(int i) {
	float f;
	memcpy(&f, &i, sizeof f);
	return f;
}

// CUDA's round-to-nearest arithmetic, one rounding to float each: the
// pragma keeps the compiler from fusing a product and a sum, as the
// intrinsics keep NVRTC from it.
#pragma GCC optimize("fp-contract=off")
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }

enum { fake_ready, fake_waiting, fake_done };
enum { fake_stack = 64 << 10, fake_max_block = 1024 };

// A fiber is made once (makecontext) and then switched with _setjmp and
// _longjmp, which leave the signal mask alone: swapcontext's system call
// on every switch made the emulation several times slower.
static jmp_buf fake_main, fake_fiber[fake_max_block];
static ucontext_t fake_start[fake_max_block];
static bool fake_started[fake_max_block];
static int fake_state[fake_max_block];
static unsigned fake_current;
static void (*fake_entry)(void **);
static void **fake_params;
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

// fake_yield parks the current fiber in state and returns to the scheduler.
static void fake_yield(int state) {
	fake_state[fake_current] = state;
	if (_setjmp(fake_fiber[fake_current]) == 0) _longjmp(fake_main, 1);
}

extern "C" __attribute__((noinline)) void __syncthreads() { fake_yield(fake_waiting); }

// Warp shuffles, for kernels whose threads all call them together (as a
// warp's must on a GPU, and here the whole block's): the values pass
// through a block-wide slot between two barriers.
template <typename T>
static T fake_exchange(T v, unsigned from) {
	static T slot[fake_max_block];
	slot[threadIdx.x] = v;
	__syncthreads();
	T r = slot[from];
	__syncthreads();
	return r;
}

// __shfl_down_sync returns lane+k's v, or the caller's own past the warp.
template <typename T>
static T __shfl_down_sync(unsigned, T v, unsigned k) {
	unsigned t = threadIdx.x;
	return fake_exchange(v, t % 32 + k < 32 ? t + k : t);
}

// __shfl_sync returns lane src's v.
template <typename T>
static T __shfl_sync(unsigned, T v, int src) {
	unsigned t = threadIdx.x;
	return fake_exchange(v, t - t % 32 + (unsigned)src);
}

// fake_thread is a fiber's whole life: one run of the kernel per block.
static void fake_thread() {
	for (;;) {
		fake_entry(fake_params);
		fake_yield(fake_done);
	}
}

// fake_resume runs thread t until it waits at a barrier or finishes.
static __attribute__((noinline)) void fake_resume(unsigned t) {
	fake_current = t;
	threadIdx = {t, 0, 0};
	if (_setjmp(fake_main) != 0) return;
	if (fake_started[t]) _longjmp(fake_fiber[t], 1);
	fake_started[t] = true;
	getcontext(&fake_start[t]);
	fake_start[t].uc_stack.ss_sp = malloc(fake_stack);
	fake_start[t].uc_stack.ss_size = fake_stack;
	fake_start[t].uc_link = NULL;
	makecontext(&fake_start[t], fake_thread, 0);
	setcontext(&fake_start[t]);
}

// fake_run runs entry(params) as a grid of grid blocks of block threads. It
// returns nonzero, with the reason in err, when a block's threads do not all
// reach the same barriers.
extern "C" int fake_run(void (*entry)(void **), void **params, unsigned grid, unsigned block, char *err, int errlen) {
	if (block == 0 || block > fake_max_block) {
		snprintf(err, errlen, "block of %u threads", block);
		return 1;
	}
	pthread_mutex_lock(&fake_lock);
	fake_entry = entry;
	fake_params = params;
	gridDim = {grid, 1, 1};
	blockDim = {block, 1, 1};
	int rc = 0;
	for (unsigned b = 0; b < grid && rc == 0; b++) {
		blockIdx = {b, 0, 0};
		for (unsigned t = 0; t < block; t++) fake_state[t] = fake_ready;
		for (;;) {
			unsigned done = 0;
			for (unsigned t = 0; t < block; t++) {
				if (fake_state[t] != fake_done) fake_resume(t);
				done += fake_state[t] == fake_done;
			}
			if (done == block) break;
			if (done > 0) {
				snprintf(err, errlen, "block %u: %u of %u threads finished while the others wait at __syncthreads", b, done, block);
				rc = 1;
				break;
			}
			for (unsigned t = 0; t < block; t++) fake_state[t] = fake_ready;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

// fake_call calls kernel f with the arguments params points to, as
// cuLaunchKernel passes them.
template <typename... A, std::size_t... I>
static void fake_call_(void (*f)(A...), void **p, std::index_sequence<I...>) {
	f(*static_cast<std::remove_reference_t<A> *>(p[I])...);
}

template <typename... A>
static void fake_call(void (*f)(A...), void **p) {
	fake_call_(f, p, std::index_sequence_for<A...>{});
}

// fake_nargs is the number of parameters of kernel f, for a launch that a
// graph records (fakecuda.c copies them).
template <typename... A>
static int fake_nargs(void (*)(A...)) {
	return sizeof...(A);
}
