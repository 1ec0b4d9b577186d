//go:build cuda && cgo

package gpu

import (
	"fmt"

	"github.com/subtta/subtta/autograd/kernel"
)

// adamSource is the CUDA C of Adam's update on the device, compiled with
// rowwiseSource (it uses its BLOCK and block_sum). Each product, sum,
// quotient and square root is rounded to float32 as kernel.AdamStep rounds
// it (the _rn intrinsics: NVRTC would otherwise contract a product and a
// sum into one fused multiply-add), so that the device's step gives the
// CPU's bit for bit.
const adamSource = `
// flag[0] = the number of the n values of x that are NaN or +-Inf; one
// block.
extern "C" __global__ void non_finite(float *flag, const float *x, int n) {
	__shared__ double s[BLOCK];
	double c = 0;
	for (int i = threadIdx.x; i < n; i += BLOCK)
		if ((__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u) c += 1;
	c = block_sum(c, s);
	if (threadIdx.x == 0) flag[0] = (float)c;
}

// One Adam or AdamW step of n values, as kernel.AdamStep: mode bit 0 weight
// decay, bit 1 decoupled (AdamW), bit 2 fresh moments; nothing when skip
// is set and skip[0] is not zero.
extern "C" __global__ void adam_step(float *p, const float *g, float *m, float *v, int n, float beta1, float beta2,
		float omb1, float omb2, float eps, float wd, float decay, float neg_step, float bc2_sqrt, int mode,
		const float *skip) {
	if (skip != 0 && skip[0] != 0) return;
	for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) {
		float x = p[i], gi = g[i];
		if (mode & 1) {
			if (mode & 2)
				x = __fmul_rn(x, decay);
			else
				gi = __fadd_rn(gi, __fmul_rn(wd, x));
		}
		float mi = 0, vi = 0;
		if (!(mode & 4)) {
			mi = m[i];
			vi = v[i];
		}
		mi = __fadd_rn(__fmul_rn(mi, beta1), __fmul_rn(omb1, gi));
		vi = __fadd_rn(__fmul_rn(vi, beta2), __fmul_rn(__fmul_rn(omb2, gi), gi));
		m[i] = mi;
		v[i] = vi;
		float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
		p[i] = __fadd_rn(x, __fdiv_rn(__fmul_rn(neg_step, mi), denom));
	}
}
`

func init() { rowwiseKernels = append(rowwiseKernels, "non_finite", "adam_step") }

func (d *device) NonFinite(flag, x kernel.Buf, n int) error {
	if n <= 0 || !fits32(n) {
		return fmt.Errorf("gpu: NonFinite: %d values", n)
	}
	pf, err := d.ptrs("NonFinite", 1, flag)
	if err != nil {
		return err
	}
	px, err := d.ptrs("NonFinite", n, x)
	if err != nil {
		return err
	}
	var a args
	a.ptr(pf[0])
	a.ptr(px[0])
	a.i32(n)
	return d.launch("non_finite", 1, a)
}

func (d *device) AdamStep(p, g, m, v kernel.Buf, n int, s kernel.AdamScalars, skip kernel.Buf) error {
	if n < 0 || !fits32(n) {
		return fmt.Errorf("gpu: AdamStep: %d values", n)
	}
	ps, err := d.ptrs("AdamStep", n, p, g, m, v)
	if err != nil || n == 0 {
		return err
	}
	pk, err := d.optPtrs("AdamStep", 1, skip)
	if err != nil {
		return err
	}
	mode := 0
	if s.HasWeightDecay {
		mode |= 1
	}
	if s.Decoupled {
		mode |= 2
	}
	if s.Fresh {
		mode |= 4
	}
	var a args
	for _, q := range ps {
		a.ptr(q)
	}
	a.i32(n)
	for _, f := range []float32{s.Beta1, s.Beta2, s.OneMinusBeta1, s.OneMinusBeta2, s.Eps, s.WeightDecay, s.Decay, s.NegStepSize, s.BC2Sqrt} {
		a.f32(f)
	}
	a.i32(mode)
	a.ptr(pk[0])
	return d.launch("adam_step", elementGrid(n), a)
}
