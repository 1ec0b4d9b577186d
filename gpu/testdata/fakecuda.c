// fakecuda.c stands in for libcudart, libcublas, libnvrtc and libcuda on a
// machine without CUDA, so that TestFakeCUDA can run the package's device
// tests through its real cgo code: the dlopen and symbol binding, the
// context and launch calls, the row-major to column-major operand swap and
// the packing of kernel parameters. "Device memory" is host memory;
// cublasSgemm is the column-major BLAS product (cublasGemmEx and
// cublasGemmStridedBatchedEx too, their float32 operands rounded as the
// compute type allows, their 16-bit ones widened exactly and summed in
// float32); asynchronous copies run late
// (see the stream below); NVRTC compiles the CUDA C
// it is given with g++ (fakecuda_emu.h supplies CUDA's keywords), and a
// launch runs that code, block after block, each block's threads as fibers
// meeting at every __syncthreads. It checks what it is given (kinds, block
// sizes, names, options) and fails as CUDA would. The same file is built
// once per soname.
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int status;

// The streams. Copies queued on the package's stream (cudaMemcpyAsync) run
// only when something needs them done: a kernel or a product (which run at
// once, so after every copy queued before them), a synchronisation, or an
// event passed to cudaEventSynchronize (the copies queued before its
// record). So a staging buffer written again before its copy ran, or a
// download read before the stream was synchronised, gives wrong values, as
// it may on a GPU. Only host memory from cudaMallocHost may take part in a
// copy: the package's copies are to be asynchronous.
//
// The second stream (cudaStreamCreateWithFlags, non-blocking: UploadAhead's
// copies) is later still: its copies run only at its synchronisation, at
// cudaEventSynchronize of an event recorded on it, at cudaFree, or when the
// package's stream is made to wait for such an event (cudaStreamWaitEvent,
// the package's Await); kernels and products do not run them. So a pass
// that reads an UploadAhead buffer without Await reads what was there
// before. Each of its copies first runs the package stream's copies that
// it was made to wait for (cudaStreamWaitEvent on the second stream): a
// copy into memory that a queued copy of the first stream still reads or
// writes, without that wait, gives wrong values too.

// The stream handles: one value each in every library (each is its own
// copy of this file, with its own state).
#define STREAM ((void *)(uintptr_t)0x57ea3)
#define STREAM2 ((void *)(uintptr_t)0x57ea4)
typedef struct { void *dst; const void *src; size_t bytes; long seq; long after; } queued_copy;
typedef struct {
	queued_copy q[4096];
	int n;
	long last;  // the last copy's sequence number
	long after; // STREAM2: the first stream's copies its next copies wait for
} copy_queue;
static copy_queue main_q, second_q;

static void run_copies(long seq);

// run_queue runs q's copies up to sequence number seq, each after the
// first stream's copies it waits for.
static void run_queue(copy_queue *q, long seq) {
	int i = 0;
	for (; i < q->n && q->q[i].seq <= seq; i++) {
		if (q == &second_q) run_copies(q->q[i].after);
		memcpy(q->q[i].dst, q->q[i].src, q->q[i].bytes);
	}
	memmove(q->q, q->q + i, (q->n - i) * sizeof q->q[0]);
	q->n -= i;
}

// run_copies runs the first stream's copies up to sequence number seq.
static void run_copies(long seq) { run_queue(&main_q, seq); }
static void run_own_copies(void) { run_copies(main_q.last); }
static void run_second_copies(long seq) { run_queue(&second_q, seq); }

// fake_run_all_copies runs the copies queued on the first stream in this
// library's state.
void fake_run_all_copies(void) { run_own_copies(); }

// rt_sym returns the runtime library's function name, wherever it is
// called from: the state of the streams and of a capture is that
// library's.
static void *rt_sym(const char *name) {
	void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
	void *f = h ? dlsym(h, name) : NULL;
	if (!f) {
		fprintf(stderr, "fake cuda: libcudart.so.13 is not loaded\n");
		abort();
	}
	return f;
}

// run_all_copies runs the copies queued on the first stream: those of the
// runtime library's state, wherever it is called from.
static void run_all_copies(void) {
	static void (*f)(void);
	if (!f) *(void **)&f = rt_sym("fake_run_all_copies");
	f();
}

// Graphs. While the package's stream is captured (cudaStreamBeginCapture),
// the kernels and products queued on it are recorded, not run; each
// cudaGraphLaunch runs them in order with the parameters they were given.
// A copy, an event recorded or waited for, or a synchronisation of that
// stream while it is captured fails with cudaErrorStreamCaptureUnsupported
// (900) and invalidates the capture, whose end then fails with
// cudaErrorStreamCaptureInvalidated (901); so does a float64 product or a
// solver call. So a pass that reads a result before the graph ran, or
// that copies through host memory a replay would not copy again, fails
// here.
typedef struct { void (*run)(const void *); char data[232]; } graph_node;
typedef struct { graph_node *nodes; int n, cap, invalid; } fake_graph;
static fake_graph *capturing; // the runtime library's

// fake_capture_push records run(data) when the package's stream is
// captured, and returns 1; else 0.
int fake_capture_push(void (*run)(const void *), const void *data, size_t len) {
	if (!capturing) return 0;
	if (len > sizeof capturing->nodes[0].data) abort();
	if (capturing->n == capturing->cap) {
		capturing->cap = capturing->cap ? 2 * capturing->cap : 64;
		capturing->nodes = realloc(capturing->nodes, capturing->cap * sizeof(graph_node));
	}
	graph_node *nd = &capturing->nodes[capturing->n++];
	nd->run = run;
	memcpy(nd->data, data, len);
	return 1;
}

// fake_capture_refuse invalidates the capture, if any, and returns 1 when
// there was one: the call that asks must then fail.
int fake_capture_refuse(void) {
	if (!capturing) return 0;
	capturing->invalid = 1;
	return 1;
}

// fake_capturing reports whether the package's stream is captured.
int fake_capturing(void) { return capturing != NULL; }

static int capture_push(void (*run)(const void *), const void *data, size_t len) {
	static int (*f)(void (*)(const void *), const void *, size_t);
	if (!f) *(void **)&f = rt_sym("fake_capture_push");
	return f(run, data, len);
}

static int capture_refuse(void) {
	static int (*f)(void);
	if (!f) *(void **)&f = rt_sym("fake_capture_refuse");
	return f();
}

static int capture_active(void) {
	static int (*f)(void);
	if (!f) *(void **)&f = rt_sym("fake_capturing");
	return f();
}

// sync_device runs every queued copy of both streams (in the runtime
// library, where they are queued): what a call that waits for the whole
// device does.
static void sync_device(void) {
	run_second_copies(second_q.last);
	run_own_copies();
}

typedef struct { char *p; size_t bytes; } pinned_region;
static pinned_region pinned[256];
static int npinned;

static int is_pinned(const void *p, size_t bytes) {
	for (int i = 0; i < npinned; i++)
		if ((const char *)p >= pinned[i].p && (const char *)p + bytes <= pinned[i].p + pinned[i].bytes) return 1;
	return 0;
}

// libcudart

status cudaGetDeviceCount(int *n) { *n = 1; return 0; }
status cudaMalloc(void **p, size_t bytes) {
	run_all_copies();
	if (bytes > ((size_t)1 << 36)) return 2; // cudaErrorMemoryAllocation
	// Aligned to 256 bytes, as cudaMalloc's memory is.
	return posix_memalign(p, 256, bytes ? bytes : 1) ? 2 : 0;
}
status cudaFree(void *p) { sync_device(); free(p); return 0; }
status cudaMallocHost(void **p, size_t bytes) {
	if (npinned == 256 || bytes > ((size_t)1 << 36)) return 2;
	*p = malloc(bytes ? bytes : 1);
	if (!*p) return 2;
	pinned[npinned++] = (pinned_region){*p, bytes};
	return 0;
}
status cudaFreeHost(void *p) {
	for (int i = 0; i < npinned; i++)
		if (pinned[i].p == p) {
			sync_device(); // CUDA waits for the device before freeing
			free(p);
			pinned[i] = pinned[--npinned];
			return 0;
		}
	return 1; // cudaErrorInvalidValue
}
status cudaStreamCreate(void **s) { *s = STREAM; return 0; }
status cudaStreamCreateWithFlags(void **s, unsigned flags) {
	if (flags != 1) return 1; // the package's second stream is non-blocking
	*s = STREAM2;
	return 0;
}
status cudaStreamDestroy(void *s) { return s == STREAM || s == STREAM2 ? 0 : 400; }
status cudaStreamSynchronize(void *s) {
	if (s == STREAM && capture_refuse()) return 900;
	if (s == STREAM2) {
		run_second_copies(second_q.last);
		return 0;
	}
	if (s != STREAM) return 400; // cudaErrorInvalidResourceHandle
	run_own_copies();
	return 0;
}
status cudaMemcpyAsync(void *dst, const void *src, size_t bytes, int kind, void *stream) {
	if (stream != STREAM && stream != STREAM2) return 400;
	if (kind != 1 && kind != 2) return 21;
	if (stream == STREAM && capture_refuse()) return 900;
	if (!is_pinned(kind == 1 ? src : dst, bytes)) {
		fprintf(stderr, "fake cuda: cudaMemcpyAsync with pageable host memory\n");
		return 1;
	}
	copy_queue *q = stream == STREAM ? &main_q : &second_q;
	if (q->n == 4096) run_queue(q, q->last);
	q->last++;
	q->q[q->n++] = (queued_copy){dst, src, bytes, q->last, q == &second_q ? second_q.after : 0};
	return 0;
}
typedef struct { long seq; int recorded; void *stream; } event;
status cudaEventCreateWithFlags(void **e, unsigned flags) {
	if (flags != 2) return 1; // the package's events take no timing
	*e = calloc(1, sizeof(event));
	return 0;
}
status cudaEventDestroy(void *e) { free(e); return 0; }
status cudaEventRecord(void *e, void *stream) {
	if (stream != STREAM && stream != STREAM2) return 400;
	if (stream == STREAM && capture_refuse()) return 900;
	((event *)e)->seq = stream == STREAM ? main_q.last : second_q.last;
	((event *)e)->recorded = 1;
	((event *)e)->stream = stream;
	return 0;
}
status cudaEventSynchronize(void *e) {
	event *ev = e;
	if (ev->stream == STREAM2) run_second_copies(ev->seq);
	else run_copies(ev->seq);
	return 0;
}
// cudaStreamWaitEvent: the package's stream waiting for the second's
// copies runs them now (its later work runs at once); the second waiting
// for the first marks its later copies as waiting for the first's copies
// queued up to the event.
status cudaStreamWaitEvent(void *s, void *e, unsigned flags) {
	event *ev = e;
	if (flags != 0 || (s != STREAM && s != STREAM2)) return 1;
	if (s == STREAM && capture_refuse()) return 900;
	if (!ev->recorded) return 0; // CUDA: an event never recorded has passed
	if (s == STREAM && ev->stream == STREAM2) run_second_copies(ev->seq);
	if (s == STREAM2 && ev->stream == STREAM && ev->seq > second_q.after) second_q.after = ev->seq;
	return 0;
}
status cudaMemcpy(void *dst, const void *src, size_t bytes, int kind) {
	if (kind != 1 && kind != 2) return 21; // cudaErrorInvalidMemcpyDirection
	if (capture_refuse()) return 900;
	memcpy(dst, src, bytes);
	return 0;
}
status cudaStreamBeginCapture(void *s, int mode) {
	if (s != STREAM) return 400;
	if (mode < 0 || mode > 2) return 1;
	if (capturing) return 900;
	capturing = calloc(1, sizeof *capturing);
	return 0;
}
status cudaStreamEndCapture(void *s, void **g) {
	if (s != STREAM) return 400;
	if (!capturing) return 903; // cudaErrorStreamCaptureUnmatched
	fake_graph *fg = capturing;
	capturing = NULL;
	if (fg->invalid) {
		free(fg->nodes);
		free(fg);
		*g = NULL;
		return 901;
	}
	*g = fg;
	return 0;
}
typedef struct { fake_graph *g; } graph_exec;
status cudaGraphInstantiateWithFlags(void **e, void *g, unsigned long long flags) {
	if (!g || flags != 0) return 1;
	graph_exec *x = malloc(sizeof *x);
	x->g = g;
	*e = x;
	return 0;
}
status cudaGraphLaunch(void *e, void *s) {
	if (s != STREAM) return 400;
	if (capturing) return 900;
	fake_graph *g = ((graph_exec *)e)->g;
	for (int i = 0; i < g->n; i++) g->nodes[i].run(g->nodes[i].data);
	return 0;
}
status cudaGraphExecDestroy(void *e) { free(e); return 0; }
status cudaGraphDestroy(void *g) {
	free(((fake_graph *)g)->nodes);
	free(g);
	return 0;
}
status cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
status cudaDeviceGetAttribute(int *v, int attr, int dev) {
	if (dev != 0) return 101; // cudaErrorInvalidDevice
	if (attr == 75) { *v = 9; return 0; }
	if (attr == 76) { *v = 0; return 0; }
	return 1;
}
const char *cudaGetErrorName(status s) {
	switch (s) {
	case 2: return "cudaErrorMemoryAllocation";
	case 21: return "cudaErrorInvalidMemcpyDirection";
	case 900: return "cudaErrorStreamCaptureUnsupported";
	case 901: return "cudaErrorStreamCaptureInvalidated";
	}
	return "cudaErrorUnknown";
}

// libcublas

static int handle_token, math_mode;
static void *blas_stream;
// blas_workspace is the memory cublasSetWorkspace_v2 gave the handle; NULL
// while cuBLAS would use its default pool, which cublasSetStream_v2 goes
// back to, as cuBLAS's does.
static void *blas_workspace;
status cublasCreate_v2(void **h) {
	*h = &handle_token;
	blas_stream = blas_workspace = NULL;
	math_mode = 0;
	return 0;
}
status cublasDestroy_v2(void *h) { return h == &handle_token ? 0 : 1; }
// cublasSetWorkspace_v2 refuses memory not aligned to 256 bytes, as
// cuBLAS does (CUBLAS_STATUS_INVALID_VALUE).
status cublasSetWorkspace_v2(void *h, void *w, size_t bytes) {
	if (h != &handle_token || (uintptr_t)w % 256 != 0 || (w == NULL) != (bytes == 0)) return 7;
	blas_workspace = w;
	return 0;
}
status cublasSetMathMode(void *h, int mode) {
	if (mode != 0 && mode != 3) return 7;
	math_mode = mode;
	return 0;
}
status cublasSetStream_v2(void *h, void *s) {
	if (h != &handle_token || s != STREAM) return 7;
	blas_stream = s;
	blas_workspace = NULL;
	return 0;
}

// The operands' rounding of a compute type (cublasComputeType_t): 68
// none, 74 IEEE half, 75 bfloat16, 77 TF32 (also CUBLAS_TF32_TENSOR_OP_MATH
// with 68); the products and sums then in double, as sgemm1's.
static int operand_rounding;

static float round_mantissa(float x, int drop) {
	uint32_t b;
	memcpy(&b, &x, 4);
	if ((b & 0x7f800000) == 0x7f800000) return x; // inf, NaN
	b += ((uint32_t)1 << (drop - 1)) - 1 + ((b >> drop) & 1); // to nearest, ties to even
	b &= ~(((uint32_t)1 << drop) - 1);
	memcpy(&x, &b, 4);
	return x;
}

static double rounded(float x) {
	switch (operand_rounding) {
	case 74: return (double)(float)(_Float16)x;
	case 75: return round_mantissa(x, 16);
	case 77: return round_mantissa(x, 13);
	}
	return x;
}

// operand returns value i of an operand of cudaDataType_t type: float32
// (0) rounded as the compute type says; IEEE half (2) or bfloat16 (14)
// widened exactly, as a tensor core reads them.
static double operand(const void *x, long i, int type) {
	if (type == 2) return (double)((const _Float16 *)x)[i];
	if (type == 14) {
		uint32_t b = (uint32_t)((const uint16_t *)x)[i] << 16;
		float f;
		memcpy(&f, &b, 4);
		return f;
	}
	return rounded(((const float *)x)[i]);
}

// sgemm1 is one column-major product. Float32 operands (abtype 0) are
// rounded as the compute type says and their products summed in double;
// 16-bit operands (CUDA_R_16F, CUDA_R_16BF), read exactly, have products
// exact in float32 (11 or 8 bits of mantissa each), which are summed in
// float32 in order of k, and alpha and beta applied in float32: what
// CUBLAS_COMPUTE_32F promises, float32 accumulation, rounded the plainest
// way (a tensor core's order of summation differs, not its precision).
// With ctype 2 or 14 (with 16-bit A and B) C is 16-bit too: beta's C is
// read exactly and the float32 result rounded to nearest, ties to even.
static uint16_t to16(float v, int type) {
	if (type == 2) {
		_Float16 h = (_Float16)v;
		uint16_t u;
		memcpy(&u, &h, 2);
		return u;
	}
	uint32_t b;
	memcpy(&b, &v, 4);
	if ((b & 0x7fffffff) > 0x7f800000) return (uint16_t)(b >> 16 | 0x40); // NaN stays NaN
	return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

static void sgemm1(int ta, int tb, int m, int n, int k, float alpha, const void *a, int lda,
		const void *b, int ldb, float beta, void *c, int ldc, int abtype, int ctype) {
	// op(A) by rows and op(B) by columns, each operand rounded once.
	double *ar = malloc(sizeof(double) * ((size_t)m * k + 1)), *bc = malloc(sizeof(double) * ((size_t)n * k + 1));
	for (int i = 0; i < m; i++)
		for (int p = 0; p < k; p++) ar[(long)i * k + p] = operand(a, ta ? p + (long)i * lda : i + (long)p * lda, abtype);
	for (int j = 0; j < n; j++)
		for (int p = 0; p < k; p++) bc[(long)j * k + p] = operand(b, tb ? j + (long)p * ldb : p + (long)j * ldb, abtype);
	for (int j = 0; j < n; j++) {
		for (int i = 0; i < m; i++) {
			const double *x = ar + (long)i * k, *y = bc + (long)j * k;
			long ci = i + (long)j * ldc;
			if (abtype == 2 || abtype == 14) {
				float s = 0;
				for (int p = 0; p < k; p++) s += (float)x[p] * (float)y[p];
				float as = alpha * s;
				if (ctype != 0) {
					uint16_t *cv = (uint16_t *)c + ci;
					*cv = to16(beta == 0 ? as : as + beta * (float)operand(c, ci, ctype), ctype);
					continue;
				}
				float *cv = (float *)c + ci;
				*cv = beta == 0 ? as : as + beta * *cv;
				continue;
			}
			float *cv = (float *)c + ci;
			double s = 0;
			for (int p = 0; p < k; p++) s += x[p] * y[p];
			*cv = beta == 0 ? (float)(alpha * s) : (float)(alpha * s + beta * *cv);
		}
	}
	free(ar);
	free(bc);
}

static status check_gemm(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc) {
	if (blas_stream != STREAM) return 7; // the package's products go to its stream
	// A product recorded on cuBLAS's default pool would have the recording
	// allocate a workspace of its own: refused (CUBLAS_STATUS_NOT_SUPPORTED),
	// so that a test recording a pass fails unless the package gave the
	// handle its workspace after its last cublasSetStream_v2.
	if (!blas_workspace && capture_active()) return 15;
	run_all_copies();
	operand_rounding = math_mode == 3 ? 77 : 68;
	if (ta < 0 || ta > 1 || tb < 0 || tb > 1 || m < 0 || n < 0 || k < 0) return 7; // INVALID_VALUE
	if (lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
	return 0;
}

// A product recorded by a capture: every argument of the four float
// products, and which one it was.
typedef struct {
	int kind; // 0 Sgemm, 1 SgemmStridedBatched, 2 GemmEx, 3 GemmStridedBatchedEx
	int ta, tb, m, n, k, lda, ldb, ldc, atype, ctype, compute, batch;
	float alpha, beta;
	const void *a, *b;
	void *c;
	long long sa, sb, sc;
} gemm_rec;

status cublasSgemm_v2(void *, int, int, int, int, int, const float *, const float *, int, const float *, int, const float *, float *, int);
status cublasSgemmStridedBatched(void *, int, int, int, int, int, const float *, const float *, int, long long,
	const float *, int, long long, const float *, float *, int, long long, int);
status cublasGemmEx(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
	const void *, void *, int, int, int, int);
status cublasGemmStridedBatchedEx(void *, int, int, int, int, int, const void *, const void *, int, int, long long,
	const void *, int, int, long long, const void *, void *, int, int, long long, int, int, int);

static void replay_gemm(const void *p) {
	const gemm_rec *r = p;
	status s = 0;
	switch (r->kind) {
	case 0:
		s = cublasSgemm_v2(&handle_token, r->ta, r->tb, r->m, r->n, r->k, &r->alpha, r->a, r->lda, r->b, r->ldb, &r->beta, r->c, r->ldc);
		break;
	case 1:
		s = cublasSgemmStridedBatched(&handle_token, r->ta, r->tb, r->m, r->n, r->k, &r->alpha, r->a, r->lda, r->sa,
			r->b, r->ldb, r->sb, &r->beta, r->c, r->ldc, r->sc, r->batch);
		break;
	case 2:
		s = cublasGemmEx(&handle_token, r->ta, r->tb, r->m, r->n, r->k, &r->alpha, r->a, r->atype, r->lda, r->b, r->atype, r->ldb,
			&r->beta, r->c, r->ctype, r->ldc, r->compute, -1);
		break;
	case 3:
		s = cublasGemmStridedBatchedEx(&handle_token, r->ta, r->tb, r->m, r->n, r->k, &r->alpha, r->a, r->atype, r->lda, r->sa,
			r->b, r->atype, r->ldb, r->sb, &r->beta, r->c, r->ctype, r->ldc, r->sc, r->batch, r->compute, -1);
		break;
	}
	if (s) {
		fprintf(stderr, "fake cuda: a recorded product failed: %d\n", s);
		abort();
	}
}

status cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
		const float *a, int lda, const float *b, int ldb, const float *beta, float *c, int ldc) {
	status s = check_gemm(ta, tb, m, n, k, lda, ldb, ldc);
	if (s) return s;
	gemm_rec r = {.kind = 0, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
		.alpha = *alpha, .beta = *beta, .a = a, .b = b, .c = c};
	if (capture_push(replay_gemm, &r, sizeof r)) return 0;
	sgemm1(ta, tb, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc, 0, 0);
	return 0;
}

status cublasSgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
		const float *a, int lda, long long sa, const float *b, int ldb, long long sb,
		const float *beta, float *c, int ldc, long long sc, int batch) {
	status s = check_gemm(ta, tb, m, n, k, lda, ldb, ldc);
	if (s) return s;
	gemm_rec r = {.kind = 1, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc, .batch = batch,
		.alpha = *alpha, .beta = *beta, .a = a, .b = b, .c = c, .sa = sa, .sb = sb, .sc = sc};
	if (capture_push(replay_gemm, &r, sizeof r)) return 0;
	for (int i = 0; i < batch; i++)
		sgemm1(ta, tb, m, n, k, *alpha, a + i * sa, lda, b + i * sb, ldb, *beta, c + i * sc, ldc, 0, 0);
	return 0;
}

// check_ex accepts float32 operands with any of the package's compute
// types, and 16-bit ones (CUDA_R_16F = 2, CUDA_R_16BF = 14; A's type is
// B's) with CUBLAS_COMPUTE_32F only; C float32 (or, with 16-bit A and B,
// of their type), the default algorithm.
static int check_ex(int atype, int btype, int ctype, int compute, int algo) {
	if (atype != btype || (ctype != 0 && ctype != atype) || algo != -1) return 7;
	if (atype == 2 || atype == 14) return compute == 68 ? 0 : 7;
	if (atype != 0) return 7;
	if (compute != 68 && compute != 74 && compute != 75 && compute != 77) return 7;
	return 0;
}

status cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
		const void *a, int atype, int lda, const void *b, int btype, int ldb,
		const void *beta, void *c, int ctype, int ldc, int compute, int algo) {
	status s = check_gemm(ta, tb, m, n, k, lda, ldb, ldc);
	if (s || (s = check_ex(atype, btype, ctype, compute, algo))) return s;
	gemm_rec r = {.kind = 2, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
		.atype = atype, .ctype = ctype, .compute = compute,
		.alpha = *(const float *)alpha, .beta = *(const float *)beta, .a = a, .b = b, .c = c};
	if (capture_push(replay_gemm, &r, sizeof r)) return 0;
	if (compute != 68) operand_rounding = compute;
	sgemm1(ta, tb, m, n, k, *(const float *)alpha, a, lda, b, ldb, *(const float *)beta, c, ldc, atype, ctype);
	return 0;
}

status cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
		const void *a, int atype, int lda, long long sa, const void *b, int btype, int ldb, long long sb,
		const void *beta, void *c, int ctype, int ldc, long long sc, int batch, int compute, int algo) {
	status s = check_gemm(ta, tb, m, n, k, lda, ldb, ldc);
	if (s || (s = check_ex(atype, btype, ctype, compute, algo))) return s;
	gemm_rec r = {.kind = 3, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc, .batch = batch,
		.atype = atype, .ctype = ctype, .compute = compute,
		.alpha = *(const float *)alpha, .beta = *(const float *)beta, .a = a, .b = b, .c = c, .sa = sa, .sb = sb, .sc = sc};
	if (capture_push(replay_gemm, &r, sizeof r)) return 0;
	if (compute != 68) operand_rounding = compute;
	size_t size = atype == 0 ? 4 : 2, csize = ctype == 0 ? 4 : 2; // an element: float32, or 16 bits
	for (int i = 0; i < batch; i++)
		sgemm1(ta, tb, m, n, k, *(const float *)alpha, (const char *)a + i * sa * size, lda, (const char *)b + i * sb * size, ldb,
			*(const float *)beta, (char *)c + i * sc * csize, ldc, atype, ctype);
	return 0;
}

// libcusolver: the symmetric eigensolver by cyclic Jacobi rotations in
// double, on the column-major matrix (the eigenvectors end in its columns).

static int solver_token;
status cusolverDnCreate(void **h) { *h = &solver_token; return 0; }
static void *solver_stream;
status cusolverDnDestroy(void *h) { solver_stream = NULL; return h == &solver_token ? 0 : 1; }
status cusolverDnSetStream(void *h, void *s) {
	if (h != &solver_token || s != STREAM) return 3;
	solver_stream = s;
	return 0;
}
status cusolverDnDsyevd_bufferSize(void *h, int jobz, int uplo, int n, const double *a, int lda, const double *w, int *lwork) {
	if (h != &solver_token || jobz != 1 || (uplo != 0 && uplo != 1) || n < 1 || lda < n) return 3; // INVALID_VALUE
	*lwork = n * n;
	return 0;
}

status cusolverDnDsyevd(void *h, int jobz, int uplo, int n, double *a, int lda, double *w, double *work, int lwork, int *info) {
	if (capture_refuse()) return 7; // CUSOLVER_STATUS_INTERNAL_ERROR: not recorded here
	if (h != &solver_token || jobz != 1 || (uplo != 0 && uplo != 1) || n < 1 || lda < n || lwork < n * n) return 3;
	if (solver_stream != STREAM) return 3; // on the package's stream
	run_all_copies();
	double *v = work; // the rotations, accumulated
#define A(i, j) a[(long)(j) * lda + (i)]
#define V(i, j) v[(long)(j) * n + (i)]
	// Only the triangle uplo names is read, as LAPACK does: mirror it.
	for (int j = 0; j < n; j++)
		for (int i = j + 1; i < n; i++) {
			if (uplo == 0) A(j, i) = A(i, j);
			else A(i, j) = A(j, i);
		}
	for (int j = 0; j < n; j++)
		for (int i = 0; i < n; i++) V(i, j) = i == j;
	for (int sweep = 0; sweep < 100; sweep++) {
		double off = 0, all = 0;
		for (int j = 0; j < n; j++)
			for (int i = 0; i < n; i++) {
				all += A(i, j) * A(i, j);
				if (i != j) off += A(i, j) * A(i, j);
			}
		if (off <= 1e-30 * all) break;
		for (int p = 0; p < n; p++)
			for (int q = p + 1; q < n; q++) {
				double apq = A(p, q);
				if (apq == 0) continue;
				double theta = (A(q, q) - A(p, p)) / (2 * apq);
				double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
				double c = 1 / sqrt(t * t + 1), s = t * c;
				for (int k = 0; k < n; k++) { // columns p, q
					double akp = A(k, p), akq = A(k, q);
					A(k, p) = c * akp - s * akq;
					A(k, q) = s * akp + c * akq;
				}
				for (int k = 0; k < n; k++) { // rows p, q
					double apk = A(p, k), aqk = A(q, k);
					A(p, k) = c * apk - s * aqk;
					A(q, k) = s * apk + c * aqk;
				}
				for (int k = 0; k < n; k++) {
					double vkp = V(k, p), vkq = V(k, q);
					V(k, p) = c * vkp - s * vkq;
					V(k, q) = s * vkp + c * vkq;
				}
			}
	}
	// Ascending eigenvalues, their vectors into a's columns.
	for (int i = 0; i < n; i++) w[i] = A(i, i);
	for (int i = 0; i < n; i++) {
		int m = i;
		for (int j = i + 1; j < n; j++)
			if (w[j] < w[m]) m = j;
		double t = w[i]; w[i] = w[m]; w[m] = t;
		for (int k = 0; k < n; k++) { double x = V(k, i); V(k, i) = V(k, m); V(k, m) = x; }
	}
	for (int j = 0; j < n; j++)
		for (int i = 0; i < n; i++) A(i, j) = V(i, j);
#undef A
#undef V
	*info = 0;
	return 0;
}

// libnvrtc: the program is compiled as C++ by the compiler $FAKECUDA_CXX,
// after the emulation header $FAKECUDA_EMU (fakecuda_emu.h) and followed by
// one launcher per kernel, into a shared object; its "CUBIN" is that
// object's path.

typedef struct { char *src, *log, *so; } program;

status nvrtcCreateProgram(void **p, const char *src, const char *name, int nh, const char *const *h, const char *const *hn) {
	program *pr = calloc(1, sizeof *pr);
	pr->src = strdup(src);
	pr->log = strdup("");
	*p = pr;
	return 0;
}

static char *read_file(const char *path) {
	FILE *f = fopen(path, "rb");
	if (!f) return strdup("");
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(n + 1);
	b[fread(b, 1, n, f)] = 0;
	fclose(f);
	return b;
}

// remove_build removes nvrtcCompileProgram's folder.
static void remove_build(const char *dir) {
	const char *names[] = {"kernels.so", "kernels.cpp", "log.txt"};
	char path[300];
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

status nvrtcCompileProgram(void *p, int n, const char *const *opts) {
	program *pr = p;
	if (n != 1 || strncmp(opts[0], "--gpu-architecture=sm_", 22) != 0) return 5; // INVALID_OPTION
	const char *cxx = getenv("FAKECUDA_CXX"), *emu = getenv("FAKECUDA_EMU");
	char dir[] = "/tmp/fakenvrtcXXXXXX";
	if (!cxx || !emu || !mkdtemp(dir)) {
		free(pr->log);
		pr->log = strdup(cxx && emu ? "fake nvrtc: no temporary folder" : "fake nvrtc: FAKECUDA_CXX or FAKECUDA_EMU is not set");
		return 6; // COMPILATION
	}
	char path[256], so[256], log[256], cmd[1024];
	snprintf(path, sizeof path, "%s/kernels.cpp", dir);
	snprintf(so, sizeof so, "%s/kernels.so", dir);
	snprintf(log, sizeof log, "%s/log.txt", dir);
	FILE *f = fopen(path, "w");
	fprintf(f, "#include \"%s\"\n", emu);
	fputs("#line 1 \"rowwise.cu\"\n", f);
	fputs(pr->src, f);
	// One launcher per kernel: fake_launch_NAME(params) calls NAME with the
	// arguments params points to, typed by the kernel's own signature.
	fputs("\n", f);
	for (const char *q = pr->src; (q = strstr(q, "__global__ void ")) != NULL;) {
		q += strlen("__global__ void ");
		int len = strcspn(q, "( \t\n");
		fprintf(f, "extern \"C\" void fake_launch_%.*s(void **p) { fake_call(%.*s, p); }\n", len, q, len, q);
		fprintf(f, "extern \"C\" int fake_nargs_%.*s(void) { return fake_nargs(%.*s); }\n", len, q, len, q);
	}
	fclose(f);
	snprintf(cmd, sizeof cmd, "'%s' -x c++ -std=c++17 -O1 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=0 -Wall -Werror -Wno-sign-compare -Wno-unused-function -shared -fPIC -o '%s' '%s' > '%s' 2>&1",
		cxx, so, path, log);
	int rc = system(cmd);
	free(pr->log);
	pr->log = read_file(log);
	if (rc != 0) {
		remove_build(dir);
		return 6;
	}
	pr->so = strdup(so);
	return 0;
}
status nvrtcGetProgramLogSize(void *p, size_t *n) { *n = strlen(((program *)p)->log) + 1; return 0; }
status nvrtcGetProgramLog(void *p, char *log) { strcpy(log, ((program *)p)->log); return 0; }
status nvrtcGetCUBINSize(void *p, size_t *n) {
	program *pr = p;
	if (!pr->so) return 3;
	*n = strlen(pr->so) + 1;
	return 0;
}
status nvrtcGetCUBIN(void *p, char *out) { strcpy(out, ((program *)p)->so); return 0; }
status nvrtcDestroyProgram(void **p) {
	program *pr = *p;
	free(pr->src);
	free(pr->log);
	free(pr->so);
	free(pr);
	*p = NULL;
	return 0;
}
const char *nvrtcGetErrorString(status s) { return "NVRTC_ERROR"; }

// libcuda

static int ctx_token;
status cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
status cuDeviceGet(int *dev, int ordinal) {
	if (ordinal != 0) return 101; // CUDA_ERROR_INVALID_DEVICE
	*dev = 0;
	return 0;
}
status cuDeviceGetName(char *name, int len, int dev) { strncpy(name, "Fake CUDA device", len); return 0; }
status cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = &ctx_token; return 0; }
status cuCtxSetCurrent(void *ctx) { return ctx == &ctx_token ? 0 : 201; } // CUDA_ERROR_INVALID_CONTEXT
status cuGetErrorName(status s, const char **name) { *name = "CUDA_ERROR_FAKE"; return 0; }

// A module is the shared object nvrtcCompileProgram built; a function is
// its launcher, run by the object's fake_run.
typedef struct {
	void (*launch)(void **);
	int (*run)(void (*)(void **), void **, unsigned, unsigned, char *, int);
	int (*nargs)(void);
} function;

status cuModuleLoadData(void **m, const void *image) {
	void *h = dlopen(image, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "fake cuda: %s\n", dlerror());
		return 200; // CUDA_ERROR_INVALID_IMAGE
	}
	*m = h;
	// The object stays mapped: its folder can go.
	char dir[256];
	snprintf(dir, sizeof dir, "%s", (const char *)image);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = 0;
		remove_build(dir);
	}
	return 0;
}

status cuModuleGetFunction(void **f, void *m, const char *name) {
	char sym[128];
	snprintf(sym, sizeof sym, "fake_launch_%s", name);
	function fn = {dlsym(m, sym), dlsym(m, "fake_run"), NULL};
	snprintf(sym, sizeof sym, "fake_nargs_%s", name);
	*(void **)&fn.nargs = dlsym(m, sym);
	if (!fn.launch || !fn.run || !fn.nargs) return 500; // CUDA_ERROR_NOT_FOUND
	*f = malloc(sizeof fn);
	memcpy(*f, &fn, sizeof fn);
	return 0;
}

static status launch_now(function *fn, unsigned gx, unsigned bx, void **params) {
	run_all_copies();
	char err[256];
	if (fn->run(fn->launch, params, gx, bx, err, sizeof err) != 0) {
		fprintf(stderr, "fake cuda: %s\n", err);
		return 719; // CUDA_ERROR_LAUNCH_FAILED
	}
	return 0;
}

typedef struct {
	function *fn;
	unsigned gx, bx;
	int nargs;
	uint64_t args[16];
} kernel_rec;

static void replay_kernel(const void *p) {
	const kernel_rec *r = p;
	void *params[16];
	for (int i = 0; i < r->nargs; i++) params[i] = (void *)&r->args[i];
	if (launch_now(r->fn, r->gx, r->bx, params) != 0) abort();
}

status cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shared, void *stream, void **params, void **extra) {
	if (gx == 0 || gy != 1 || gz != 1 || bx == 0 || bx > 1024 || by != 1 || bz != 1 || extra != NULL) return 1;
	if (stream != STREAM) return 400; // the package's kernels go to its stream
	function *fn = f;
	// Recorded: the parameters' values (the package passes each in an
	// 8-byte slot), to be passed again at each launch of the graph.
	kernel_rec r = {fn, gx, bx, fn->nargs()};
	if (r.nargs > 16) return 1;
	for (int i = 0; i < r.nargs; i++) memcpy(&r.args[i], params[i], 8);
	if (capture_push(replay_kernel, &r, sizeof r)) return 0;
	return launch_now(fn, gx, bx, params);
}

// cublasDgemm_v2: the float64 product (column-major, as cuBLAS), each sum
// in double in order of k; the operands are not rounded.
status cublasDgemm_v2(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
		const double *a, int lda, const double *b, int ldb, const double *beta, double *c, int ldc) {
	if (capture_refuse()) return 14; // CUBLAS_STATUS_INTERNAL_ERROR: not recorded here
	status s = check_gemm(ta, tb, m, n, k, lda, ldb, ldc);
	if (s) return s;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double sum = 0;
			for (int p = 0; p < k; p++)
				sum += (ta ? a[p + (long)i * lda] : a[i + (long)p * lda]) * (tb ? b[j + (long)p * ldb] : b[p + (long)j * ldb]);
			double *cv = &c[i + (long)j * ldc];
			*cv = *beta == 0 ? *alpha * sum : *alpha * sum + *beta * *cv;
		}
	return 0;
}
