// fakecuda.c stands in for libcudart, libcublas, libnvrtc and libcuda on a
// machine without CUDA, so that TestFakeCUDA can run the package's device
// tests through its real cgo code: the dlopen and symbol binding, the
// context and launch calls, the row-major to column-major operand swap and
// the packing of kernel parameters. "Device memory" is host memory;
// cublasSgemm is the column-major BLAS product; a "module" is the CUDA C
// source NVRTC was given, and each kernel launch runs a C version of the
// kernel of that name, one row per block as the CUDA source does. It checks
// what it is given (kinds, block sizes, names, pointers) and fails as CUDA
// would. The same file is built once per soname.
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int status;

// libcudart

status cudaGetDeviceCount(int *n) { *n = 1; return 0; }
status cudaMalloc(void **p, size_t bytes) {
	if (bytes > ((size_t)1 << 36)) return 2; // cudaErrorMemoryAllocation
	*p = malloc(bytes ? bytes : 1);
	return *p ? 0 : 2;
}
status cudaFree(void *p) { free(p); return 0; }
status cudaMemcpy(void *dst, const void *src, size_t bytes, int kind) {
	if (kind != 1 && kind != 2) return 21; // cudaErrorInvalidMemcpyDirection
	memcpy(dst, src, bytes);
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
	}
	return "cudaErrorUnknown";
}

// libcublas

static int handle_token;
status cublasCreate_v2(void **h) { *h = &handle_token; return 0; }
status cublasDestroy_v2(void *h) { return h == &handle_token ? 0 : 1; }
status cublasSetMathMode(void *h, int mode) { return (mode == 0 || mode == 3) ? 0 : 7; }

static void sgemm1(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
		const float *b, int ldb, float beta, float *c, int ldc) {
	for (int j = 0; j < n; j++) {
		for (int i = 0; i < m; i++) {
			double s = 0;
			for (int p = 0; p < k; p++) {
				double av = ta ? a[p + (long)i * lda] : a[i + (long)p * lda];
				double bv = tb ? b[j + (long)p * ldb] : b[p + (long)j * ldb];
				s += av * bv;
			}
			float *cv = &c[i + (long)j * ldc];
			*cv = beta == 0 ? (float)(alpha * s) : (float)(alpha * s + beta * *cv);
		}
	}
}

static status check_gemm(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc) {
	if (ta < 0 || ta > 1 || tb < 0 || tb > 1 || m < 0 || n < 0 || k < 0) return 7; // INVALID_VALUE
	if (lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
	return 0;
}

status cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
		const float *a, int lda, const float *b, int ldb, const float *beta, float *c, int ldc) {
	status s = check_gemm(ta, tb, m, n, k, lda, ldb, ldc);
	if (s) return s;
	sgemm1(ta, tb, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc);
	return 0;
}

status cublasSgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
		const float *a, int lda, long long sa, const float *b, int ldb, long long sb,
		const float *beta, float *c, int ldc, long long sc, int batch) {
	status s = check_gemm(ta, tb, m, n, k, lda, ldb, ldc);
	if (s) return s;
	for (int i = 0; i < batch; i++)
		sgemm1(ta, tb, m, n, k, *alpha, a + i * sa, lda, b + i * sb, ldb, *beta, c + i * sc, ldc);
	return 0;
}

// libnvrtc: a program's "CUBIN" is its source.

typedef struct { char *src; int compiled; } program;

status nvrtcCreateProgram(void **p, const char *src, const char *name, int nh, const char *const *h, const char *const *hn) {
	program *pr = calloc(1, sizeof *pr);
	pr->src = strdup(src);
	*p = pr;
	return 0;
}
status nvrtcCompileProgram(void *p, int n, const char *const *opts) {
	program *pr = p;
	if (n != 1 || strncmp(opts[0], "--gpu-architecture=sm_", 22) != 0) return 5; // INVALID_OPTION
	if (!strstr(pr->src, "__global__")) return 6; // COMPILATION
	pr->compiled = 1;
	return 0;
}
status nvrtcGetProgramLogSize(void *p, size_t *n) { *n = 1; return 0; }
status nvrtcGetProgramLog(void *p, char *log) { log[0] = 0; return 0; }
status nvrtcGetCUBINSize(void *p, size_t *n) {
	program *pr = p;
	if (!pr->compiled) return 3;
	*n = strlen(pr->src) + 1;
	return 0;
}
status nvrtcGetCUBIN(void *p, char *out) { strcpy(out, ((program *)p)->src); return 0; }
status nvrtcDestroyProgram(void **p) {
	program *pr = *p;
	free(pr->src);
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

status cuModuleLoadData(void **m, const void *image) {
	*m = strdup(image);
	return 0;
}

#define P(i, type) (*(type *)params[i])

static void layer_norm(unsigned grid, void **params) {
	float *y = P(0, float *); const float *x = P(1, const float *); int cols = P(2, int);
	const float *g = P(3, const float *), *b = P(4, const float *); double eps = P(5, double);
	float *mean = P(6, float *), *rstd = P(7, float *);
	for (unsigned r = 0; r < grid; r++) {
		const float *xr = x + (long)r * cols; float *yr = y + (long)r * cols;
		double s = 0, q = 0;
		for (int j = 0; j < cols; j++) s += xr[j];
		double mu = s / cols;
		for (int j = 0; j < cols; j++) q += (xr[j] - mu) * (xr[j] - mu);
		float m = (float)mu, rs = (float)(1 / sqrt(q / cols + eps));
		if (mean) { mean[r] = m; rstd[r] = rs; }
		for (int j = 0; j < cols; j++) yr[j] = (xr[j] - m) * rs * g[j] + b[j];
	}
}

static void layer_norm_backward(unsigned grid, void **params) {
	float *dx = P(0, float *); const float *dy = P(1, const float *), *x = P(2, const float *);
	int cols = P(3, int); const float *g = P(4, const float *), *mean = P(5, const float *), *rstd = P(6, const float *);
	for (unsigned r = 0; r < grid; r++) {
		const float *xr = x + (long)r * cols, *dyr = dy + (long)r * cols; float *dxr = dx + (long)r * cols;
		float m = mean[r], q = rstd[r];
		double sg = 0, sgh = 0;
		for (int j = 0; j < cols; j++) {
			float gj = dyr[j] * g[j];
			sg += gj;
			sgh += (double)gj * ((xr[j] - m) * q);
		}
		float mg = (float)(sg / cols), mgh = (float)(sgh / cols);
		for (int j = 0; j < cols; j++) dxr[j] = q * (dyr[j] * g[j] - mg - (xr[j] - m) * q * mgh);
	}
}

// One block per 32 columns, as the CUDA kernel.
static void layer_norm_param_grads(unsigned grid, void **params) {
	float *dg = P(0, float *), *db = P(1, float *); const float *dy = P(2, const float *), *x = P(3, const float *);
	int rows = P(4, int), cols = P(5, int); const float *mean = P(6, const float *), *rstd = P(7, const float *);
	if (grid != (unsigned)(cols + 31) / 32) { fprintf(stderr, "layer_norm_param_grads: grid %u for %d columns\n", grid, cols); abort(); }
	for (int j = 0; j < cols; j++) {
		double g = 0, b = 0;
		for (int r = 0; r < rows; r++) {
			long i = (long)r * cols + j;
			g += dy[i] * ((x[i] - mean[r]) * rstd[r]);
			b += dy[i];
		}
		dg[j] = (float)g;
		db[j] = (float)b;
	}
}

static void softmax(unsigned grid, void **params) {
	float *y = P(0, float *); const float *x = P(1, const float *); int cols = P(2, int);
	float scale = P(3, float); int causal = P(4, int);
	for (unsigned r = 0; r < grid; r++) {
		int n = causal ? (int)(r % cols) + 1 : cols;
		const float *xr = x + (long)r * cols; float *yr = y + (long)r * cols;
		float mx = -INFINITY;
		for (int j = 0; j < n; j++) mx = fmaxf(mx, xr[j] * scale);
		double s = 0;
		for (int j = 0; j < n; j++) { yr[j] = expf(xr[j] * scale - mx); s += yr[j]; }
		float inv = (float)(1 / s);
		for (int j = 0; j < n; j++) yr[j] *= inv;
		for (int j = n; j < cols; j++) yr[j] = 0;
	}
}

static void softmax_backward(unsigned grid, void **params) {
	float *dx = P(0, float *); const float *dy = P(1, const float *), *y = P(2, const float *);
	int cols = P(3, int); float scale = P(4, float);
	for (unsigned r = 0; r < grid; r++) {
		const float *yr = y + (long)r * cols, *dyr = dy + (long)r * cols; float *dxr = dx + (long)r * cols;
		double dot = 0;
		for (int j = 0; j < cols; j++) dot += yr[j] * dyr[j];
		float d = (float)dot;
		for (int j = 0; j < cols; j++) dxr[j] = scale * yr[j] * (dyr[j] - d);
	}
}

static void quick_gelu_slope(unsigned grid, void **params) {
	float *y = P(0, float *), *slope = P(1, float *); const float *x = P(2, const float *); int n = P(3, int);
	for (int i = 0; i < n; i++) {
		float v = x[i], e = 1 + expf(-1.702f * v), yv = v / e, s = 1 / e;
		y[i] = yv;
		slope[i] = s + 1.702f * yv * (1 - s);
	}
}

static void gelu_slope(unsigned grid, void **params) {
	float *slope = P(0, float *); const float *x = P(1, const float *); int n = P(2, int);
	for (int i = 0; i < n; i++) {
		double v = x[i];
		slope[i] = (float)(0.5 * (1 + erf(v * 0.70710678118654752)) + v * exp(-0.5 * v * v) * 0.39894228040143268);
	}
}

static void mul(unsigned grid, void **params) {
	float *y = P(0, float *); const float *a = P(1, const float *), *b = P(2, const float *); int n = P(3, int);
	for (int i = 0; i < n; i++) y[i] = a[i] * b[i];
}

static void quick_gelu(unsigned grid, void **params) {
	float *y = P(0, float *); const float *x = P(1, const float *); int n = P(2, int);
	for (int i = 0; i < n; i++) y[i] = x[i] / (1 + expf(-1.702f * x[i]));
}

static void gelu(unsigned grid, void **params) {
	float *y = P(0, float *); const float *x = P(1, const float *); int n = P(2, int);
	for (int i = 0; i < n; i++) y[i] = (float)(0.5 * x[i] * (1 + erf(x[i] * 0.70710678118654752)));
}

static void add(unsigned grid, void **params) {
	float *y = P(0, float *); const float *a = P(1, const float *), *b = P(2, const float *); int n = P(3, int);
	for (int i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void fill_rows(unsigned grid, void **params) {
	float *y = P(0, float *); int rows = P(1, int), cols = P(2, int); const float *v = P(3, const float *);
	for (long i = 0; i < (long)rows * cols; i++) y[i] = v[i % cols];
}

static struct { const char *name; void (*run)(unsigned, void **); } kernels[] = {
	{"layer_norm", layer_norm}, {"layer_norm_backward", layer_norm_backward},
	{"layer_norm_param_grads", layer_norm_param_grads}, {"softmax", softmax},
	{"softmax_backward", softmax_backward}, {"quick_gelu", quick_gelu}, {"quick_gelu_slope", quick_gelu_slope},
	{"gelu", gelu}, {"gelu_slope", gelu_slope}, {"add", add}, {"mul", mul}, {"fill_rows", fill_rows},
};

status cuModuleGetFunction(void **f, void *m, const char *name) {
	char decl[128];
	snprintf(decl, sizeof decl, "extern \"C\" __global__ void %s(", name);
	if (!strstr(m, decl)) return 500; // CUDA_ERROR_NOT_FOUND
	for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
		if (strcmp(kernels[i].name, name) == 0) {
			*f = &kernels[i];
			return 0;
		}
	}
	return 500;
}

status cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shared, void *stream, void **params, void **extra) {
	if (gx == 0 || gy != 1 || gz != 1 || bx != 256 || by != 1 || bz != 1 || extra != NULL) return 1;
	((__typeof__(kernels[0]) *)f)->run(gx, params);
	return 0;
}
