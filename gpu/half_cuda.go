//go:build cuda && cgo

package gpu

// #include <stdint.h>
import "C"

import (
	"fmt"
	"sync/atomic"

	"github.com/subtta/subtta/autograd/kernel"
)

// cudaDataType_t's 16-bit real types (library_types.h).
const (
	cudaR16F  = 2
	cudaR16BF = 14
)

// halfGemms counts GemmHalf's products, for the tests: a forward pass in
// bf16 or fp16 took the 16-bit path only if it is counted.
var halfGemms atomic.Int64

// halfBatchedGemms and halfSoftmaxes count the strided-batched products (GemmBatchedHalf) and
// the softmaxes (SoftmaxHalf) with 16-bit operands, for the tests:
// attention took the 16-bit path only if they are counted.
var halfBatchedGemms, halfSoftmaxes atomic.Int64

// halfOutGemms counts the products with a 16-bit C (GemmHalf16), which
// halfGemms counts too.
var halfOutGemms atomic.Int64

// HalfFormat makes the device a kernel.Half: with --precision bf16 or fp16
// a forward pass keeps its frozen weights in that format on the device and
// writes the products' inputs in it; otherwise HalfNone.
func (d *device) HalfFormat() kernel.HalfFormat {
	switch d.prec {
	case BF16:
		return kernel.HalfBF16
	case FP16:
		return kernel.HalfFP16
	}
	return kernel.HalfNone
}

// halfFormat returns the format for a 16-bit kernel, or an error on a
// device without one.
func (d *device) halfFormat(what string) (int, error) {
	f := d.HalfFormat()
	if f == kernel.HalfNone {
		return 0, fmt.Errorf("gpu: %s: the device's products take float32 operands (precision %v)", what, d.prec)
	}
	return int(f), nil
}

// ptr16 checks a 16-bit buffer of n values.
func (d *device) ptr16(what string, b kernel.Buf, n int) (C.uintptr_t, error) {
	if !fits32(n) {
		return 0, fmt.Errorf("gpu: %s: %d values", what, n)
	}
	p, err := d.ptr(what, b, kernel.HalfLen(n))
	return C.uintptr_t(p), err
}

func (d *device) ToHalf(y, x kernel.Buf, n int) error {
	f, err := d.halfFormat("ToHalf")
	if err != nil {
		return err
	}
	py, err := d.ptr16("ToHalf", y, n)
	if err != nil {
		return err
	}
	px, err := d.ptrs("ToHalf", n, x)
	if err != nil || n == 0 {
		return err
	}
	var a args
	a.ptr(py)
	a.ptr(px[0])
	a.i32(n)
	a.i32(f)
	return d.launch("to_half16", elementGrid(n), a)
}

// GemmHalf is cublasGemmEx with A and B in the device's 16-bit format, C
// float32, CUBLAS_COMPUTE_32F: the operands are not rounded again, and the
// sums are float32. Row-major as Gemm.
func (d *device) GemmHalf(transA, transB bool, m, n, k int, alpha float32, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float32, c kernel.Buf, ldc int) error {
	f, err := d.halfFormat("GemmHalf")
	if err != nil {
		return err
	}
	if !fits32(m, n, k, lda, ldb, ldc) {
		return fmt.Errorf("gpu: GemmHalf: sizes out of range (%d×%d×%d)", m, n, k)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		return fmt.Errorf("gpu: GemmHalf with k = 0")
	}
	operand := func(what string, x kernel.Buf, trans bool, rows, cols, ld int) (C.uintptr_t, error) {
		if trans {
			rows, cols = cols, rows
		}
		e, err := extent(what, rows, cols, ld)
		if err != nil {
			return 0, err
		}
		return d.ptr16(what, x, e)
	}
	pa, err := operand("GemmHalf A", a, transA, m, k, lda)
	if err != nil {
		return err
	}
	pb, err := operand("GemmHalf B", b, transB, k, n, ldb)
	if err != nil {
		return err
	}
	pc, err := d.operand("GemmHalf C", c, false, m, n, ldc, 1, 0)
	if err != nil {
		return err
	}
	typ := C.int(cudaR16BF)
	if f == int(kernel.HalfFP16) {
		typ = cudaR16F
	}
	halfGemms.Add(1)
	return d.exec(func() error { return d.gemmTyped(transA, transB, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc, typ) })
}

func (d *device) LayerNormHalf(y16, x kernel.Buf, rows, cols int, gamma, beta kernel.Buf, eps float64, res, bias kernel.Buf) error {
	f, err := d.halfFormat("LayerNormHalf")
	if err != nil {
		return err
	}
	if !fits32(rows, cols, rows*cols) {
		return fmt.Errorf("gpu: LayerNormHalf: %d×%d", rows, cols)
	}
	py, err := d.ptr16("LayerNormHalf", y16, rows*cols)
	if err != nil {
		return err
	}
	p, err := d.ptrs("LayerNormHalf", rows*cols, x)
	if err != nil {
		return err
	}
	g, err := d.ptrs("LayerNormHalf", cols, gamma, beta)
	if err != nil {
		return err
	}
	rb, err := d.residualPtrs("LayerNormHalf", rows, cols, res, bias)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(0) // y: unwritten
	a.ptr(p[0])
	if cols <= shortRow {
		a.i32(rows)
	}
	a.i32(cols)
	a.ptr(g[0])
	a.ptr(g[1])
	a.f64(eps)
	a.ptr(0) // no statistics
	a.ptr(0)
	a.ptr(py)
	a.i32(f)
	a.ptr(rb[0])
	a.ptr(rb[1])
	if cols <= shortRow {
		return d.launch("layer_norm_rows", (rows+rowGroups-1)/rowGroups, a)
	}
	return d.launch("layer_norm", rows, a)
}

func (d *device) MergeHeadsHalf(x16, y kernel.Buf, batch, tokens, heads, headDim int) error {
	f, err := d.halfFormat("MergeHeadsHalf")
	if err != nil {
		return err
	}
	if batch < 0 || tokens < 0 || heads < 0 || headDim < 0 {
		return fmt.Errorf("gpu: MergeHeadsHalf: [%d, %d, %d·%d]", batch, tokens, heads, headDim)
	}
	n := batch * tokens * heads * headDim
	px, err := d.ptr16("MergeHeadsHalf", x16, n)
	if err != nil {
		return err
	}
	py, err := d.ptrs("MergeHeadsHalf", n, y)
	if err != nil || n == 0 {
		return err
	}
	var a args
	a.ptr(py[0])
	a.ptr(0) // m: unwritten
	for _, v := range []int{batch, tokens, 1, heads, headDim, 1} {
		a.i32(v)
	}
	a.ptr(px)
	a.i32(f)
	a.ptr(0) // no bias
	w := 1
	if uintptr(px)%8 == 0 { // four 16-bit values as one uint2
		w = runWidth(headDim, 4, 16, py[0])
	}
	a.i32(w)
	return d.launch("split_heads", elementGrid(n/w), a)
}

// biasActHalf checks what BiasActivationHalf and BiasActivationHalf16
// share (a 16-bit format, the shape, the activation, the 16-bit output and
// the bias) and returns the format and the two pointers.
func (d *device) biasActHalf(what string, y16 kernel.Buf, rows, cols int, bias kernel.Buf, act kernel.Activation) (f int, py, pb C.uintptr_t, err error) {
	if f, err = d.halfFormat(what); err != nil {
		return 0, 0, 0, err
	}
	if !fits32(rows, cols, rows*cols) {
		return 0, 0, 0, fmt.Errorf("gpu: %s: %d×%d", what, rows, cols)
	}
	if act != kernel.QuickGELUActivation && act != kernel.GELUActivation {
		return 0, 0, 0, fmt.Errorf("gpu: %s: activation %d", what, act)
	}
	if py, err = d.ptr16(what, y16, rows*cols); err != nil {
		return 0, 0, 0, err
	}
	b, err := d.optPtrs(what, cols, bias)
	if err != nil {
		return 0, 0, 0, err
	}
	return f, py, b[0], nil
}

func (d *device) BiasActivationHalf(y16, x kernel.Buf, rows, cols int, bias kernel.Buf, act kernel.Activation) error {
	f, py, pb, err := d.biasActHalf("BiasActivationHalf", y16, rows, cols, bias, act)
	if err != nil {
		return err
	}
	p, err := d.ptrs("BiasActivationHalf", rows*cols, x)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(0) // y: unwritten
	a.ptr(0) // aux: keep nothing
	a.ptr(p[0])
	a.ptr(pb)
	a.i32(rows)
	a.i32(cols)
	a.i32(int(act))
	a.i32(int(kernel.KeepNone))
	a.ptr(py)
	a.i32(f)
	return d.launch("bias_act", elementGrid(rows*cols), a)
}

// operand16 checks a 16-bit GEMM operand as operand does a float32 one:
// op(X) is rows×cols, stored transposed when trans, batch of them stride
// 16-bit values apart.
func (d *device) operand16(what string, x kernel.Buf, trans bool, rows, cols, ld, batch, stride int) (C.uintptr_t, error) {
	if trans {
		rows, cols = cols, rows
	}
	e, err := extent(what, rows, cols, ld)
	if err != nil {
		return 0, err
	}
	if batch > 1 && e > 0 {
		e += (batch - 1) * stride
	}
	return d.ptr16(what, x, e)
}

// GemmBatchedHalf is cublasGemmStridedBatchedEx with A and B in the
// device's 16-bit format, C float32, CUBLAS_COMPUTE_32F: attention's
// products over batch×heads from 16-bit operands in memory. Row-major as
// GemmBatched; strideA and strideB count 16-bit values.
func (d *device) GemmBatchedHalf(transA, transB bool, batch, m, n, k int, alpha float32, a kernel.Buf, lda, strideA int, b kernel.Buf, ldb, strideB int, beta float32, c kernel.Buf, ldc, strideC int) error {
	f, err := d.halfFormat("GemmBatchedHalf")
	if err != nil {
		return err
	}
	if !fits32(batch, m, n, k, lda, ldb, ldc, strideA, strideB, strideC) {
		return fmt.Errorf("gpu: GemmBatchedHalf: sizes out of range (batch %d, %d×%d×%d)", batch, m, n, k)
	}
	if batch == 0 || m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		return fmt.Errorf("gpu: GemmBatchedHalf with k = 0")
	}
	pa, err := d.operand16("GemmBatchedHalf A", a, transA, m, k, lda, batch, strideA)
	if err != nil {
		return err
	}
	pb, err := d.operand16("GemmBatchedHalf B", b, transB, k, n, ldb, batch, strideB)
	if err != nil {
		return err
	}
	pc, err := d.operand("GemmBatchedHalf C", c, false, m, n, ldc, batch, strideC)
	if err != nil {
		return err
	}
	typ := C.int(cudaR16BF)
	if f == int(kernel.HalfFP16) {
		typ = cudaR16F
	}
	halfBatchedGemms.Add(1)
	return d.exec(func() error {
		return d.gemmTypedBatched(transA, transB, batch, m, n, k, alpha, pa, lda, strideA, pb, ldb, strideB, beta, pc, ldc, strideC, typ)
	})
}

// SplitHeadsHalf16 runs split_heads_half: q|k|v split into heads from and
// into 16 bits, adding bias in float32.
func (d *device) SplitHeadsHalf16(y16, x16, bias kernel.Buf, batch, tokens, groups, heads, headDim int) error {
	f, err := d.halfFormat("SplitHeadsHalf16")
	if err != nil {
		return err
	}
	if batch < 0 || tokens < 0 || groups < 0 || heads < 0 || headDim < 0 {
		return fmt.Errorf("gpu: SplitHeadsHalf16: [%d, %d, %d·%d·%d]", batch, tokens, groups, heads, headDim)
	}
	n := batch * tokens * groups * heads * headDim
	py, err := d.ptr16("SplitHeadsHalf16", y16, n)
	if err != nil {
		return err
	}
	px, err := d.ptr16("SplitHeadsHalf16", x16, n)
	if err != nil {
		return err
	}
	pb, err := d.optPtrs("SplitHeadsHalf16", groups*heads*headDim, bias)
	if err != nil || n == 0 {
		return err
	}
	var a args
	a.ptr(py)
	a.ptr(px)
	a.ptr(pb[0])
	for _, v := range []int{batch, tokens, groups, heads, headDim} {
		a.i32(v)
	}
	a.i32(f)
	w := runWidth(headDim, 8, 16, py, px)
	a.i32(w)
	return d.launch("split_heads_half", elementGrid(n/w), a)
}

// SoftmaxHalf runs softmax_rows or softmax writing 16 bits.
func (d *device) SoftmaxHalf(y16, x kernel.Buf, rows, cols int, scale float32, causal bool) error {
	f, err := d.halfFormat("SoftmaxHalf")
	if err != nil {
		return err
	}
	if !fits32(rows, cols, rows*cols) {
		return fmt.Errorf("gpu: SoftmaxHalf: %d×%d", rows, cols)
	}
	py, err := d.ptr16("SoftmaxHalf", y16, rows*cols)
	if err != nil {
		return err
	}
	p, err := d.ptrs("SoftmaxHalf", rows*cols, x)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(0) // y: unwritten
	a.ptr(p[0])
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
	a.ptr(py)
	a.i32(f)
	halfSoftmaxes.Add(1)
	if cols <= shortRow {
		return d.launch("softmax_rows", (rows+rowGroups-1)/rowGroups, a)
	}
	return d.launch("softmax", rows, a)
}

// GemmHalf16 is GemmHalf with C in 16 bits too: cublasGemmEx with A, B
// and C in the device's 16-bit format and CUBLAS_COMPUTE_32F, the float32
// sums (alpha and beta applied in float32) rounded to C's format. Row-major
// as Gemm.
func (d *device) GemmHalf16(transA, transB bool, m, n, k int, alpha float32, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float32, c kernel.Buf, ldc int) error {
	f, err := d.halfFormat("GemmHalf16")
	if err != nil {
		return err
	}
	if !fits32(m, n, k, lda, ldb, ldc) {
		return fmt.Errorf("gpu: GemmHalf16: sizes out of range (%d×%d×%d)", m, n, k)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		return fmt.Errorf("gpu: GemmHalf16 with k = 0")
	}
	pa, err := d.operand16("GemmHalf16 A", a, transA, m, k, lda, 1, 0)
	if err != nil {
		return err
	}
	pb, err := d.operand16("GemmHalf16 B", b, transB, k, n, ldb, 1, 0)
	if err != nil {
		return err
	}
	pc, err := d.operand16("GemmHalf16 C", c, false, m, n, ldc, 1, 0)
	if err != nil {
		return err
	}
	typ := C.int(cudaR16BF)
	if f == int(kernel.HalfFP16) {
		typ = cudaR16F
	}
	halfGemms.Add(1)
	halfOutGemms.Add(1)
	return d.exec(func() error {
		return d.gemmTypedC(transA, transB, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc, typ, typ)
	})
}

// BiasActivationHalf16 runs bias_act_half: BiasActivationHalf from a
// 16-bit x16.
func (d *device) BiasActivationHalf16(y16, x16 kernel.Buf, rows, cols int, bias kernel.Buf, act kernel.Activation) error {
	f, py, pb, err := d.biasActHalf("BiasActivationHalf16", y16, rows, cols, bias, act)
	if err != nil {
		return err
	}
	px, err := d.ptr16("BiasActivationHalf16", x16, rows*cols)
	if err != nil || rows == 0 || cols == 0 {
		return err
	}
	var a args
	a.ptr(py)
	a.ptr(px)
	a.ptr(pb)
	a.i32(rows)
	a.i32(cols)
	a.i32(int(act))
	a.i32(f)
	w := runWidth(cols, 8, 16, py, px)
	a.i32(w)
	return d.launch("bias_act_half", elementGrid(rows*cols/w), a)
}
