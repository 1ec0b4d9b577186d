//go:build cuda && cgo

package gpu

// rowwiseBlock is the number of threads of every row-wise kernel's block
// (BLOCK in rowwiseSource).
const rowwiseBlock = 256

// rowwiseKernels are the functions of rowwiseSource.
var rowwiseKernels = []string{"layer_norm", "layer_norm_backward", "layer_norm_param_grads", "softmax",
	"softmax_backward", "quick_gelu", "quick_gelu_slope", "gelu", "gelu_slope", "add", "mul", "fill_rows",
	"patches", "token_embed", "stride_rows", "spread_rows", "split_heads", "softmax_rows", "softmax_backward_rows", "layer_norm_rows", "layer_norm_backward_rows",
	"layer_norm_param_partials", "layer_norm_param_sum",
	"bias_act", "to_half16", "bias_act_half", "split_heads_half"}

// shortRow is the longest row that softmax and LayerNorm give LANES threads
// (a group of a block, several rows per block) rather than a whole block:
// attention's rows (50 for ViT-B/32, 197 for B/16, 77 for the text tower)
// and the towers' widths up to 1,024 values.
const shortRow = 1024

// rowGroups is the number of rows a block of the short-row kernels takes
// (GROUPS in rowwiseSource).
const rowGroups = rowwiseBlock / 32

// paramGradCols is the number of columns a block of layer_norm_param_grads
// sums (COLS in rowwiseSource).
const paramGradCols = 32

// paramGradRows is about the number of rows a block of
// layer_norm_param_partials sums: LayerNorm's parameter gradients over more
// rows than twice this are summed in chunks (3,200 rows, batch 64 of
// ViT-B/32: 12 chunks, 288 blocks where one pass had 24).
const paramGradRows = 256

// rowwiseSource is the CUDA C of the row-wise kernels, compiled by NVRTC
// when a device is opened. Each mirrors the function of package kernel of
// the same name: LayerNorm and Softmax take one block per row and sum in
// double, as the CPU kernels do; the elementwise ones loop over a grid.
// NVRTC has no standard headers, so only built-in types and functions
// appear.
const rowwiseSource = `
#define BLOCK 256

// to_half rounds v to 16 bits, to nearest, ties to even, subnormals kept:
// bfloat16 with fmt 1, IEEE half with fmt 2 (kernel.HalfFormat). Integer
// arithmetic, so that NVRTC needs no cuda_fp16.h or cuda_bf16.h.
__device__ unsigned short to_half(float v, int fmt) {
	unsigned x = __float_as_uint(v), sign = x >> 16 & 0x8000, ax = x & 0x7fffffff;
	if (fmt == 1) {
		if (ax > 0x7f800000) return (unsigned short)(x >> 16 | 0x40); // NaN stays NaN
		return (unsigned short)((x + 0x7fff + (x >> 16 & 1)) >> 16);
	}
	if (ax > 0x7f800000) return (unsigned short)(sign | 0x7e00);
	if (ax >= 0x47800000) return (unsigned short)(sign | 0x7c00); // 65536 and up, and inf
	int e = ax >> 23;
	unsigned m = (ax & 0x7fffff) | 0x800000;
	if (e >= 113) { // a normal half: round 24 bits to 11; a carry moves the exponent, to inf past 65504
		unsigned r = m >> 13, rem = m & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
		return (unsigned short)(sign | (((unsigned)(e - 112) << 10) + r - 1024));
	}
	if (e < 102) return (unsigned short)sign; // below half the least subnormal
	int shift = 126 - e; // a subnormal half: units of 2^-24
	unsigned r = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
	if (rem > halfway || (rem == halfway && (r & 1))) r++;
	return (unsigned short)(sign | r);
}

// from_half widens 16 bits of format fmt (as to_half's) to float32,
// exactly.
__device__ float from_half(unsigned short h, int fmt) {
	unsigned sign = (unsigned)(h & 0x8000) << 16;
	if (fmt == 1) return __int_as_float((int)((unsigned)h << 16));
	unsigned e = h >> 10 & 0x1f, m = h & 0x3ff;
	if (e == 31) return __int_as_float((int)(sign | 0x7f800000 | m << 13)); // inf, NaN
	if (e == 0) { // zero or a subnormal: m·2^-24
		float v = (float)m * 5.9604644775390625e-8f;
		return sign ? -v : v;
	}
	return __int_as_float((int)(sign | (e + 112) << 23 | m << 13));
}

// y = x's n values in 16 bits (a weight, once).
extern "C" __global__ void to_half16(unsigned short *y, const float *x, int n, int fmt) {
	for (unsigned i = blockIdx.x * BLOCK + threadIdx.x; i < (unsigned)n; i += gridDim.x * BLOCK) y[i] = to_half(x[i], fmt);
}

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

#define LANES 32
#define GROUPS (BLOCK / LANES)

// group_sum returns the sum of v over the LANES threads of the caller's
// group (threads LANES·g … LANES·g + LANES - 1, one warp), by warp
// shuffles: lane i adds lane i+k's partial for k = LANES/2 … 1, the tree
// of a shared-memory reduction, and every lane gets lane 0's sum. Every
// thread of the warp must call it.
__device__ double group_sum(double v) {
	for (int k = LANES / 2; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffffu, v, k);
	return __shfl_sync(0xffffffffu, v, 0);
}

// group_max is group_sum's maximum.
__device__ float group_max(float v) {
	for (int k = LANES / 2; k > 0; k >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, k));
	return __shfl_sync(0xffffffffu, v, 0);
}

// The row of this thread's group in the short-row kernels, and whether it
// is one of the rows rows (the last block's groups may have none).
#define GROUP_ROW(rows) \
	long long row = (long long)blockIdx.x * GROUPS + threadIdx.x / LANES; \
	bool has = row < (rows); \
	int lane = threadIdx.x % LANES; \
	if (!has) row = 0;

// layer_norm for rows of at most a few LANES·32 values: GROUPS rows a block.
extern "C" __global__ void layer_norm_rows(float *y, const float *x, int rows, int cols,
		const float *gamma, const float *beta, double eps, float *mean, float *rstd, unsigned short *y16, int fmt,
		float *res, const float *bias) {
	GROUP_ROW(rows)
	int n = has ? cols : 0;
	const float *xr = x + row * cols;
	float *yr = y + row * cols;
	double sum = 0;
	for (int j = lane; j < n; j += LANES) sum += xr[j];
	double mu = group_sum(sum) / cols;
	double sq = 0;
	for (int j = lane; j < n; j += LANES) {
		double d = xr[j] - mu;
		sq += d * d;
	}
	double rs = 1.0 / sqrt(group_sum(sq) / cols + eps);
	float m = (float)mu, q = (float)rs;
	if (has && lane == 0 && mean) {
		mean[row] = m;
		rstd[row] = q;
	}
	for (int j = lane; j < n; j += LANES) {
		float xv = xr[j], v = (xv - m) * q * gamma[j] + beta[j];
		if (y16) y16[row * cols + j] = to_half(v, fmt);
		else yr[j] = v;
		if (res) res[row * cols + j] = bias ? xv + bias[j] : xv;
	}
}

// softmax for short rows: GROUPS rows a block. With y16 set, y is
// written there in 16 bits instead (to_half), each value the rounding of
// what y would hold: the exponentials are computed again for it rather
// than kept in y.
extern "C" __global__ void softmax_rows(float *y, const float *x, int rows, int cols, float scale, int causal,
		unsigned short *y16, int fmt) {
	GROUP_ROW(rows)
	int n = !has ? 0 : causal ? (int)(row % cols) + 1 : cols;
	const float *xr = x + row * cols;
	float *yr = y + row * cols;
	float mx = __int_as_float(0xff800000); // -inf
	for (int j = lane; j < n; j += LANES) mx = fmaxf(mx, xr[j] * scale);
	mx = group_max(mx);
	double sum = 0;
	for (int j = lane; j < n; j += LANES) {
		float e = expf(xr[j] * scale - mx);
		if (!y16) yr[j] = e;
		sum += e;
	}
	float inv = (float)(1.0 / group_sum(sum));
	if (y16) {
		unsigned short *hr = y16 + row * cols;
		for (int j = lane; j < n; j += LANES) hr[j] = to_half(expf(xr[j] * scale - mx) * inv, fmt);
		if (has)
			for (int j = n + lane; j < cols; j += LANES) hr[j] = 0;
		return;
	}
	for (int j = lane; j < n; j += LANES) yr[j] *= inv;
	if (has)
		for (int j = n + lane; j < cols; j += LANES) yr[j] = 0;
}

// softmax_backward for short rows: GROUPS rows a block.
extern "C" __global__ void softmax_backward_rows(float *dx, const float *dy, const float *y, int rows, int cols, float scale) {
	GROUP_ROW(rows)
	int n = has ? cols : 0;
	const float *yr = y + row * cols, *dyr = dy + row * cols;
	float *dxr = dx + row * cols;
	double dot = 0;
	for (int j = lane; j < n; j += LANES) dot += yr[j] * dyr[j];
	float d = (float)group_sum(dot);
	for (int j = lane; j < n; j += LANES) dxr[j] = scale * yr[j] * (dyr[j] - d);
}

// y = (x - mean)·rstd·gamma + beta per row of cols values, rstd =
// 1/sqrt(var + eps), the statistics in double; they are written to mean
// and rstd (one per row) unless those are null. Unless res is null it gets
// x + bias (bias per column; null: x), the residual stream onto which a
// product with beta = 1 adds the next linear layer's output. y and res may
// be x: each thread writes only the values it read, after the last
// reduction.
extern "C" __global__ void layer_norm(float *y, const float *x, int cols,
		const float *gamma, const float *beta, double eps, float *mean, float *rstd, unsigned short *y16, int fmt,
		float *res, const float *bias) {
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
	if (threadIdx.x == 0 && mean) {
		mean[blockIdx.x] = m;
		rstd[blockIdx.x] = q;
	}
	for (int j = threadIdx.x; j < cols; j += BLOCK) {
		float xv = xr[j], v = (xv - m) * q * gamma[j] + beta[j];
		if (y16) y16[(unsigned long long)blockIdx.x * cols + j] = to_half(v, fmt);
		else yr[j] = v;
		if (res) res[(unsigned long long)blockIdx.x * cols + j] = bias ? xv + bias[j] : xv;
	}
}

// The input gradient of layer_norm per row, from the kept statistics: with
// h = (x - mean)·rstd and g = dy·gamma, dx = rstd·(g - mean(g) - h·mean(g·h)),
// the means in double; plus res unless null (a residual path's gradient,
// added as a pass of its own would: rounded sum of two float32 values).
// res may be dx.
extern "C" __global__ void layer_norm_backward(float *dx, const float *dy, const float *x, int cols,
		const float *gamma, const float *mean, const float *rstd, const float *res) {
	__shared__ double s[BLOCK];
	unsigned long long off = (unsigned long long)blockIdx.x * cols;
	const float *xr = x + off, *dyr = dy + off;
	float *dxr = dx + off;
	float m = mean[blockIdx.x], q = rstd[blockIdx.x];
	double sg = 0, sgh = 0;
	for (int j = threadIdx.x; j < cols; j += BLOCK) {
		float g = dyr[j] * gamma[j];
		sg += g;
		sgh += (double)g * ((xr[j] - m) * q);
	}
	float mg = (float)(block_sum(sg, s) / cols);
	float mgh = (float)(block_sum(sgh, s) / cols);
	for (int j = threadIdx.x; j < cols; j += BLOCK) {
		float v = q * (dyr[j] * gamma[j] - mg - (xr[j] - m) * q * mgh);
		dxr[j] = res ? __fadd_rn(v, res[off + j]) : v;
	}
}

// layer_norm_backward for rows of at most a few LANES·32 values: GROUPS
// rows a block.
extern "C" __global__ void layer_norm_backward_rows(float *dx, const float *dy, const float *x, int rows, int cols,
		const float *gamma, const float *mean, const float *rstd, const float *res) {
	GROUP_ROW(rows)
	int n = has ? cols : 0;
	unsigned long long off = (unsigned long long)row * cols;
	const float *xr = x + off, *dyr = dy + off;
	float *dxr = dx + off;
	float m = mean[row], q = rstd[row];
	double sg = 0, sgh = 0;
	for (int j = lane; j < n; j += LANES) {
		float g = dyr[j] * gamma[j];
		sg += g;
		sgh += (double)g * ((xr[j] - m) * q);
	}
	float mg = (float)(group_sum(sg) / cols);
	float mgh = (float)(group_sum(sgh) / cols);
	for (int j = lane; j < n; j += LANES) {
		float v = q * (dyr[j] * gamma[j] - mg - (xr[j] - m) * q * mgh);
		dxr[j] = res ? __fadd_rn(v, res[off + j]) : v;
	}
}

// dgamma = Σ_rows dy·h and dbeta = Σ_rows dy (overwritten): a block sums
// COLS columns, its threads in BLOCK/COLS lanes of rows, in double.
#define COLS 32
extern "C" __global__ void layer_norm_param_grads(float *dgamma, float *dbeta, const float *dy, const float *x,
		int rows, int cols, const float *mean, const float *rstd) {
	__shared__ double sg[BLOCK], sb[BLOCK];
	int c = threadIdx.x % COLS, lane = threadIdx.x / COLS;
	int j = blockIdx.x * COLS + c;
	double g = 0, b = 0;
	if (j < cols) {
		for (int r = lane; r < rows; r += BLOCK / COLS) {
			unsigned long long i = (unsigned long long)r * cols + j;
			float d = dy[i];
			g += d * ((x[i] - mean[r]) * rstd[r]);
			b += d;
		}
	}
	sg[threadIdx.x] = g;
	sb[threadIdx.x] = b;
	__syncthreads();
	if (lane == 0 && j < cols) {
		for (int k = 1; k < BLOCK / COLS; k++) {
			g += sg[threadIdx.x + k * COLS];
			b += sb[threadIdx.x + k * COLS];
		}
		dgamma[j] = (float)g;
		dbeta[j] = (float)b;
	}
}

// layer_norm_param_grads for many rows, in two steps, so that more than
// cols/COLS blocks share the work: block (k, chunk) sums rows
// chunk·per … chunk·per + per - 1 of COLS columns as layer_norm_param_grads
// does, into part [chunks, 2, cols] in double (dgamma's, then dbeta's);
// layer_norm_param_sum adds the chunks in order.
extern "C" __global__ void layer_norm_param_partials(double *part, const float *dy, const float *x,
		int rows, int cols, int chunks, const float *mean, const float *rstd) {
	__shared__ double sg[BLOCK], sb[BLOCK];
	int colBlocks = (cols + COLS - 1) / COLS;
	int chunk = blockIdx.x / colBlocks, per = (rows + chunks - 1) / chunks;
	int r0 = chunk * per, r1 = r0 + per < rows ? r0 + per : rows;
	int c = threadIdx.x % COLS, lane = threadIdx.x / COLS;
	int j = blockIdx.x % colBlocks * COLS + c;
	double g = 0, b = 0;
	if (j < cols) {
		for (int r = r0 + lane; r < r1; r += BLOCK / COLS) {
			unsigned long long i = (unsigned long long)r * cols + j;
			float d = dy[i];
			g += d * ((x[i] - mean[r]) * rstd[r]);
			b += d;
		}
	}
	sg[threadIdx.x] = g;
	sb[threadIdx.x] = b;
	__syncthreads();
	if (lane == 0 && j < cols) {
		for (int k = 1; k < BLOCK / COLS; k++) {
			g += sg[threadIdx.x + k * COLS];
			b += sb[threadIdx.x + k * COLS];
		}
		part[(long long)chunk * 2 * cols + j] = g;
		part[(long long)chunk * 2 * cols + cols + j] = b;
	}
}

extern "C" __global__ void layer_norm_param_sum(float *dgamma, float *dbeta, const double *part, int cols, int chunks) {
	for (int j = blockIdx.x * BLOCK + threadIdx.x; j < cols; j += gridDim.x * BLOCK) {
		double g = 0, b = 0;
		for (int k = 0; k < chunks; k++) {
			g += part[(long long)k * 2 * cols + j];
			b += part[(long long)k * 2 * cols + cols + j];
		}
		dgamma[j] = (float)g;
		dbeta[j] = (float)b;
	}
}

// y = softmax(scale·x) per row; with causal set, row r sees columns
// 0…r mod cols (stacked square blocks, one per head) and the rest is 0.
// With y16 set, y is written there in 16 bits instead, as softmax_rows.
extern "C" __global__ void softmax(float *y, const float *x, int cols, float scale, int causal,
		unsigned short *y16, int fmt) {
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
		if (!y16) yr[j] = e;
		sum += e;
	}
	float inv = (float)(1.0 / block_sum(sum, s));
	if (y16) {
		unsigned short *hr = y16 + (unsigned long long)blockIdx.x * cols;
		for (int j = threadIdx.x; j < n; j += BLOCK) hr[j] = to_half(expf(xr[j] * scale - mx) * inv, fmt);
		for (int j = n + threadIdx.x; j < cols; j += BLOCK) hr[j] = 0;
		return;
	}
	for (int j = threadIdx.x; j < n; j += BLOCK) yr[j] *= inv;
	for (int j = n + threadIdx.x; j < cols; j += BLOCK) yr[j] = 0;
}

// dx = scale·y·(dy - Σ y·dy) per row, the gradient of softmax(scale·x)
// (masked entries have y = 0). dx may be dy.
extern "C" __global__ void softmax_backward(float *dx, const float *dy, const float *y, int cols, float scale) {
	__shared__ double s[BLOCK];
	unsigned long long off = (unsigned long long)blockIdx.x * cols;
	const float *yr = y + off, *dyr = dy + off;
	float *dxr = dx + off;
	double dot = 0;
	for (int j = threadIdx.x; j < cols; j += BLOCK) dot += yr[j] * dyr[j];
	float d = (float)block_sum(dot, s);
	for (int j = threadIdx.x; j < cols; j += BLOCK) dxr[j] = scale * yr[j] * (dyr[j] - d);
}

// y = x·σ(1.702·x), CLIP's activation.
extern "C" __global__ void quick_gelu(float *y, const float *x, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
		float v = x[i];
		y[i] = v / (1.0f + expf(-1.702f * v));
	}
}

// y = quick_gelu(x) and its derivative slope = s + 1.702·y·(1 - s),
// s = σ(1.702·x). slope may be x.
extern "C" __global__ void quick_gelu_slope(float *y, float *slope, const float *x, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
		float v = x[i];
		float e = 1.0f + expf(-1.702f * v);
		float yv = v / e, s = 1.0f / e;
		y[i] = yv;
		slope[i] = s + 1.702f * yv * (1.0f - s);
	}
}

// y = x·Φ(x), the exact GELU, in double. The CPU's float32 GELU
// (kernel.GELU, a polynomial) agrees within 6e-7 relative for x ≥ −4
// and 6e-10 absolute below.
extern "C" __global__ void gelu(float *y, const float *x, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
		double v = x[i];
		y[i] = (float)(0.5 * v * (1.0 + erf(v * 0.70710678118654752)));
	}
}

// slope = Φ(x) + x·φ(x), the derivative of GELU, in double. slope may be x.
extern "C" __global__ void gelu_slope(float *slope, const float *x, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
		double v = x[i];
		slope[i] = (float)(0.5 * (1.0 + erf(v * 0.70710678118654752)) + v * exp(-0.5 * v * v) * 0.39894228040143268);
	}
}

// y = a·b.
extern "C" __global__ void mul(float *y, const float *a, const float *b, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) y[i] = a[i] * b[i];
}

// y = a + b.
extern "C" __global__ void add(float *y, const float *a, const float *b, int n) {
	for (long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) y[i] = a[i] + b[i];
}

// y = the patches of batch images (rows of channels·height·width, NCHW),
// [batch·gr·gc, channels·patch·patch], as kernel.Patches orders them.
// The caller checks that x's and y's values fit an int: the index
// arithmetic is 32-bit (64-bit division is slow).
extern "C" __global__ void patches(float *y, const float *x, int batch, int channels, int height, int width, int patch) {
	unsigned gr = height / patch, gc = width / patch, pp = patch * patch, len = channels * pp;
	unsigned n = batch * gr * gc * len;
	for (unsigned i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) {
		unsigned row = i / len, e = i % len, c = e / pp, p = e % pp / patch, q = e % patch;
		unsigned b = row / (gr * gc), g = row % (gr * gc), gi = g / gc, gj = g % gc;
		y[i] = x[((b * channels + c) * height + gi * patch + p) * width + gj * patch + q];
	}
}

// y [batch·(grid+1), width]: per image the class token plus pos[0], then
// its patch rows plus pos[1…grid], as kernel.TokenEmbed.
// Indices in 32 bits, as patches'.
extern "C" __global__ void token_embed(float *y, const float *p, const float *cls, const float *pos, int batch, int grid, int width) {
	unsigned t = grid + 1, n = batch * t * width;
	for (unsigned i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) {
		unsigned r = i / width, b = r / t, j = i % width, k = r % t;
		y[i] = k == 0 ? cls[j] + pos[j] : p[(b * grid + k - 1) * width + j] + pos[k * width + j];
	}
}

// y [n, cols] = rows 0, step, 2·step, … of x.
extern "C" __global__ void stride_rows(float *y, const float *x, int n, int cols, int step) {
	long long total = (long long)n * cols;
	for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < total; i += (long long)gridDim.x * BLOCK)
		y[i] = x[i / cols * step * cols + i % cols];
}

// Rows 0, step, 2·step, … of y = x [n, cols].
extern "C" __global__ void spread_rows(float *y, const float *x, int n, int cols, int step) {
	long long total = (long long)n * cols;
	for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < total; i += (long long)gridDim.x * BLOCK)
		y[i / cols * step * cols + i % cols] = x[i];
}

// split_index maps value i of s [groups, batch, heads, tokens, hd] to its
// index in m [batch, tokens, groups·heads·hd] (split_heads' layouts), and
// sets *at to its index in q|k|v's bias [groups·heads·hd].
__device__ unsigned split_index(unsigned i, int batch, int tokens, int groups, int heads, int hd, unsigned *at) {
	unsigned r = i / hd, e = i % hd, t = r % tokens;
	r /= tokens;
	unsigned h = r % heads;
	r /= heads;
	unsigned b = r % batch, g = r / batch;
	*at = (g * heads + h) * hd + e;
	return ((b * tokens + t) * groups * heads + g * heads + h) * hd + e;
}

// The layouts of kernel.SplitHeads: s [groups, batch, heads, tokens, hd]
// and m [batch, tokens, groups·heads·hd]; merge copies s into m, else m
// into s. With h16 set (merging only), the copy's destination is h16
// instead, in m's layout, in 16 bits (to_half).
// One thread per run of w values of s, within one head's row (the caller
// sees that w divides hd): w = 4 moves them as one float4 (s and m 16-byte
// aligned, h16 8-byte), any other w one value at a time; the index
// arithmetic, divisions by the shapes, runs once a run. The caller checks
// that the values fit an int, so it is 32-bit (64-bit division is slow).
extern "C" __global__ void split_heads(float *s, float *m, int batch, int tokens, int groups, int heads, int hd, int merge,
		unsigned short *h16, int fmt, const float *bias, int w) {
	unsigned n = (unsigned)groups * batch * heads * tokens * hd, runs = n / w;
	for (unsigned r = blockIdx.x * BLOCK + threadIdx.x; r < runs; r += gridDim.x * BLOCK) {
		unsigned at, i = r * w;
		unsigned j = split_index(i, batch, tokens, groups, heads, hd, &at);
		if (w == 4) {
			if (h16) { // merge into 16 bits
				float4 v = *(const float4 *)(s + i);
				uint2 o;
				o.x = to_half(v.x, fmt) | (unsigned)to_half(v.y, fmt) << 16;
				o.y = to_half(v.z, fmt) | (unsigned)to_half(v.w, fmt) << 16;
				*(uint2 *)(h16 + j) = o;
			} else if (merge) {
				*(float4 *)(m + j) = *(const float4 *)(s + i);
			} else {
				float4 v = *(const float4 *)(m + j);
				if (bias) { // a split adding q|k|v's bias
					v.x = v.x + bias[at];
					v.y = v.y + bias[at + 1];
					v.z = v.z + bias[at + 2];
					v.w = v.w + bias[at + 3];
				}
				*(float4 *)(s + i) = v;
			}
			continue;
		}
		for (int u = 0; u < w; u++) {
			if (h16) h16[j + u] = to_half(s[i + u], fmt); // merge into 16 bits
			else if (merge) m[j + u] = s[i + u];
			else if (bias) s[i + u] = m[j + u] + bias[at + u]; // a split adding q|k|v's bias
			else s[i + u] = m[j + u];
		}
	}
}

// split_pair is split_heads_half for two 16-bit values packed in p (the
// first in the low half), adding b[at] and b[at+1] (b null: nothing).
__device__ unsigned split_pair(unsigned p, const float *b, unsigned at, int fmt) {
	float lo = from_half((unsigned short)(p & 0xffff), fmt), hi = from_half((unsigned short)(p >> 16), fmt);
	if (b) {
		lo = lo + b[at];
		hi = hi + b[at + 1];
	}
	return to_half(lo, fmt) | (unsigned)to_half(hi, fmt) << 16;
}

// split_heads from and to 16 bits, splitting with the bias: h16 in s's
// layout from m16 in m's (q|k|v's product written in 16 bits), each value
// the rounding (to_half) of what split_heads writes for m16's values
// widened, the bias (null: none) added in float32. h16 must not overlap
// m16. One thread per run of w values, as split_heads': w = 8 moves them
// as one uint4 (m16 and h16 16-byte aligned), any other w one at a time.
extern "C" __global__ void split_heads_half(unsigned short *h16, const unsigned short *m16, const float *bias, int batch, int tokens,
		int groups, int heads, int hd, int fmt, int w) {
	unsigned n = (unsigned)groups * batch * heads * tokens * hd, runs = n / w;
	for (unsigned r = blockIdx.x * BLOCK + threadIdx.x; r < runs; r += gridDim.x * BLOCK) {
		unsigned at, i = r * w;
		unsigned j = split_index(i, batch, tokens, groups, heads, hd, &at);
		if (w == 8) {
			uint4 a = *(const uint4 *)(m16 + j), o;
			o.x = split_pair(a.x, bias, at, fmt);
			o.y = split_pair(a.y, bias, at + 2, fmt);
			o.z = split_pair(a.z, bias, at + 4, fmt);
			o.w = split_pair(a.w, bias, at + 6, fmt);
			*(uint4 *)(h16 + i) = o;
			continue;
		}
		for (int u = 0; u < w; u++) {
			float v = from_half(m16[j + u], fmt);
			h16[i + u] = to_half(bias ? v + bias[at + u] : v, fmt);
		}
	}
}

// Every row of y (rows×cols) = v.
// rows·cols fits an int (the caller checks): 32-bit indices, as a 64-bit
// remainder per value is slow.
extern "C" __global__ void fill_rows(float *y, int rows, int cols, const float *v) {
	unsigned n = (unsigned)rows * cols;
	for (unsigned i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) y[i] = v[i % (unsigned)cols];
}

// After a product with beta = 0, x [rows, cols]: y = act(h), h = x + bias
// (bias per column; null: h = x), act 0 quick_gelu's and 1 gelu's
// arithmetic; aux = h with keep 1, the derivative at h (quick_gelu_slope's,
// gelu_slope's) with keep 2, aux times that derivative with keep 3 (a
// gradient through the activation), unwritten with 0. y and aux may be x
// (aux not with keep 3): each thread writes only the value it read. With
// y16 set, y is written there in 16 bits instead (to_half). 32-bit
// indices, as fill_rows'.
extern "C" __global__ void bias_act(float *y, float *aux, const float *x, const float *bias, int rows, int cols, int act, int keep,
		unsigned short *y16, int fmt) {
	unsigned n = (unsigned)rows * cols;
	for (unsigned i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) {
		float h = bias ? x[i] + bias[i % (unsigned)cols] : x[i];
		float yv, s = 0;
		if (act == 0) {
			float e = 1.0f + expf(-1.702f * h);
			yv = h / e;
			float sg = 1.0f / e;
			s = sg + 1.702f * yv * (1.0f - sg);
		} else {
			double v = h, phi = 0.5 * (1.0 + erf(v * 0.70710678118654752));
			yv = (float)(v * phi);
			if (keep >= 2) s = (float)(phi + v * exp(-0.5 * v * v) * 0.39894228040143268);
		}
		if (y16) y16[i] = to_half(yv, fmt); // y unwritten
		else y[i] = yv;
		if (keep == 1) aux[i] = h;
		else if (keep == 2) aux[i] = s;
		else if (keep == 3) aux[i] *= s;
	}
}

// act_value is bias_act's y for h = x + bias: act 0 quick_gelu's
// arithmetic, 1 gelu's.
__device__ float act_value(float h, int act) {
	if (act == 0) {
		float e = 1.0f + expf(-1.702f * h);
		return h / e;
	}
	double v = h, phi = 0.5 * (1.0 + erf(v * 0.70710678118654752));
	return (float)(v * phi);
}

// act_pair is bias_act_half for two 16-bit values packed in p (the first
// in the low half), of columns c and c+1.
__device__ unsigned act_pair(unsigned p, const float *bias, unsigned c, int act, int fmt) {
	float lo = from_half((unsigned short)(p & 0xffff), fmt), hi = from_half((unsigned short)(p >> 16), fmt);
	if (bias) {
		lo = lo + bias[c];
		hi = hi + bias[c + 1];
	}
	return to_half(act_value(lo, act), fmt) | (unsigned)to_half(act_value(hi, act), fmt) << 16;
}

// bias_act from and to 16 bits, keeping nothing: y16 = act(x + bias) for
// the 16-bit x16 (a product's output in 16 bits), each value the rounding
// of what bias_act gives for x16's values widened; act as there. y16 may
// be x16. One thread per run of w values of a row (w divides cols): w = 8
// moves them as one uint4 (x16 and y16 16-byte aligned), any other w one
// at a time; the column, a division, is found once a run. 32-bit indices,
// as fill_rows'.
extern "C" __global__ void bias_act_half(unsigned short *y16, const unsigned short *x16, const float *bias, int rows, int cols,
		int act, int fmt, int w) {
	unsigned n = (unsigned)rows * cols, runs = n / w;
	for (unsigned r = blockIdx.x * BLOCK + threadIdx.x; r < runs; r += gridDim.x * BLOCK) {
		unsigned i = r * w, c = i % (unsigned)cols;
		if (w == 8) {
			uint4 a = *(const uint4 *)(x16 + i), o;
			o.x = act_pair(a.x, bias, c, act, fmt);
			o.y = act_pair(a.y, bias, c + 2, act, fmt);
			o.z = act_pair(a.z, bias, c + 4, act, fmt);
			o.w = act_pair(a.w, bias, c + 6, act, fmt);
			*(uint4 *)(y16 + i) = o;
			continue;
		}
		for (int u = 0; u < w; u++) {
			float x = from_half(x16[i + u], fmt);
			y16[i + u] = to_half(act_value(bias ? x + bias[c + u] : x, act), fmt);
		}
	}
}
`
