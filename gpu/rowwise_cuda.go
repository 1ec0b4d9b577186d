//go:build cuda && cgo

package gpu

// rowwiseBlock is the number of threads of every row-wise kernel's block
// (BLOCK in rowwiseSource).
const rowwiseBlock = 256

// rowwiseKernels are the functions of rowwiseSource.
var rowwiseKernels = []string{"layer_norm", "softmax", "quick_gelu", "gelu", "add", "fill_rows"}

// rowwiseSource is the CUDA C of the row-wise kernels, compiled by NVRTC
// when a device is opened. Each mirrors the function of package kernel of
// the same name: LayerNorm and Softmax take one block per row and sum in
// double, as the CPU kernels do; the elementwise ones loop over a grid.
// NVRTC has no standard headers, so only built-in types and functions
// appear.
const rowwiseSource = `
#define BLOCK 256

// block_sum returns the sum of v over the block's threads.
__device__ double block_sum(double v, double *s) {
	s[threadIdx.x] = v;
	__syncthreads();
	for (int k = BLOCK / 2; k > 0; k >>= 1) {
		if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
		__syncthreads();
	}
	double r = s[0];
	__syncthreads();
	return r;
}

// block_max returns the maximum of v over the block's threads.
__device__ float block_max(float v, float *s) {
	s[threadIdx.x] = v;
	__syncthreads();
	for (int k = BLOCK / 2; k > 0; k >>= 1) {
		if (threadIdx.x < k) s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + k]);
		__syncthreads();
	}
	float r = s[0];
	__syncthreads();
	return r;
}

// y = (x - mean)·rstd·gamma + beta per row of cols values, rstd =
// 1/sqrt(var + eps), the statistics in double. y may be x: each thread
// writes only the values it read, after the last reduction.
extern "C" __global__ void layer_norm(float *y, const float *x, int cols,
		const float *gamma, const float *beta, double eps) {
	__shared__ double s[BLOCK];
	const float *xr = x + (unsigned long long)blockIdx.x * cols;
	float *yr = y + (unsigned long long)blockIdx.x * cols;
	double sum = 0;
	for (int j = threadIdx.x; j < cols; j += BLOCK) sum += xr[j];
	double mu = block_sum(sum, s) / cols;
	double sq = 0;
	for (int j = threadIdx.x; j < cols; j += BLOCK) {
		double d = xr[j] - mu;
		sq += d * d;
	}
	double rs = 1.0 / sqrt(block_sum(sq, s) / cols + eps);
	float m = (float)mu, q = (float)rs;
	for (int j = threadIdx.x; j < cols; j += BLOCK) yr[j] = (xr[j] - m) * q * gamma[j] + beta[j];
}

// y = softmax(scale·x) per row; with causal set, row r sees columns
// 0…r mod cols (stacked square blocks, one per head) and the rest is 0.
extern "C" __global__ void softmax(float *y, const float *x, int cols, float scale, int causal) {
	__shared__ double s[BLOCK];
	__shared__ float f[BLOCK];
	int n = causal ? blockIdx.x % cols + 1 : cols;
	const float *xr = x + (unsigned long long)blockIdx.x * cols;
	float *yr = y + (unsigned long long)blockIdx.x * cols;
	float mx = __int_as_float(0xff800000); // -inf
	for (int j = threadIdx.x; j < n; j += BLOCK) mx = fmaxf(mx, xr[j] * scale);
	mx = block_max(mx, f);
	double sum = 0;
	for (int j = threadIdx.x; j < n; j += BLOCK) {
		float e = expf(xr[j] * scale - mx);
		yr[j] = e;
		sum += e;
	}
	float inv = (float)(1.0 / block_sum(sum, s));
	for (int j = threadIdx.x; j < n; j += BLOCK) yr[j] *= inv;
	for (int j = n + threadIdx.x; j < cols; j += BLOCK) yr[j] = 0;
}

// y = x·σ(1.702·x), CLIP's activation.
extern "C" __global__ void quick_gelu(float *y, const float *x, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
		float v = x[i];
		y[i] = v / (1.0f + expf(-1.702f * v));
	}
}

// y = x·Φ(x), the exact GELU, in double as on the CPU.
extern "C" __global__ void gelu(float *y, const float *x, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
		double v = x[i];
		y[i] = (float)(0.5 * v * (1.0 + erf(v * 0.70710678118654752)));
	}
}

// y = a + b.
extern "C" __global__ void add(float *y, const float *a, const float *b, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) y[i] = a[i] + b[i];
}

// Every row of y (rows×cols) = v.
extern "C" __global__ void fill_rows(float *y, int rows, int cols, const float *v) {
	int n = rows * cols;
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) y[i] = v[i % cols];
}
`
