//go:build cuda && cgo

package gpu

import (
	"fmt"

	"github.com/subtta/subtta/autograd/kernel"
)

// towerSource is the CUDA C of the kernels of the towers' ends, compiled
// with rowwiseSource (it uses its BLOCK).
const towerSource = `
// Row i of y [n, cols] = row idx[i] of x (nx rows), or row -1-idx[i] of alt
// (nalt rows) where idx[i] is negative, plus row i % period of pos unless
// pos is null. The indices are float values, exact up to 2^24; one outside
// its matrix gives NaN (autograd checks the ids before they go up).
extern "C" __global__ void gather_rows(float *y, const float *x, int nx, const float *alt, int nalt, const float *idx,
		int n, int cols, const float *pos, int period) {
	long long total = (long long)n * cols;
	for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < total; i += (long long)gridDim.x * BLOCK) {
		int r = (int)(i / cols), c = (int)(i % cols);
		int j = (int)idx[r];
		const float *src = x;
		int rows = nx;
		if (j < 0) {
			src = alt;
			rows = nalt;
			j = -1 - j;
		}
		float v = src != 0 && j < rows ? src[(long long)j * cols + c] : __int_as_float(0x7fc00000);
		if (pos != 0)
			v += pos[(long long)(r % period) * cols + c];
		y[i] = v;
	}
}

// y = x, n values (the float64 matrices of SymEigInto, as float pairs).
extern "C" __global__ void copy_values(float *y, const float *x, int n) {
	for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK)
		y[i] = x[i];
}
`

func init() { rowwiseKernels = append(rowwiseKernels, "gather_rows", "copy_values") }

// copyValues copies the first n values of x into y on the device.
func (d *device) copyValues(y, x kernel.Buf, n int) error {
	p, err := d.ptrs("copy", n, y, x)
	if err != nil || n == 0 {
		return err
	}
	if p[0] == p[1] {
		return nil
	}
	var a args
	a.ptr(p[0])
	a.ptr(p[1])
	a.i32(n)
	return d.launch("copy_values", elementGrid(n), a)
}

func (d *device) GatherRows(y, x, alt, idx kernel.Buf, n, cols int, pos kernel.Buf, period int) error {
	if n < 0 || cols <= 0 || pos != nil && period < 1 || !fits32(n*cols) {
		return fmt.Errorf("gpu: GatherRows: %d rows of %d values, positions every %d", n, cols, period)
	}
	if n == 0 {
		return nil
	}
	py, err := d.ptrs("GatherRows", n*cols, y)
	if err != nil {
		return err
	}
	pi, err := d.ptrs("GatherRows", n, idx)
	if err != nil {
		return err
	}
	px, err := d.ptr("GatherRows", x, cols)
	if err != nil {
		return err
	}
	nalt := 0
	if alt != nil {
		nalt = alt.Len() / cols
	}
	pa, err := d.optPtrs("GatherRows", nalt*cols, alt)
	if err != nil {
		return err
	}
	pp, err := d.optPtrs("GatherRows", min(n, max(period, 1))*cols, pos)
	if err != nil {
		return err
	}
	var a args
	a.ptr(py[0])
	a.ptr(px)
	a.i32(x.Len() / cols)
	a.ptr(pa[0])
	a.i32(nalt)
	a.ptr(pi[0])
	a.i32(n)
	a.i32(cols)
	a.ptr(pp[0])
	a.i32(max(period, 1))
	return d.launch("gather_rows", elementGrid(n*cols), a)
}
