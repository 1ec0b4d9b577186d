//go:build cuda && cgo

package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

// The few CUDA signatures used, declared here so that the package builds
// without CUDA's headers or libraries. Every status type of the four APIs
// (cudaError_t, cublasStatus_t, nvrtcResult, CUresult) is a C enum: an int.
// Handles (cublasHandle_t, nvrtcProgram, CUcontext, CUmodule, CUfunction,
// CUstream) are pointers; CUdevice is an int.
typedef int status;

static struct {
	// libcudart
	status (*cudaGetDeviceCount)(int *count);
	status (*cudaMalloc)(void **p, size_t bytes);
	status (*cudaFree)(void *p);
	status (*cudaMemcpyAsync)(void *dst, const void *src, size_t bytes, int kind, void *stream);
	status (*cudaMallocHost)(void **p, size_t bytes);
	status (*cudaFreeHost)(void *p);
	status (*cudaStreamCreate)(void **stream);
	status (*cudaStreamCreateWithFlags)(void **stream, unsigned flags);
	status (*cudaStreamDestroy)(void *stream);
	status (*cudaStreamSynchronize)(void *stream);
	status (*cudaEventCreateWithFlags)(void **event, unsigned flags);
	status (*cudaEventDestroy)(void *event);
	status (*cudaEventRecord)(void *event, void *stream);
	status (*cudaEventSynchronize)(void *event);
	status (*cudaStreamWaitEvent)(void *stream, void *event, unsigned flags);
	status (*cudaRuntimeGetVersion)(int *version);
	status (*cudaDeviceGetAttribute)(int *value, int attr, int device);
	const char *(*cudaGetErrorName)(status s);
	// libcublas
	status (*cublasCreate)(void **handle);
	status (*cublasDestroy)(void *handle);
	status (*cublasSetMathMode)(void *handle, int mode);
	status (*cublasSetStream)(void *handle, void *stream);
	status (*cublasSetWorkspace)(void *handle, void *workspace, size_t bytes); // NULL where cuBLAS lacks it
	status (*cublasGemmEx)(void *handle, int transa, int transb, int m, int n, int k,
		const void *alpha, const void *a, int atype, int lda, const void *b, int btype, int ldb,
		const void *beta, void *c, int ctype, int ldc, int compute, int algo);
	status (*cublasGemmStridedBatchedEx)(void *handle, int transa, int transb, int m, int n, int k,
		const void *alpha, const void *a, int atype, int lda, long long strideA,
		const void *b, int btype, int ldb, long long strideB,
		const void *beta, void *c, int ctype, int ldc, long long strideC, int batch, int compute, int algo);
	status (*cublasSgemm)(void *handle, int transa, int transb, int m, int n, int k,
		const float *alpha, const float *a, int lda, const float *b, int ldb,
		const float *beta, float *c, int ldc);
	status (*cublasSgemmStridedBatched)(void *handle, int transa, int transb, int m, int n, int k,
		const float *alpha, const float *a, int lda, long long strideA,
		const float *b, int ldb, long long strideB,
		const float *beta, float *c, int ldc, long long strideC, int batch);
	// libnvrtc
	status (*nvrtcCreateProgram)(void **prog, const char *src, const char *name,
		int headers, const char *const *headerSrc, const char *const *headerNames);
	status (*nvrtcCompileProgram)(void *prog, int n, const char *const *options);
	status (*nvrtcGetProgramLogSize)(void *prog, size_t *size);
	status (*nvrtcGetProgramLog)(void *prog, char *log);
	status (*nvrtcGetCUBINSize)(void *prog, size_t *size);
	status (*nvrtcGetCUBIN)(void *prog, char *cubin);
	status (*nvrtcDestroyProgram)(void **prog);
	const char *(*nvrtcGetErrorString)(status s);
	// libcuda (the driver)
	status (*cuInit)(unsigned flags);
	status (*cuDeviceGet)(int *dev, int ordinal);
	status (*cuDeviceGetName)(char *name, int len, int dev);
	status (*cuDevicePrimaryCtxRetain)(void **ctx, int dev);
	status (*cuCtxSetCurrent)(void *ctx);
	status (*cuModuleLoadData)(void **module, const void *image);
	status (*cuModuleGetFunction)(void **fn, void *module, const char *name);
	status (*cuLaunchKernel)(void *fn, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shared, void *stream,
		void **params, void **extra);
	status (*cuGetErrorName)(status s, const char **name);
} api;

#define BIND(lib, f, name) if ((*(void **)&api.f = dlsym(lib, name)) == NULL) return name;

// sub_bind looks up every function; it returns the name of the first one
// missing, or NULL. cuBLAS exports its v2 API under _v2 names.
static const char *sub_bind(void *rt, void *blas, void *rtc, void *drv) {
	BIND(rt, cudaGetDeviceCount, "cudaGetDeviceCount")
	BIND(rt, cudaMalloc, "cudaMalloc")
	BIND(rt, cudaFree, "cudaFree")
	BIND(rt, cudaMemcpyAsync, "cudaMemcpyAsync")
	BIND(rt, cudaMallocHost, "cudaMallocHost")
	BIND(rt, cudaFreeHost, "cudaFreeHost")
	BIND(rt, cudaStreamCreate, "cudaStreamCreate")
	BIND(rt, cudaStreamCreateWithFlags, "cudaStreamCreateWithFlags")
	BIND(rt, cudaStreamDestroy, "cudaStreamDestroy")
	BIND(rt, cudaStreamSynchronize, "cudaStreamSynchronize")
	BIND(rt, cudaEventCreateWithFlags, "cudaEventCreateWithFlags")
	BIND(rt, cudaEventDestroy, "cudaEventDestroy")
	BIND(rt, cudaEventRecord, "cudaEventRecord")
	BIND(rt, cudaEventSynchronize, "cudaEventSynchronize")
	BIND(rt, cudaStreamWaitEvent, "cudaStreamWaitEvent")
	BIND(rt, cudaRuntimeGetVersion, "cudaRuntimeGetVersion")
	BIND(rt, cudaDeviceGetAttribute, "cudaDeviceGetAttribute")
	BIND(rt, cudaGetErrorName, "cudaGetErrorName")
	BIND(blas, cublasCreate, "cublasCreate_v2")
	BIND(blas, cublasDestroy, "cublasDestroy_v2")
	BIND(blas, cublasSetMathMode, "cublasSetMathMode")
	BIND(blas, cublasSetStream, "cublasSetStream_v2")
	BIND(blas, cublasGemmEx, "cublasGemmEx")
	BIND(blas, cublasGemmStridedBatchedEx, "cublasGemmStridedBatchedEx")
	BIND(blas, cublasSgemm, "cublasSgemm_v2")
	BIND(blas, cublasSgemmStridedBatched, "cublasSgemmStridedBatched")
	BIND(rtc, nvrtcCreateProgram, "nvrtcCreateProgram")
	BIND(rtc, nvrtcCompileProgram, "nvrtcCompileProgram")
	BIND(rtc, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize")
	BIND(rtc, nvrtcGetProgramLog, "nvrtcGetProgramLog")
	BIND(rtc, nvrtcGetCUBINSize, "nvrtcGetCUBINSize")
	BIND(rtc, nvrtcGetCUBIN, "nvrtcGetCUBIN")
	BIND(rtc, nvrtcDestroyProgram, "nvrtcDestroyProgram")
	BIND(rtc, nvrtcGetErrorString, "nvrtcGetErrorString")
	BIND(drv, cuInit, "cuInit")
	BIND(drv, cuDeviceGet, "cuDeviceGet")
	BIND(drv, cuDeviceGetName, "cuDeviceGetName")
	BIND(drv, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	BIND(drv, cuCtxSetCurrent, "cuCtxSetCurrent")
	BIND(drv, cuModuleLoadData, "cuModuleLoadData")
	BIND(drv, cuModuleGetFunction, "cuModuleGetFunction")
	BIND(drv, cuLaunchKernel, "cuLaunchKernel")
	BIND(drv, cuGetErrorName, "cuGetErrorName")
	*(void **)&api.cublasSetWorkspace = dlsym(blas, "cublasSetWorkspace_v2");
	return NULL;
}

static void *sub_dlopen(const char *name) { return dlopen(name, RTLD_NOW | RTLD_LOCAL); }

// Go cannot call C function pointers: one wrapper per call.
static status w_cudaGetDeviceCount(int *n) { return api.cudaGetDeviceCount(n); }
static status w_cudaMalloc(uintptr_t *p, size_t bytes) { return api.cudaMalloc((void **)p, bytes); }
static status w_cudaFree(uintptr_t p) { return api.cudaFree((void *)p); }
// Copies on stream from and to pinned host memory (cudaMallocHost), so
// that they are asynchronous.
static status w_upload(uintptr_t dst, const void *src, size_t bytes, void *stream) {
	return api.cudaMemcpyAsync((void *)dst, src, bytes, 1, stream);
}
static status w_download(void *dst, uintptr_t src, size_t bytes, void *stream) {
	return api.cudaMemcpyAsync(dst, (const void *)src, bytes, 2, stream);
}
static status w_cudaMallocHost(void **p, size_t bytes) { return api.cudaMallocHost(p, bytes); }
static status w_cudaFreeHost(void *p) { return api.cudaFreeHost(p); }
static status w_cudaStreamCreate(void **s) { return api.cudaStreamCreate(s); }
// A stream not ordered with the legacy default one (cudaStreamNonBlocking):
// UploadAhead's copies, ordered with the device's stream by events only.
static status w_cudaStreamCreateNonBlocking(void **s) { return api.cudaStreamCreateWithFlags(s, 1); }
static status w_cudaStreamDestroy(void *s) { return api.cudaStreamDestroy(s); }
static status w_cudaStreamSynchronize(void *s) { return api.cudaStreamSynchronize(s); }
// Events without timing (cudaEventDisableTiming): the cheapest kind.
static status w_cudaEventCreate(void **e) { return api.cudaEventCreateWithFlags(e, 2); }
static status w_cudaEventDestroy(void *e) { return api.cudaEventDestroy(e); }
static status w_cudaEventRecord(void *e, void *s) { return api.cudaEventRecord(e, s); }
static status w_cudaEventSynchronize(void *e) { return api.cudaEventSynchronize(e); }
static status w_cudaStreamWaitEvent(void *s, void *e) { return api.cudaStreamWaitEvent(s, e, 0); }
static status w_cudaRuntimeGetVersion(int *v) { return api.cudaRuntimeGetVersion(v); }
static status w_cudaDeviceGetAttribute(int *v, int attr, int dev) { return api.cudaDeviceGetAttribute(v, attr, dev); }
static const char *w_cudaGetErrorName(status s) { return api.cudaGetErrorName(s); }

static status w_cublasCreate(void **h) { return api.cublasCreate(h); }
static status w_cublasDestroy(void *h) { return api.cublasDestroy(h); }
static status w_cublasSetMathMode(void *h, int mode) { return api.cublasSetMathMode(h, mode); }
static status w_cublasSetStream(void *h, void *s) { return api.cublasSetStream(h, s); }
static int has_cublasSetWorkspace(void) { return api.cublasSetWorkspace != NULL; }
static status w_cublasSetWorkspace(void *h, uintptr_t w, size_t bytes) { return api.cublasSetWorkspace(h, (void *)w, bytes); }
// The products with a compute type (cublasComputeType_t), the default
// algorithm (-1): A and B of type abtype (cudaDataType_t: CUDA_R_32F = 0,
// or CUDA_R_16F = 2, CUDA_R_16BF = 14), C float32 (w_gemmEx's of type
// ctype: 0, or abtype).
static status w_gemmEx(void *h, int ta, int tb, int m, int n, int k, float alpha,
		uintptr_t a, int lda, uintptr_t b, int ldb, float beta, uintptr_t c, int ldc, int compute, int abtype, int ctype) {
	return api.cublasGemmEx(h, ta, tb, m, n, k, &alpha, (const void *)a, abtype, lda, (const void *)b, abtype, ldb,
		&beta, (void *)c, ctype, ldc, compute, -1);
}
static status w_gemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, float alpha,
		uintptr_t a, int lda, long long sa, uintptr_t b, int ldb, long long sb,
		float beta, uintptr_t c, int ldc, long long sc, int batch, int compute, int abtype) {
	return api.cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, (const void *)a, abtype, lda, sa,
		(const void *)b, abtype, ldb, sb, &beta, (void *)c, 0, ldc, sc, batch, compute, -1);
}
static status w_sgemm(void *h, int ta, int tb, int m, int n, int k, float alpha,
		uintptr_t a, int lda, uintptr_t b, int ldb, float beta, uintptr_t c, int ldc) {
	return api.cublasSgemm(h, ta, tb, m, n, k, &alpha, (const float *)a, lda,
		(const float *)b, ldb, &beta, (float *)c, ldc);
}
static status w_sgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, float alpha,
		uintptr_t a, int lda, long long sa, uintptr_t b, int ldb, long long sb,
		float beta, uintptr_t c, int ldc, long long sc, int batch) {
	return api.cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, (const float *)a, lda, sa,
		(const float *)b, ldb, sb, &beta, (float *)c, ldc, sc, batch);
}

static status w_nvrtcCreateProgram(void **p, const char *src, const char *name) {
	return api.nvrtcCreateProgram(p, src, name, 0, NULL, NULL);
}
static status w_nvrtcCompileProgram(void *p, const char *arch) {
	const char *opts[1] = {arch};
	return api.nvrtcCompileProgram(p, 1, opts);
}
static status w_nvrtcGetProgramLogSize(void *p, size_t *n) { return api.nvrtcGetProgramLogSize(p, n); }
static status w_nvrtcGetProgramLog(void *p, char *log) { return api.nvrtcGetProgramLog(p, log); }
static status w_nvrtcGetCUBINSize(void *p, size_t *n) { return api.nvrtcGetCUBINSize(p, n); }
static status w_nvrtcGetCUBIN(void *p, char *out) { return api.nvrtcGetCUBIN(p, out); }
static status w_nvrtcDestroyProgram(void **p) { return api.nvrtcDestroyProgram(p); }
static const char *w_nvrtcGetErrorString(status s) { return api.nvrtcGetErrorString(s); }

static status w_cuInit(void) { return api.cuInit(0); }
static status w_cuDeviceGet(int *dev, int ordinal) { return api.cuDeviceGet(dev, ordinal); }
static status w_cuDeviceGetName(char *name, int len, int dev) { return api.cuDeviceGetName(name, len, dev); }
static status w_cuDevicePrimaryCtxRetain(void **ctx, int dev) { return api.cuDevicePrimaryCtxRetain(ctx, dev); }
static status w_cuCtxSetCurrent(void *ctx) { return api.cuCtxSetCurrent(ctx); }
static status w_cuModuleLoadData(void **m, const void *image) { return api.cuModuleLoadData(m, image); }
static status w_cuModuleGetFunction(void **f, void *m, const char *name) { return api.cuModuleGetFunction(f, m, name); }
static const char *w_cuGetErrorName(status s) {
	const char *name = NULL;
	if (api.cuGetErrorName(s, &name) != 0) return NULL;
	return name;
}

// w_launch starts fn on grid blocks of block threads (1-D) on stream.
// args holds nargs parameters in 8-byte slots, each as the kernel
// declares it (a pointer, or a 4-byte int or float in the low bytes);
// cuLaunchKernel copies them before returning.
static status w_launch(void *fn, unsigned grid, unsigned block, void *args, int nargs, void *stream) {
	void *params[16];
	if (nargs > 16) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) params[i] = (char *)args + 8 * i;
	return api.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream, params, NULL);
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/subtta/subtta/autograd/kernel"
)

// The libraries, each by its sonames, newest first. CUDA 11's runtime and
// NVRTC carry a minor version in the soname.
var (
	cudartNames = []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}
	cublasNames = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}
	nvrtcNames  = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}
	cudaNames   = []string{"libcuda.so.1"}
)

var (
	loadOnce sync.Once
	loadErr  error
)

// load opens the four libraries and binds the functions, once.
func load() error {
	loadOnce.Do(func() {
		var handles [4]unsafe.Pointer
		for i, names := range [][]string{cudartNames, cublasNames, nvrtcNames, cudaNames} {
			if handles[i] = dlopenFirst(names); handles[i] == nil {
				loadErr = fmt.Errorf("%s not found", soNames(names))
				return
			}
		}
		if missing := C.sub_bind(handles[0], handles[1], handles[2], handles[3]); missing != nil {
			loadErr = fmt.Errorf("the CUDA libraries lack %s", C.GoString(missing))
		}
	})
	return loadErr
}

// dlopenFirst returns the first of names that dlopen opens, or nil.
func dlopenFirst(names []string) unsafe.Pointer {
	for _, n := range names {
		cn := C.CString(n)
		h := C.sub_dlopen(cn)
		C.free(unsafe.Pointer(cn))
		if h != nil {
			return h
		}
	}
	return nil
}

// soNames writes sonames with their common stem once:
// "libcudart.so.13/.12/.11.0".
func soNames(names []string) string {
	stem := names[0][:strings.Index(names[0], ".so")+3]
	parts := []string{names[0]}
	for _, n := range names[1:] {
		parts = append(parts, strings.TrimPrefix(n, stem))
	}
	return strings.Join(parts, "/")
}

// Available reports whether a CUDA device can be used and, when it cannot,
// why (a library missing, no device).
func Available() (bool, string) {
	if err := load(); err != nil {
		return false, err.Error()
	}
	var n C.int
	if s := C.w_cudaGetDeviceCount(&n); s != 0 {
		return false, rtErr("cudaGetDeviceCount", s).Error()
	}
	if n == 0 {
		return false, "no CUDA device"
	}
	return true, ""
}

// Error is an error status of a CUDA, cuBLAS or NVRTC call.
type Error struct {
	Call string // the function that returned it
	Code int    // its status code
	Name string // the status's name, when the library gives one
}

func (e *Error) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("gpu: %s: status %d", e.Call, e.Code)
	}
	return fmt.Sprintf("gpu: %s: %s (%d)", e.Call, e.Name, e.Code)
}

func rtErr(call string, s C.status) error {
	return &Error{call, int(s), C.GoString(C.w_cudaGetErrorName(s))}
}

func drvErr(call string, s C.status) error {
	var name string
	if p := C.w_cuGetErrorName(s); p != nil {
		name = C.GoString(p)
	}
	return &Error{call, int(s), name}
}

func rtcErr(call string, s C.status) error {
	return &Error{call, int(s), C.GoString(C.w_nvrtcGetErrorString(s))}
}

// cublasStatusNames are cublasStatus_t's values (cublas_api.h).
var cublasStatusNames = map[int]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func blasErr(call string, s C.status) error {
	return &Error{call, int(s), cublasStatusNames[int(s)]}
}

// cuBLAS enums (cublas_api.h) and runtime attributes (driver_types.h).
const (
	cublasOpN                = 0
	cublasOpT                = 1
	cublasDefaultMath        = 0
	cublasTF32TensorOpMath   = 3
	cublasCompute32F         = 68 // cublasComputeType_t
	cublasCompute32FFast16F  = 74
	cublasCompute32FFast16BF = 75
	attrCCMajor              = 75 // cudaDevAttrComputeCapabilityMajor
	attrCCMinor              = 76 // cudaDevAttrComputeCapabilityMinor
)

// device is a CUDA GPU as a kernel.Device: memory from cudaMalloc, products
// from cuBLAS, row-wise kernels compiled by NVRTC when opened. Every call
// takes the mutex and runs on a locked OS thread with the device's primary
// context made current, since a goroutine may change threads between calls
// and the driver API's context is per thread.
//
// Work goes to one stream of the device's own, in call order, and the host
// does not wait for it: an upload copies its values into pinned memory
// (stage) and queues the copy; only Download waits, for everything queued
// before it. The stream is a blocking one (cudaStreamCreate), so work on
// CUDA's legacy default stream is ordered with it too. UploadAhead's
// copies go to a second stream (copies), ordered with the first by events
// only: after the work queued before them, and before the work queued
// after Await.
//
// mu guards the handles and the state below; a caller waiting for the
// device (Download, UploadAhead reusing its pinned memory) waits without
// it, so that other goroutines can queue work meanwhile. downMu (Download's
// pinned memory) and aheadMu (UploadAhead's) are taken before mu, never
// while holding it.
type device struct {
	mu      sync.Mutex
	downMu  sync.Mutex
	aheadMu sync.Mutex
	name    string
	ctx     unsafe.Pointer
	blas    unsafe.Pointer
	stream  unsafe.Pointer
	compute C.int                     // the products' cublasComputeType_t; 32F: cublasSgemm
	work    C.uintptr_t               // cuBLAS's workspace (blasWorkspace), 0 where cuBLAS keeps its own
	solver  unsafe.Pointer            // the cuSOLVER handle, made by the first SymEig
	fn      map[string]unsafe.Pointer // the row-wise kernels by name
	free    map[int][]uintptr         // freed buffers by length, for reuse
	prec    Precision
	up      stage          // pinned memory for uploads
	down    unsafe.Pointer // pinned memory for downloads, downN bytes of it
	downN   int
	downEv  unsafe.Pointer // recorded after a download's copy
	closed  bool

	// capt is the graph being recorded (Capture), nil when none; captEnd
	// (on mu) is signalled when it ends. noGraphs: Options.NoGraphs.
	capt     *capture
	captEnd  *sync.Cond
	noGraphs bool

	copies    unsafe.Pointer // the stream of UploadAhead's copies, made by the first
	ahead     [2]aheadStage  // UploadAhead's pinned memory, used in turn
	aheadNext int            // the stage the next UploadAhead uses
}

// aheadStage is pinned host memory for UploadAhead: the host copies a
// batch there, outside mu, and the copy stream reads it. It is written
// again once ev, recorded after that copy, has passed. Two take turns, so
// that one batch can be copied in while the one before is still going up.
type aheadStage struct {
	base unsafe.Pointer
	size int
	ev   unsafe.Pointer // nil before the first use
}

// stage is the pinned host memory uploads go through: a ring of size
// bytes. Each upload takes the next region, copies its values there and
// queues the copy to the device with an event after it; a region is
// written again only once the events of the copies that read it have
// passed. A Download, which waits for the whole stream, retires them all.
type stage struct {
	base    unsafe.Pointer
	size    int
	head    int
	pending []pendingCopy    // copies not known to be done, in the order queued
	spare   []unsafe.Pointer // events for reuse (the device's, not only the ring's)
	seq     uint64           // the number of copies queued so far
}

type pendingCopy struct {
	start, end int // bytes of the ring the copy reads
	ev         unsafe.Pointer
	seq        uint64 // its number in the order queued
}

// Open initialises CUDA device o.Ordinal: the libraries, its primary
// context, a cuBLAS handle (TF32 off unless o.TF32) and the row-wise kernels,
// compiled for it by NVRTC. The result implements kernel.Device and has a
// Close method (interface{ Close() error }) releasing the memory it keeps.
func Open(o Options) (kernel.Device, error) {
	d, err := open(o)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func open(o Options) (*device, error) {
	prec, err := o.precision()
	if err != nil {
		return nil, err
	}
	if err := load(); err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if s := C.w_cuInit(); s != 0 {
		return nil, drvErr("cuInit", s)
	}
	var dev C.int
	if s := C.w_cuDeviceGet(&dev, C.int(o.Ordinal)); s != 0 {
		return nil, drvErr("cuDeviceGet", s)
	}
	d := &device{fn: map[string]unsafe.Pointer{}, free: map[int][]uintptr{}, noGraphs: o.NoGraphs}
	d.captEnd = sync.NewCond(&d.mu)
	if s := C.w_cuDevicePrimaryCtxRetain(&d.ctx, dev); s != 0 {
		return nil, drvErr("cuDevicePrimaryCtxRetain", s)
	}
	if s := C.w_cuCtxSetCurrent(d.ctx); s != 0 {
		return nil, drvErr("cuCtxSetCurrent", s)
	}
	var cname [256]C.char
	if s := C.w_cuDeviceGetName(&cname[0], C.int(len(cname)), dev); s != 0 {
		return nil, drvErr("cuDeviceGetName", s)
	}
	var major, minor, version C.int
	if s := C.w_cudaDeviceGetAttribute(&major, attrCCMajor, C.int(o.Ordinal)); s != 0 {
		return nil, rtErr("cudaDeviceGetAttribute", s)
	}
	if s := C.w_cudaDeviceGetAttribute(&minor, attrCCMinor, C.int(o.Ordinal)); s != 0 {
		return nil, rtErr("cudaDeviceGetAttribute", s)
	}
	if s := C.w_cudaRuntimeGetVersion(&version); s != 0 {
		return nil, rtErr("cudaRuntimeGetVersion", s)
	}
	if s := C.w_cublasCreate(&d.blas); s != 0 {
		return nil, blasErr("cublasCreate_v2", s)
	}
	fail := func(err error) (*device, error) {
		if d.stream != nil {
			C.w_cudaStreamDestroy(d.stream)
		}
		C.w_cublasDestroy(d.blas)
		if d.work != 0 {
			C.w_cudaFree(d.work)
		}
		return nil, err
	}
	mode, tf32 := C.int(cublasDefaultMath), "off"
	d.compute = cublasCompute32F
	switch prec {
	case TF32:
		mode, tf32 = cublasTF32TensorOpMath, "on"
	case BF16:
		d.compute = cublasCompute32FFast16BF
	case FP16:
		d.compute = cublasCompute32FFast16F
	}
	if s := C.w_cublasSetMathMode(d.blas, mode); s != 0 {
		return fail(blasErr("cublasSetMathMode", s))
	}
	if s := C.w_cudaStreamCreate(&d.stream); s != 0 {
		return fail(rtErr("cudaStreamCreate", s))
	}
	if s := C.w_cublasSetStream(d.blas, d.stream); s != 0 {
		return fail(blasErr("cublasSetStream_v2", s))
	}
	// After cublasSetStream, which puts cuBLAS back on its own workspace.
	if C.has_cublasSetWorkspace() != 0 {
		n := C.size_t(blasWorkspace(int(major)))
		if s := C.w_cudaMalloc(&d.work, n); s != 0 {
			return fail(rtErr("cudaMalloc (cuBLAS's workspace)", s))
		}
		if s := C.w_cublasSetWorkspace(d.blas, d.work, n); s != 0 {
			return fail(blasErr("cublasSetWorkspace_v2", s))
		}
	}
	if err := d.compile(int(major)*10 + int(minor)); err != nil {
		return fail(err)
	}
	d.prec = prec
	d.name = fmt.Sprintf("cuda:%d %s (sm_%d%d, CUDA runtime %d.%d, TF32 %s)", o.Ordinal, C.GoString(&cname[0]),
		major, minor, version/1000, version%1000/10, tf32)
	if prec == BF16 || prec == FP16 {
		d.name = strings.TrimSuffix(d.name, ")") + ", " + prec.String() + " products, float32 sums)"
	}
	if d.work == 0 {
		d.name = strings.TrimSuffix(d.name, ")") + ", cuBLAS without cublasSetWorkspace: its own workspace)"
	}
	return d, nil
}

// blasWorkspace is the memory given to cuBLAS for its products' workspace
// on a GPU of compute capability major.x: what cuBLAS's documentation of
// cublasSetWorkspace recommends, 32 MiB on Hopper (sm_90) and later, 4 MiB
// before, the sizes PyTorch gives its handles too. With a workspace of our
// own the products recorded in a CUDA Graph (Capture) use the same memory,
// of the same size, as those run op by op; on cuBLAS's default pool each
// recording may allocate a workspace of its own, and repeated recordings
// grow the device's memory (pytorch/pytorch#83461).
func blasWorkspace(major int) int {
	if major >= 9 {
		return 32 << 20
	}
	return 4 << 20
}

// compile builds rowwiseSource with NVRTC for sm_<arch> and loads the
// kernels. Called with the context current on a locked thread.
func (d *device) compile(arch int) error {
	src, name := C.CString(rowwiseSource+towerSource+adamSource), C.CString("subtta_rowwise.cu")
	defer C.free(unsafe.Pointer(src))
	defer C.free(unsafe.Pointer(name))
	var prog unsafe.Pointer
	if s := C.w_nvrtcCreateProgram(&prog, src, name); s != 0 {
		return rtcErr("nvrtcCreateProgram", s)
	}
	defer C.w_nvrtcDestroyProgram(&prog)
	opt := C.CString(fmt.Sprintf("--gpu-architecture=sm_%d", arch))
	defer C.free(unsafe.Pointer(opt))
	if s := C.w_nvrtcCompileProgram(prog, opt); s != 0 {
		err := rtcErr("nvrtcCompileProgram", s)
		var n C.size_t
		if C.w_nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1 {
			log := (*C.char)(C.malloc(n))
			defer C.free(unsafe.Pointer(log))
			if C.w_nvrtcGetProgramLog(prog, log) == 0 {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(C.GoString(log)))
			}
		}
		return err
	}
	var n C.size_t
	if s := C.w_nvrtcGetCUBINSize(prog, &n); s != 0 {
		return rtcErr("nvrtcGetCUBINSize", s)
	}
	cubin := C.malloc(n)
	defer C.free(cubin)
	if s := C.w_nvrtcGetCUBIN(prog, (*C.char)(cubin)); s != 0 {
		return rtcErr("nvrtcGetCUBIN", s)
	}
	var mod unsafe.Pointer
	if s := C.w_cuModuleLoadData(&mod, cubin); s != 0 {
		return drvErr("cuModuleLoadData", s)
	}
	for _, k := range rowwiseKernels {
		cn := C.CString(k)
		var f unsafe.Pointer
		s := C.w_cuModuleGetFunction(&f, mod, cn)
		C.free(unsafe.Pointer(cn))
		if s != 0 {
			return drvErr("cuModuleGetFunction("+k+")", s)
		}
		d.fn[k] = f
	}
	return nil
}

// exec runs f under the mutex on a locked thread with the context current.
func (d *device) exec(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waitCapture()
	if d.closed {
		return fmt.Errorf("gpu: %s: used after Close", d.name)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if s := C.w_cuCtxSetCurrent(d.ctx); s != 0 {
		return drvErr("cuCtxSetCurrent", s)
	}
	return f()
}

func (d *device) Name() string { return d.name }

func (d *device) precision() Precision { return d.prec }

// Close frees the memory kept for reuse and the cuBLAS handle; buffers not
// freed stay allocated until the process ends.
func (d *device) Close() error {
	d.downMu.Lock()
	defer d.downMu.Unlock()
	d.aheadMu.Lock()
	defer d.aheadMu.Unlock()
	return d.exec(func() error {
		var errs []error
		if s := C.w_cudaStreamSynchronize(d.stream); s != 0 {
			errs = append(errs, rtErr("cudaStreamSynchronize", s))
		}
		if err := d.syncCopiesLocked(); err != nil {
			errs = append(errs, err)
		}
		for _, ps := range d.free {
			for _, p := range ps {
				C.w_cudaFree(C.uintptr_t(p))
			}
		}
		d.free = nil
		d.closed = true
		d.up.retire()
		spare := d.up.spare
		if d.downEv != nil {
			spare = append(spare, d.downEv)
		}
		pinned := []unsafe.Pointer{d.up.base, d.down}
		for _, a := range d.ahead {
			pinned = append(pinned, a.base)
			if a.ev != nil {
				spare = append(spare, a.ev)
			}
		}
		for _, e := range spare {
			C.w_cudaEventDestroy(e)
		}
		for _, p := range pinned {
			if p != nil {
				C.w_cudaFreeHost(p)
			}
		}
		d.up, d.down, d.downEv, d.ahead = stage{}, nil, nil, [2]aheadStage{}
		if d.copies != nil {
			if s := C.w_cudaStreamDestroy(d.copies); s != 0 {
				errs = append(errs, rtErr("cudaStreamDestroy (copies)", s))
			}
			d.copies = nil
		}
		errs = append(errs, d.closeSolver())
		if s := C.w_cublasDestroy(d.blas); s != 0 {
			errs = append(errs, blasErr("cublasDestroy_v2", s))
		}
		if d.work != 0 {
			C.w_cudaFree(d.work)
			d.work = 0
		}
		if s := C.w_cudaStreamDestroy(d.stream); s != 0 {
			errs = append(errs, rtErr("cudaStreamDestroy", s))
		}
		return errors.Join(errs...)
	})
}

// buf is device memory: n float32 values at ptr. own marks a buffer from
// Alloc, which Free may take back (a Slice shares its memory).
type buf struct {
	d   *device
	ptr uintptr
	n   int
	own bool
	// ready is the event recorded after UploadAhead's copy into the
	// buffer, until Await (or Free) ordered the device's stream after it.
	// Guarded by the device's mu.
	ready unsafe.Pointer
}

func (b *buf) Len() int { return b.n }

// Addr is the buffer's device address, 0 once freed (kernel.SameMemory).
func (b *buf) Addr() uintptr { return b.ptr }

func (b *buf) Slice(i, j int) kernel.Buf {
	if i < 0 || j < i || j > b.n {
		panic(fmt.Sprintf("gpu: Slice(%d, %d) of a buffer of %d values", i, j, b.n))
	}
	return &buf{d: b.d, ptr: b.ptr + uintptr(4*i), n: j - i}
}

// Alloc returns n values of device memory. A buffer freed earlier with the
// same length is reused: the shapes of a model repeat, and cudaMalloc and
// cudaFree synchronise the device.
func (d *device) Alloc(n int) (kernel.Buf, error) {
	if n < 0 {
		return nil, fmt.Errorf("gpu: Alloc(%d)", n)
	}
	b := &buf{d: d, n: n, own: true}
	if n == 0 {
		return b, nil
	}
	if err := d.exec(func() error { return d.alloc(b) }); err != nil {
		return nil, err
	}
	return b, nil
}

// alloc gives b (of b.n > 0 values) its memory. Called in exec.
func (d *device) alloc(b *buf) error {
	if c := d.capt; c != nil { // the recording's thread (exec waited for the others)
		defer func() {
			if b.ptr != 0 {
				c.allocated[b.ptr] = true
			}
		}()
		if ps := c.free[b.n]; len(ps) > 0 {
			b.ptr, c.free[b.n] = ps[len(ps)-1], ps[:len(ps)-1]
			return nil
		}
	}
	if ps := d.free[b.n]; len(ps) > 0 {
		b.ptr, d.free[b.n] = ps[len(ps)-1], ps[:len(ps)-1]
		return nil
	}
	var p C.uintptr_t
	if s := C.w_cudaMalloc(&p, C.size_t(4*b.n)); s != 0 {
		return rtErr("cudaMalloc", s)
	}
	b.ptr = uintptr(p)
	return nil
}

// Free keeps the buffer for reuse by Alloc (until Close). A buffer of
// UploadAhead not yet awaited is awaited first: the work that reuses its
// memory must not run before the copy into it.
func (d *device) Free(kb kernel.Buf) {
	b, ok := kb.(*buf)
	if !ok || b.d != d || !b.own || b.ptr == 0 {
		return
	}
	d.mu.Lock()
	d.waitCapture()
	if b.ready == nil {
		switch {
		case d.capt != nil: // freed by the recording: the graph's memory
			d.capt.free[b.n] = append(d.capt.free[b.n], b.ptr)
		case !d.closed:
			d.free[b.n] = append(d.free[b.n], b.ptr)
		}
		d.mu.Unlock()
		b.ptr = 0
		return
	}
	d.mu.Unlock()
	// Free returns no error: after a failed wait the memory is not reused,
	// since the copy may still write it.
	_ = d.exec(func() error {
		if err := d.await(b); err != nil {
			return err
		}
		d.free[b.n] = append(d.free[b.n], b.ptr)
		return nil
	})
	b.ptr = 0
}

// ptr returns the address of kb after checking that it belongs to d and
// holds at least need values.
func (d *device) ptr(what string, kb kernel.Buf, need int) (C.uintptr_t, error) {
	b, ok := kb.(*buf)
	switch {
	case !ok || b == nil:
		return 0, fmt.Errorf("gpu: %s: not a buffer of this device (%T)", what, kb)
	case b.d != d:
		return 0, fmt.Errorf("gpu: %s: a buffer of another device", what)
	case b.own && b.ptr == 0 && b.n > 0:
		return 0, fmt.Errorf("gpu: %s: buffer used after Free", what)
	case b.ready != nil && what != "Await":
		return 0, fmt.Errorf("gpu: %s: a buffer of UploadAhead used before Await", what)
	case need > b.n:
		return 0, fmt.Errorf("gpu: %s: needs %d values, the buffer holds %d", what, need, b.n)
	}
	return C.uintptr_t(b.ptr), nil
}

func (d *device) Upload(dst kernel.Buf, src []float32) error {
	p, err := d.ptr("Upload", dst, len(src))
	if err != nil || len(src) == 0 {
		return err
	}
	return d.exec(func() error { return d.upload(p, src) })
}

// stageMin is the least pinned memory the upload ring holds (bytes), and
// stagePart the most values one region of it takes: a longer upload goes
// in parts, so that the host copies a part into the ring while the device
// copies the one before (the images of a batch: 38 MB for 64 ViT-B/32
// images). Variables for the tests, which make the ring wrap.
var (
	stageMin  = 32 << 20
	stagePart = 2 << 20
)

// upload queues the copy of src to dst through the ring, in parts of at
// most stagePart values. Called in exec.
func (d *device) upload(dst C.uintptr_t, src []float32) error {
	if d.capt != nil {
		return errCapturing("Upload")
	}
	for off := 0; off < len(src); off += stagePart {
		part := src[off:min(off+stagePart, len(src))]
		if err := d.uploadPart(dst+C.uintptr_t(4*off), part); err != nil {
			return err
		}
	}
	return nil
}

// uploadPart copies src into the next region of the ring and queues its
// copy to dst.
func (d *device) uploadPart(dst C.uintptr_t, src []float32) error {
	st := &d.up
	n := (4*len(src) + 255) &^ 255
	if n > st.size {
		// A larger ring: the old one's copies must be done before it goes.
		if err := d.sync(); err != nil {
			return err
		}
		if st.base != nil {
			C.w_cudaFreeHost(st.base)
			st.base, st.size = nil, 0
		}
		size := max(stageMin, 2*n)
		if s := C.w_cudaMallocHost(&st.base, C.size_t(size)); s != 0 {
			return rtErr("cudaMallocHost", s)
		}
		st.size, st.head = size, 0
	}
	if st.head+n > st.size {
		st.head = 0
	}
	start, end := st.head, st.head+n
	last := -1
	for i, p := range st.pending {
		if p.start < end && start < p.end {
			last = i
		}
	}
	if last >= 0 {
		// The copies complete in order: this one's event passing means
		// those before it are done too.
		if s := C.w_cudaEventSynchronize(st.pending[last].ev); s != 0 {
			return rtErr("cudaEventSynchronize", s)
		}
		for _, p := range st.pending[:last+1] {
			st.spare = append(st.spare, p.ev)
		}
		st.pending = append(st.pending[:0], st.pending[last+1:]...)
	}
	at := unsafe.Add(st.base, start)
	hostCopy(unsafe.Slice((*float32)(at), len(src)), src)
	if s := C.w_upload(dst, at, C.size_t(4*len(src)), d.stream); s != 0 {
		return rtErr("cudaMemcpyAsync (upload)", s)
	}
	ev, err := d.record(d.stream)
	if err != nil {
		return err
	}
	st.seq++
	st.pending = append(st.pending, pendingCopy{start, end, ev, st.seq})
	st.head = end
	return nil
}

// event returns an event without timing, a spare one if there is. Called
// in exec.
func (d *device) event() (unsafe.Pointer, error) {
	st := &d.up
	if k := len(st.spare); k > 0 {
		ev := st.spare[k-1]
		st.spare = st.spare[:k-1]
		return ev, nil
	}
	var ev unsafe.Pointer
	if s := C.w_cudaEventCreate(&ev); s != 0 {
		return nil, rtErr("cudaEventCreateWithFlags", s)
	}
	return ev, nil
}

// record returns an event recorded on stream now. Called in exec.
func (d *device) record(stream unsafe.Pointer) (unsafe.Pointer, error) {
	ev, err := d.event()
	if err != nil {
		return nil, err
	}
	if s := C.w_cudaEventRecord(ev, stream); s != 0 {
		d.up.spare = append(d.up.spare, ev)
		return nil, rtErr("cudaEventRecord", s)
	}
	return ev, nil
}

// retire marks every queued copy done: the stream was synchronised.
func (st *stage) retire() { st.retireUpTo(st.seq) }

// retireUpTo marks the copies numbered up to seq done: an event recorded
// after them on the stream has passed.
func (st *stage) retireUpTo(seq uint64) {
	i := 0
	for ; i < len(st.pending) && st.pending[i].seq <= seq; i++ {
		st.spare = append(st.spare, st.pending[i].ev)
	}
	st.pending = append(st.pending[:0], st.pending[i:]...)
	if len(st.pending) == 0 {
		st.head = 0
	}
}

// onThread runs f on a locked thread with the context current, without
// the mutex: for a call that waits for the device while other goroutines
// queue work. The caller holds downMu or aheadMu, which Close takes too.
func (d *device) onThread(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if s := C.w_cuCtxSetCurrent(d.ctx); s != 0 {
		return drvErr("cuCtxSetCurrent", s)
	}
	return f()
}

// sync waits for everything queued on the stream. Called in exec.
func (d *device) sync() error {
	if d.capt != nil {
		return errCapturing("a wait for the device")
	}
	if s := C.w_cudaStreamSynchronize(d.stream); s != 0 {
		return rtErr("cudaStreamSynchronize", s)
	}
	d.up.retire()
	return nil
}

// hostCopy is copy(dst, src), on several threads when long: the images of
// a batch go through pinned memory.
func hostCopy(dst, src []float32) {
	const part = 1 << 18 // values
	n := min(runtime.GOMAXPROCS(0), len(src)/part)
	if n < 2 {
		copy(dst, src)
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		lo, hi := i*len(src)/n, (i+1)*len(src)/n
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	wg.Wait()
}

// Download queues the copy of src into pinned memory and waits for it,
// with an event and without the mutex: another goroutine (the reader of
// the next batch, UploadAhead) may queue work while this one waits.
func (d *device) Download(dst []float32, src kernel.Buf) error {
	p, err := d.ptr("Download", src, len(dst))
	if err != nil || len(dst) == 0 {
		return err
	}
	d.downMu.Lock()
	defer d.downMu.Unlock()
	var upto uint64 // the ring's copies queued before the download
	err = d.exec(func() error {
		if d.capt != nil {
			return errCapturing("Download")
		}
		n := 4 * len(dst)
		if n > d.downN {
			if d.down != nil {
				C.w_cudaFreeHost(d.down)
				d.down, d.downN = nil, 0
			}
			size := max(1<<20, n)
			if s := C.w_cudaMallocHost(&d.down, C.size_t(size)); s != 0 {
				return rtErr("cudaMallocHost", s)
			}
			d.downN = size
		}
		if s := C.w_download(d.down, p, C.size_t(n), d.stream); s != 0 {
			return rtErr("cudaMemcpyAsync (download)", s)
		}
		if d.downEv == nil {
			ev, err := d.event()
			if err != nil {
				return err
			}
			d.downEv = ev
		}
		if s := C.w_cudaEventRecord(d.downEv, d.stream); s != 0 {
			return rtErr("cudaEventRecord", s)
		}
		upto = d.up.seq
		return nil
	})
	if err != nil {
		return err
	}
	if err := d.onThread(func() error {
		if s := C.w_cudaEventSynchronize(d.downEv); s != 0 {
			return rtErr("cudaEventSynchronize (download)", s)
		}
		return nil
	}); err != nil {
		return err
	}
	d.mu.Lock()
	d.up.retireUpTo(upto)
	d.mu.Unlock()
	hostCopy(dst, unsafe.Slice((*float32)(d.down), len(dst)))
	return nil
}

// UploadAhead implements kernel.Prefetcher. The host copies src into one
// of two pinned stages of its own (waiting, on the calling goroutine and
// without the mutex, for that stage's previous copy), then, under the
// mutex for a few calls only, the copy is queued on the copies stream
// after an event on the device's stream: the memory the buffer gets may
// have been freed by work queued before and not yet run. The buffer's
// ready event, recorded after the copy, is what Await queues a wait for.
func (d *device) UploadAhead(src []float32) (kernel.Buf, error) {
	b := &buf{d: d, n: len(src), own: true}
	if len(src) == 0 {
		return b, nil
	}
	d.aheadMu.Lock()
	defer d.aheadMu.Unlock()
	st := &d.ahead[d.aheadNext]
	d.aheadNext = (d.aheadNext + 1) % len(d.ahead)
	if st.ev != nil {
		if err := d.onThread(func() error {
			if s := C.w_cudaEventSynchronize(st.ev); s != 0 {
				return rtErr("cudaEventSynchronize (upload ahead)", s)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if n := 4 * len(src); n > st.size {
		if err := d.exec(func() error {
			if st.base != nil { // its copy has passed (above)
				C.w_cudaFreeHost(st.base)
				st.base, st.size = nil, 0
			}
			if s := C.w_cudaMallocHost(&st.base, C.size_t(n)); s != 0 {
				return rtErr("cudaMallocHost", s)
			}
			st.size = n
			return nil
		}); err != nil {
			return nil, err
		}
	}
	hostCopy(unsafe.Slice((*float32)(st.base), len(src)), src)
	err := d.exec(func() error {
		if d.capt != nil {
			return errCapturing("UploadAhead")
		}
		if d.copies == nil {
			if s := C.w_cudaStreamCreateNonBlocking(&d.copies); s != 0 {
				d.copies = nil
				return rtErr("cudaStreamCreateWithFlags (copies)", s)
			}
		}
		if err := d.alloc(b); err != nil {
			return err
		}
		after, err := d.record(d.stream)
		if err == nil {
			s := C.w_cudaStreamWaitEvent(d.copies, after)
			d.up.spare = append(d.up.spare, after) // the wait took its state
			if s != 0 {
				err = rtErr("cudaStreamWaitEvent (upload ahead)", s)
			}
		}
		if err == nil {
			if s := C.w_upload(C.uintptr_t(b.ptr), st.base, C.size_t(4*len(src)), d.copies); s != 0 {
				err = rtErr("cudaMemcpyAsync (upload ahead)", s)
			}
		}
		if err == nil {
			b.ready, err = d.record(d.copies)
		}
		if err == nil {
			if st.ev == nil {
				st.ev, err = d.event()
			}
			if err == nil {
				if s := C.w_cudaEventRecord(st.ev, d.copies); s != 0 {
					err = rtErr("cudaEventRecord", s)
				}
			}
		}
		if err != nil {
			// The copy may have been queued: wait for it before the memory
			// goes back (and the stage is written again).
			C.w_cudaStreamSynchronize(d.copies)
			if b.ready != nil {
				d.up.spare = append(d.up.spare, b.ready)
				b.ready = nil
			}
			if b.ptr != 0 {
				d.free[b.n] = append(d.free[b.n], b.ptr)
				b.ptr = 0
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// syncCopies waits for UploadAhead's copies queued so far.
func (d *device) syncCopies() error { return d.exec(d.syncCopiesLocked) }

// syncCopiesLocked is syncCopies, called in exec.
func (d *device) syncCopiesLocked() error {
	if d.copies == nil {
		return nil
	}
	if s := C.w_cudaStreamSynchronize(d.copies); s != 0 {
		return rtErr("cudaStreamSynchronize (copies)", s)
	}
	return nil
}

// Await implements kernel.Prefetcher.
func (d *device) Await(kb kernel.Buf) error {
	if _, err := d.ptr("Await", kb, 0); err != nil {
		return err
	}
	return d.exec(func() error { return d.await(kb.(*buf)) })
}

// await queues the device stream's wait for b's copy, once. Called in
// exec.
func (d *device) await(b *buf) error {
	if b.ready == nil {
		return nil
	}
	if d.capt != nil {
		return errCapturing("Await")
	}
	if s := C.w_cudaStreamWaitEvent(d.stream, b.ready); s != 0 {
		return rtErr("cudaStreamWaitEvent", s)
	}
	d.up.spare = append(d.up.spare, b.ready)
	b.ready = nil
	return nil
}

// extent is the number of values a row-major rows×cols matrix with leading
// dimension ld spans; the leading dimension must hold a row.
func extent(what string, rows, cols, ld int) (int, error) {
	if rows < 0 || cols < 0 || ld < max(1, cols) {
		return 0, fmt.Errorf("gpu: %s: %d×%d matrix with leading dimension %d", what, rows, cols, ld)
	}
	if rows == 0 || cols == 0 {
		return 0, nil
	}
	return (rows-1)*ld + cols, nil
}

// operand checks a GEMM operand: op(X) is rows×cols, stored transposed
// when trans, batch of them stride values apart.
func (d *device) operand(what string, x kernel.Buf, trans bool, rows, cols, ld, batch, stride int) (C.uintptr_t, error) {
	if trans {
		rows, cols = cols, rows
	}
	n, err := extent(what, rows, cols, ld)
	if err != nil {
		return 0, err
	}
	if batch > 1 && n > 0 {
		n += (batch - 1) * stride
	}
	return d.ptr(what, x, n)
}

// fits32 reports whether every value fits cuBLAS's and the kernels' int.
func fits32(v ...int) bool {
	for _, x := range v {
		if x < 0 || x > math.MaxInt32 {
			return false
		}
	}
	return true
}

func cublasOp(trans bool) C.int {
	if trans {
		return cublasOpT
	}
	return cublasOpN
}

// Gemm runs the row-major product C = alpha·op(A)·op(B) + beta·C as the
// column-major Cᵀ = alpha·op(B)ᵀ·op(A)ᵀ + beta·Cᵀ: a row-major matrix read
// column-major is its transpose, so the operands swap places and keep
// their trans flags, and nothing is copied.
func (d *device) Gemm(transA, transB bool, m, n, k int, alpha float32, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float32, c kernel.Buf, ldc int) error {
	return d.GemmBatched(transA, transB, 1, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0)
}

func (d *device) GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a kernel.Buf, lda, strideA int, b kernel.Buf, ldb, strideB int, beta float32, c kernel.Buf, ldc, strideC int) error {
	if !fits32(batch, m, n, k, lda, ldb, ldc, strideA, strideB, strideC) {
		return fmt.Errorf("gpu: Gemm: sizes out of range (batch %d, %d×%d×%d)", batch, m, n, k)
	}
	if batch == 0 || m == 0 || n == 0 {
		return nil
	}
	pa, err := d.operand("Gemm A", a, transA, m, k, lda, batch, strideA)
	if err != nil {
		return err
	}
	pb, err := d.operand("Gemm B", b, transB, k, n, ldb, batch, strideB)
	if err != nil {
		return err
	}
	pc, err := d.operand("Gemm C", c, false, m, n, ldc, batch, strideC)
	if err != nil {
		return err
	}
	if k == 0 {
		// cuBLAS may skip the call; kernel.Gemm scales C by beta. Keep it
		// simple and rare: refuse.
		return fmt.Errorf("gpu: Gemm with k = 0")
	}
	return d.exec(func() error {
		if d.compute != cublasCompute32F {
			return d.gemmEx(transA, transB, batch, m, n, k, alpha, pa, lda, strideA, pb, ldb, strideB, beta, pc, ldc, strideC)
		}
		if batch == 1 {
			if s := C.w_sgemm(d.blas, cublasOp(transB), cublasOp(transA), C.int(n), C.int(m), C.int(k), C.float(alpha),
				pb, C.int(ldb), pa, C.int(lda), C.float(beta), pc, C.int(ldc)); s != 0 {
				return blasErr("cublasSgemm_v2", s)
			}
			return nil
		}
		if s := C.w_sgemmStridedBatched(d.blas, cublasOp(transB), cublasOp(transA), C.int(n), C.int(m), C.int(k), C.float(alpha),
			pb, C.int(ldb), C.longlong(strideB), pa, C.int(lda), C.longlong(strideA),
			C.float(beta), pc, C.int(ldc), C.longlong(strideC), C.int(batch)); s != 0 {
			return blasErr("cublasSgemmStridedBatched", s)
		}
		return nil
	})
}

// gemmEx is GemmBatched's product in d.compute, row-major as there.
func (d *device) gemmEx(transA, transB bool, batch, m, n, k int, alpha float32, pa C.uintptr_t, lda, strideA int, pb C.uintptr_t, ldb, strideB int, beta float32, pc C.uintptr_t, ldc, strideC int) error {
	if batch == 1 {
		if s := C.w_gemmEx(d.blas, cublasOp(transB), cublasOp(transA), C.int(n), C.int(m), C.int(k), C.float(alpha),
			pb, C.int(ldb), pa, C.int(lda), C.float(beta), pc, C.int(ldc), d.compute, 0, 0); s != 0 {
			return blasErr("cublasGemmEx", s)
		}
		return nil
	}
	if s := C.w_gemmStridedBatchedEx(d.blas, cublasOp(transB), cublasOp(transA), C.int(n), C.int(m), C.int(k), C.float(alpha),
		pb, C.int(ldb), C.longlong(strideB), pa, C.int(lda), C.longlong(strideA),
		C.float(beta), pc, C.int(ldc), C.longlong(strideC), C.int(batch), d.compute, 0); s != 0 {
		return blasErr("cublasGemmStridedBatchedEx", s)
	}
	return nil
}

// gemmTyped is one cublasGemmEx with A and B of cudaDataType_t abtype, C
// float32 and CUBLAS_COMPUTE_32F, row-major as Gemm. Called in exec.
func (d *device) gemmTyped(transA, transB bool, m, n, k int, alpha float32, pa C.uintptr_t, lda int, pb C.uintptr_t, ldb int, beta float32, pc C.uintptr_t, ldc int, abtype C.int) error {
	return d.gemmTypedC(transA, transB, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc, abtype, 0)
}

// gemmTypedC is gemmTyped with C of cudaDataType_t ctype (0: float32, or
// abtype: the float32 sums rounded to it). Called in exec.
func (d *device) gemmTypedC(transA, transB bool, m, n, k int, alpha float32, pa C.uintptr_t, lda int, pb C.uintptr_t, ldb int, beta float32, pc C.uintptr_t, ldc int, abtype, ctype C.int) error {
	if s := C.w_gemmEx(d.blas, cublasOp(transB), cublasOp(transA), C.int(n), C.int(m), C.int(k), C.float(alpha),
		pb, C.int(ldb), pa, C.int(lda), C.float(beta), pc, C.int(ldc), cublasCompute32F, abtype, ctype); s != 0 {
		return blasErr("cublasGemmEx", s)
	}
	return nil
}

// gemmTypedBatched is gemmTyped over batch products: one
// cublasGemmStridedBatchedEx, the strides in elements of each operand's
// type. Called in exec.
func (d *device) gemmTypedBatched(transA, transB bool, batch, m, n, k int, alpha float32, pa C.uintptr_t, lda, strideA int, pb C.uintptr_t, ldb, strideB int, beta float32, pc C.uintptr_t, ldc, strideC int, abtype C.int) error {
	if s := C.w_gemmStridedBatchedEx(d.blas, cublasOp(transB), cublasOp(transA), C.int(n), C.int(m), C.int(k), C.float(alpha),
		pb, C.int(ldb), C.longlong(strideB), pa, C.int(lda), C.longlong(strideA),
		C.float(beta), pc, C.int(ldc), C.longlong(strideC), C.int(batch), cublasCompute32F, abtype); s != 0 {
		return blasErr("cublasGemmStridedBatchedEx", s)
	}
	return nil
}

// args packs kernel parameters in 8-byte slots (w_launch).
type args []byte

func (a *args) ptr(p C.uintptr_t) { *a = binary.LittleEndian.AppendUint64(*a, uint64(p)) }
func (a *args) i32(v int)         { *a = binary.LittleEndian.AppendUint64(*a, uint64(uint32(int32(v)))) }
func (a *args) f32(v float32)     { *a = binary.LittleEndian.AppendUint64(*a, uint64(math.Float32bits(v))) }
func (a *args) f64(v float64)     { *a = binary.LittleEndian.AppendUint64(*a, math.Float64bits(v)) }

// launch runs kernel name on grid blocks of rowwiseBlock threads.
func (d *device) launch(name string, grid int, a args) error {
	if grid == 0 {
		return nil
	}
	return d.exec(func() error {
		if s := C.w_launch(d.fn[name], C.uint(grid), rowwiseBlock, unsafe.Pointer(&a[0]), C.int(len(a)/8), d.stream); s != 0 {
			return drvErr("cuLaunchKernel("+name+")", s)
		}
		return nil
	})
}

// elementGrid is the number of blocks for n values: one value per thread,
// capped (the kernels loop over the rest).
func elementGrid(n int) int { return min((n+rowwiseBlock-1)/rowwiseBlock, 1<<16) }

// ptrs checks buffers of n values each.
func (d *device) ptrs(what string, n int, bs ...kernel.Buf) ([]C.uintptr_t, error) {
	if !fits32(n) {
		return nil, fmt.Errorf("gpu: %s: %d values", what, n)
	}
	ps := make([]C.uintptr_t, len(bs))
	for i, b := range bs {
		var err error
		if ps[i], err = d.ptr(what, b, n); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// optPtrs is ptrs for buffers that may be nil (outputs not wanted), which
// give 0, the kernels' null.
func (d *device) optPtrs(what string, n int, bs ...kernel.Buf) ([]C.uintptr_t, error) {
	ps := make([]C.uintptr_t, len(bs))
	for i, b := range bs {
		if b == nil {
			continue
		}
		p, err := d.ptrs(what, n, b)
		if err != nil {
			return nil, err
		}
		ps[i] = p[0]
	}
	return ps, nil
}

func (d *device) LayerNorm(y, x kernel.Buf, rows, cols int, gamma, beta kernel.Buf, eps float64, mean, rstd kernel.Buf) error {
	return d.layerNorm("LayerNorm", y, x, rows, cols, gamma, beta, eps, mean, rstd, nil, nil)
}

// LayerNormResidual runs layer_norm (or layer_norm_rows) writing res = x +
// bias as well.
func (d *device) LayerNormResidual(y, x kernel.Buf, rows, cols int, gamma, beta kernel.Buf, eps float64, mean, rstd, res, bias kernel.Buf) error {
	if res == nil {
		return fmt.Errorf("gpu: LayerNormResidual: no residual buffer")
	}
	return d.layerNorm("LayerNormResidual", y, x, rows, cols, gamma, beta, eps, mean, rstd, res, bias)
}

// layerNorm is LayerNorm, and LayerNormResidual where res is set.
func (d *device) layerNorm(what string, y, x kernel.Buf, rows, cols int, gamma, beta kernel.Buf, eps float64, mean, rstd, res, bias kernel.Buf) error {
	if !fits32(rows, cols, rows*cols) {
		return fmt.Errorf("gpu: %s: %d×%d", what, rows, cols)
	}
	if (mean == nil) != (rstd == nil) {
		return fmt.Errorf("gpu: %s: mean and rstd must both be set or both nil", what)
	}
	p, err := d.ptrs(what, rows*cols, y, x)
	if err != nil {
		return err
	}
	g, err := d.ptrs(what, cols, gamma, beta)
	if err != nil {
		return err
	}
	st, err := d.optPtrs(what, rows, mean, rstd)
	if err != nil {
		return err
	}
	rb, err := d.residualPtrs(what, rows, cols, res, bias)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(p[0])
	a.ptr(p[1])
	if cols <= shortRow {
		a.i32(rows)
	}
	a.i32(cols)
	a.ptr(g[0])
	a.ptr(g[1])
	a.f64(eps)
	a.ptr(st[0])
	a.ptr(st[1])
	a.ptr(0) // y16: y in float32
	a.i32(0)
	a.ptr(rb[0])
	a.ptr(rb[1])
	if cols <= shortRow {
		return d.launch("layer_norm_rows", (rows+rowGroups-1)/rowGroups, a)
	}
	return d.launch("layer_norm", rows, a)
}

// residualPtrs returns the device addresses of layer_norm's res [rows,
// cols] and bias (cols values), each 0 when nil; bias is unread without
// res.
func (d *device) residualPtrs(what string, rows, cols int, res, bias kernel.Buf) ([]C.uintptr_t, error) {
	ps := make([]C.uintptr_t, 2)
	if res == nil {
		return ps, nil
	}
	p, err := d.ptrs(what, rows*cols, res)
	if err != nil {
		return nil, err
	}
	pb, err := d.optPtrs(what, cols, bias)
	if err != nil {
		return nil, err
	}
	ps[0], ps[1] = p[0], pb[0]
	return ps, nil
}

// LayerNormBackward runs layer_norm_backward (one block per row, or
// layer_norm_backward_rows, a group of 32 threads per row, for rows of up
// to shortRow values) for dx and layer_norm_param_grads (one block per
// paramGradCols columns) for dgamma and dbeta, or over many rows
// layer_norm_param_partials (a block per paramGradCols columns and chunk of
// about paramGradRows rows) and layer_norm_param_sum.
func (d *device) LayerNormBackward(dx, dgamma, dbeta, dy, x kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	return d.layerNormBackward("LayerNormBackward", dx, dgamma, dbeta, dy, x, nil, rows, cols, gamma, mean, rstd)
}

// LayerNormBackwardResidual is LayerNormBackward whose input-gradient
// kernel adds res to dx.
func (d *device) LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	if dx == nil || res == nil {
		return fmt.Errorf("gpu: LayerNormBackwardResidual: dx and res must be set")
	}
	return d.layerNormBackward("LayerNormBackwardResidual", dx, dgamma, dbeta, dy, x, res, rows, cols, gamma, mean, rstd)
}

// layerNormBackward is LayerNormBackward, and LayerNormBackwardResidual
// where res is set.
func (d *device) layerNormBackward(what string, dx, dgamma, dbeta, dy, x, res kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	if !fits32(rows, cols, rows*cols) {
		return fmt.Errorf("gpu: %s: %d×%d", what, rows, cols)
	}
	if (dgamma == nil) != (dbeta == nil) {
		return fmt.Errorf("gpu: %s: dgamma and dbeta must both be set or both nil", what)
	}
	p, err := d.ptrs(what, rows*cols, dy, x)
	if err != nil {
		return err
	}
	dp, err := d.optPtrs(what, rows*cols, dx, res)
	if err != nil {
		return err
	}
	g, err := d.ptrs(what, cols, gamma)
	if err != nil {
		return err
	}
	st, err := d.ptrs(what, rows, mean, rstd)
	if err != nil {
		return err
	}
	pg, err := d.optPtrs(what, cols, dgamma, dbeta)
	if err != nil || cols == 0 {
		return err
	}
	if dx != nil && rows > 0 {
		var a args
		a.ptr(dp[0])
		a.ptr(p[0])
		a.ptr(p[1])
		if cols <= shortRow {
			a.i32(rows)
		}
		a.i32(cols)
		a.ptr(g[0])
		a.ptr(st[0])
		a.ptr(st[1])
		a.ptr(dp[1]) // res, 0 when nil
		name, grid := "layer_norm_backward", rows
		if cols <= shortRow {
			name, grid = "layer_norm_backward_rows", (rows+rowGroups-1)/rowGroups
		}
		if err := d.launch(name, grid, a); err != nil {
			return err
		}
	}
	if dgamma == nil {
		return nil
	}
	colBlocks := (cols + paramGradCols - 1) / paramGradCols
	chunks := min(rows/paramGradRows, 64)
	if chunks < 2 || !fits32(colBlocks*chunks, 4*chunks*cols) {
		var a args
		a.ptr(pg[0])
		a.ptr(pg[1])
		a.ptr(p[0])
		a.ptr(p[1])
		a.i32(rows)
		a.i32(cols)
		a.ptr(st[0])
		a.ptr(st[1])
		return d.launch("layer_norm_param_grads", colBlocks, a)
	}
	// The chunks' sums in double: 2·chunks·cols doubles as float32 values.
	part, err := d.Alloc(4 * chunks * cols)
	if err != nil {
		return err
	}
	defer d.Free(part) // its next use is queued after these kernels
	pp, _ := d.ptr(what, part, 0)
	var a args
	a.ptr(pp)
	a.ptr(p[0])
	a.ptr(p[1])
	a.i32(rows)
	a.i32(cols)
	a.i32(chunks)
	a.ptr(st[0])
	a.ptr(st[1])
	if err := d.launch("layer_norm_param_partials", colBlocks*chunks, a); err != nil {
		return err
	}
	var b args
	b.ptr(pg[0])
	b.ptr(pg[1])
	b.ptr(pp)
	b.i32(cols)
	b.i32(chunks)
	return d.launch("layer_norm_param_sum", elementGrid(cols), b)
}

func (d *device) Softmax(y, x kernel.Buf, rows, cols int, scale float32, causal bool) error {
	if !fits32(rows, cols, rows*cols) {
		return fmt.Errorf("gpu: Softmax: %d×%d", rows, cols)
	}
	p, err := d.ptrs("Softmax", rows*cols, y, x)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(p[0])
	a.ptr(p[1])
	if cols <= shortRow {
		a.i32(rows)
	}
	a.i32(cols)
	a.f32(scale)
	if causal {
		a.i32(1)
	} else {
		a.i32(0)
	}
	a.ptr(0) // y16: float32
	a.i32(0)
	if cols <= shortRow {
		return d.launch("softmax_rows", (rows+rowGroups-1)/rowGroups, a)
	}
	return d.launch("softmax", rows, a)
}

func (d *device) SoftmaxBackward(dx, dy, y kernel.Buf, rows, cols int, scale float32) error {
	if !fits32(rows, cols, rows*cols) {
		return fmt.Errorf("gpu: SoftmaxBackward: %d×%d", rows, cols)
	}
	p, err := d.ptrs("SoftmaxBackward", rows*cols, dx, dy, y)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(p[0])
	a.ptr(p[1])
	a.ptr(p[2])
	if cols <= shortRow {
		a.i32(rows)
	}
	a.i32(cols)
	a.f32(scale)
	if cols <= shortRow {
		return d.launch("softmax_backward_rows", (rows+rowGroups-1)/rowGroups, a)
	}
	return d.launch("softmax_backward", rows, a)
}

func (d *device) elementwise(name string, n int, bs ...kernel.Buf) error {
	p, err := d.ptrs(name, n, bs...)
	if err != nil || n == 0 {
		return err
	}
	var a args
	for _, q := range p {
		a.ptr(q)
	}
	a.i32(n)
	return d.launch(name, elementGrid(n), a)
}

func (d *device) QuickGELU(y, x kernel.Buf, n int) error { return d.elementwise("quick_gelu", n, y, x) }
func (d *device) GELU(y, x kernel.Buf, n int) error      { return d.elementwise("gelu", n, y, x) }
func (d *device) Add(y, a, b kernel.Buf, n int) error    { return d.elementwise("add", n, y, a, b) }
func (d *device) Mul(y, a, b kernel.Buf, n int) error    { return d.elementwise("mul", n, y, a, b) }
func (d *device) QuickGELUSlope(y, slope, x kernel.Buf, n int) error {
	return d.elementwise("quick_gelu_slope", n, y, slope, x)
}
func (d *device) GELUSlope(slope, x kernel.Buf, n int) error {
	return d.elementwise("gelu_slope", n, slope, x)
}

func (d *device) FillRows(y kernel.Buf, rows, cols int, v kernel.Buf) error {
	if !fits32(rows, cols, rows*cols) {
		return fmt.Errorf("gpu: FillRows: %d×%d", rows, cols)
	}
	p, err := d.ptrs("FillRows", rows*cols, y)
	if err != nil {
		return err
	}
	q, err := d.ptrs("FillRows", cols, v)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(p[0])
	a.i32(rows)
	a.i32(cols)
	a.ptr(q[0])
	return d.launch("fill_rows", elementGrid(rows*cols), a)
}

func (d *device) Patches(y, x kernel.Buf, batch, channels, height, width, patch int) error {
	if batch < 0 || channels <= 0 || patch <= 0 || height < patch || width < patch {
		return fmt.Errorf("gpu: Patches: %d images of %d×%d×%d in patches of %d", batch, channels, height, width, patch)
	}
	nx, ny := batch*channels*height*width, batch*(height/patch)*(width/patch)*channels*patch*patch
	py, err := d.ptrs("Patches", ny, y)
	if err != nil {
		return err
	}
	px, err := d.ptrs("Patches", nx, x)
	if err != nil || ny == 0 {
		return err
	}
	var a args
	a.ptr(py[0])
	a.ptr(px[0])
	for _, v := range []int{batch, channels, height, width, patch} {
		a.i32(v)
	}
	return d.launch("patches", elementGrid(ny), a)
}

func (d *device) TokenEmbed(y, patches, class, pos kernel.Buf, batch, grid, width int) error {
	if batch < 0 || grid < 0 || width < 0 {
		return fmt.Errorf("gpu: TokenEmbed: %d images of %d patches of %d values", batch, grid, width)
	}
	n := batch * (grid + 1) * width
	py, err := d.ptrs("TokenEmbed", n, y)
	if err != nil {
		return err
	}
	pp, err := d.ptrs("TokenEmbed", batch*grid*width, patches)
	if err != nil {
		return err
	}
	pc, err := d.ptrs("TokenEmbed", width, class)
	if err != nil {
		return err
	}
	ppos, err := d.ptrs("TokenEmbed", (grid+1)*width, pos)
	if err != nil || n == 0 {
		return err
	}
	var a args
	a.ptr(py[0])
	a.ptr(pp[0])
	a.ptr(pc[0])
	a.ptr(ppos[0])
	a.i32(batch)
	a.i32(grid)
	a.i32(width)
	return d.launch("token_embed", elementGrid(n), a)
}

func (d *device) StrideRows(y, x kernel.Buf, n, cols, step int) error {
	return d.strided("StrideRows", "stride_rows", y, x, x, y, n, cols, step)
}

func (d *device) SpreadRows(y, x kernel.Buf, n, cols, step int) error {
	return d.strided("SpreadRows", "spread_rows", y, x, y, x, n, cols, step)
}

// strided launches fn (stride_rows or spread_rows) on y and x, where
// wide holds the rows step apart and dense the n rows.
func (d *device) strided(what, fn string, y, x, wide, dense kernel.Buf, n, cols, step int) error {
	if n < 0 || cols < 0 || step < 1 {
		return fmt.Errorf("gpu: %s: %d rows of %d values, %d apart", what, n, cols, step)
	}
	if n == 0 || cols == 0 {
		return nil
	}
	if _, err := d.ptrs(what, (n-1)*step*cols+cols, wide); err != nil {
		return err
	}
	if _, err := d.ptrs(what, n*cols, dense); err != nil {
		return err
	}
	py, _ := d.ptr(what, y, 0)
	px, _ := d.ptr(what, x, 0)
	var a args
	a.ptr(py)
	a.ptr(px)
	a.i32(n)
	a.i32(cols)
	a.i32(step)
	return d.launch(fn, elementGrid(n*cols), a)
}

func (d *device) SplitHeads(y, x kernel.Buf, batch, tokens, groups, heads, headDim int) error {
	return d.heads("SplitHeads", y, x, 0, batch, tokens, groups, heads, headDim, false)
}

func (d *device) MergeHeads(x, y kernel.Buf, batch, tokens, groups, heads, headDim int) error {
	return d.heads("MergeHeads", y, x, 0, batch, tokens, groups, heads, headDim, true)
}

// heads runs split_heads between s (the split layout) and m (the merged
// one), into m when merge; a split adds bias (0: none) to each token's row.
func (d *device) heads(what string, s, m kernel.Buf, bias C.uintptr_t, batch, tokens, groups, heads, headDim int, merge bool) error {
	if batch < 0 || tokens < 0 || groups < 0 || heads < 0 || headDim < 0 {
		return fmt.Errorf("gpu: %s: [%d, %d, %d·%d·%d]", what, batch, tokens, groups, heads, headDim)
	}
	n := batch * tokens * groups * heads * headDim
	p, err := d.ptrs(what, n, s, m)
	if err != nil || n == 0 {
		return err
	}
	var a args
	a.ptr(p[0])
	a.ptr(p[1])
	for _, v := range []int{batch, tokens, groups, heads, headDim} {
		a.i32(v)
	}
	if merge {
		a.i32(1)
	} else {
		a.i32(0)
	}
	a.ptr(0) // h16: float32
	a.i32(0)
	a.ptr(bias)
	w := runWidth(headDim, 4, 16, p[0], p[1])
	a.i32(w)
	return d.launch("split_heads", elementGrid(n/w), a)
}

// runWidth returns w where k is a multiple of w and every pointer one of
// align bytes, else 1: how many values of a head's or a row's k a thread
// of split_heads, split_heads_half or bias_act_half takes, moved as one
// vector of align bytes when w > 1 (float4, uint4).
func runWidth(k, w int, align uintptr, ps ...C.uintptr_t) int {
	if k%w != 0 {
		return 1
	}
	for _, p := range ps {
		if uintptr(p)%align != 0 {
			return 1
		}
	}
	return w
}
