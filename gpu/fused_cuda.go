//go:build cuda && cgo

package gpu

// #include <stdint.h>
import "C"

import (
	"fmt"

	"github.com/subtta/subtta/autograd/kernel"
)

// BiasActivation runs bias_act: the bias, the activation and what backward
// keeps, in one pass after a product with beta = 0 (or, with MulSlope, the
// activation recomputed and the gradient through it).
func (d *device) BiasActivation(y, aux, x kernel.Buf, rows, cols int, bias kernel.Buf, act kernel.Activation, keep kernel.Keep) error {
	if !fits32(rows, cols, rows*cols) {
		return fmt.Errorf("gpu: BiasActivation: %d×%d", rows, cols)
	}
	if act != kernel.QuickGELUActivation && act != kernel.GELUActivation || keep < kernel.KeepNone || keep > kernel.MulSlope {
		return fmt.Errorf("gpu: BiasActivation: activation %d, keep %d", act, keep)
	}
	p, err := d.ptrs("BiasActivation", rows*cols, y, x)
	if err != nil {
		return err
	}
	var pa []C.uintptr_t
	if keep != kernel.KeepNone {
		if pa, err = d.ptrs("BiasActivation", rows*cols, aux); err != nil {
			return err
		}
	} else {
		pa = make([]C.uintptr_t, 1)
	}
	pb, err := d.optPtrs("BiasActivation", cols, bias)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(p[0])
	a.ptr(pa[0])
	a.ptr(p[1])
	a.ptr(pb[0])
	a.i32(rows)
	a.i32(cols)
	a.i32(int(act))
	a.i32(int(keep))
	a.ptr(0) // y16: y in float32
	a.i32(0)
	return d.launch("bias_act", elementGrid(rows*cols), a)
}

// SplitHeadsBias runs split_heads adding bias as it splits.
func (d *device) SplitHeadsBias(y, x, bias kernel.Buf, batch, tokens, groups, heads, headDim int) error {
	pb, err := d.optPtrs("SplitHeadsBias", groups*heads*headDim, bias)
	if err != nil {
		return err
	}
	return d.heads("SplitHeadsBias", y, x, pb[0], batch, tokens, groups, heads, headDim, false)
}
