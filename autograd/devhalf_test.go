package autograd

import (
	"math"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// halfHost is kernel.Host as a kernel.Half device in bfloat16, counting its
// 16-bit products and conversions: the model code's 16-bit path on the CPU.
// Its Device may be a launchCounter, which then counts the 16-bit
// operations too, by their names.
type halfHost struct {
	kernel.Device
	gemms, converted, uploads atomic.Int32
}

func (d *halfHost) Upload(dst kernel.Buf, src []float32) error {
	d.uploads.Add(1)
	return d.Device.Upload(dst, src)
}

// count counts an operation of the 16-bit path on the launchCounter below,
// if any.
func (d *halfHost) count(name string) {
	if c, ok := d.Device.(*launchCounter); ok {
		c.count(name)
	}
}

func (*halfHost) HalfFormat() kernel.HalfFormat { return kernel.HalfBF16 }

// bf16 rounds x to bfloat16, to nearest, ties to even, subnormals kept.
func bf16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// u16 is the first n 16-bit values of a Host buffer.
func u16(b kernel.Buf, n int) []uint16 {
	s := b.(kernel.HostBuf)
	return unsafe.Slice((*uint16)(unsafe.Pointer(&s[0])), 2*len(s))[:n]
}

// round16 writes x rounded into the 16-bit y.
func round16(y kernel.Buf, x []float32) {
	h := u16(y, len(x))
	for i, v := range x {
		h[i] = bf16(v)
	}
}

// widen returns the first n 16-bit values of b as float32.
func widen(b kernel.Buf, n int) []float32 {
	v := make([]float32, n)
	for i, h := range u16(b, n) {
		v[i] = math.Float32frombits(uint32(h) << 16)
	}
	return v
}

func (d *halfHost) ToHalf(y, x kernel.Buf, n int) error {
	d.converted.Add(1)
	round16(y, x.(kernel.HostBuf)[:n])
	return nil
}

func (d *halfHost) GemmHalf(transA, transB bool, m, n, k int, alpha float32, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float32, c kernel.Buf, ldc int) error {
	d.gemms.Add(1)
	d.count("GemmHalf")
	ra, rb := m, k
	if transA {
		ra = k
	}
	if transB {
		rb = n
	}
	kernel.Gemm(transA, transB, m, n, k, alpha, widen(a, ra*lda), lda, widen(b, rb*ldb), ldb, beta, c.(kernel.HostBuf), ldc)
	return nil
}

func (d *halfHost) LayerNormHalf(y16, x kernel.Buf, rows, cols int, gamma, beta kernel.Buf, eps float64, res, bias kernel.Buf) error {
	d.count("LayerNormHalf")
	y := make(kernel.HostBuf, rows*cols)
	var err error
	if res != nil {
		err = kernel.Host.LayerNormResidual(y, x, rows, cols, gamma, beta, eps, nil, nil, res, bias)
	} else {
		err = kernel.Host.LayerNorm(y, x, rows, cols, gamma, beta, eps, nil, nil)
	}
	if err != nil {
		return err
	}
	round16(y16, y)
	return nil
}

func (d *halfHost) MergeHeadsHalf(x16, y kernel.Buf, batch, tokens, heads, headDim int) error {
	d.count("MergeHeadsHalf")
	x := make(kernel.HostBuf, batch*tokens*heads*headDim)
	if err := kernel.Host.MergeHeads(x, y, batch, tokens, 1, heads, headDim); err != nil {
		return err
	}
	round16(x16, x)
	return nil
}

func (d *halfHost) BiasActivationHalf(y16, x kernel.Buf, rows, cols int, bias kernel.Buf, act kernel.Activation) error {
	d.count("BiasActivationHalf")
	y := make(kernel.HostBuf, rows*cols)
	if err := kernel.Host.BiasActivation(y, nil, x, rows, cols, bias, act, kernel.KeepNone); err != nil {
		return err
	}
	round16(y16, y)
	return nil
}

func (d *halfHost) GemmHalf16(transA, transB bool, m, n, k int, alpha float32, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float32, c kernel.Buf, ldc int) error {
	d.gemms.Add(1)
	d.count("GemmHalf16")
	y := widen(c, (m-1)*ldc+n)
	kernel.Gemm(transA, transB, m, n, k, alpha, widen(a, extent16(transA, m, k, lda, 1, 0)), lda,
		widen(b, extent16(transB, k, n, ldb, 1, 0)), ldb, beta, y, ldc)
	h := u16(c, len(y))
	for i := range m {
		for j := range n {
			h[i*ldc+j] = bf16(y[i*ldc+j])
		}
	}
	return nil
}

func (d *halfHost) BiasActivationHalf16(y16, x16 kernel.Buf, rows, cols int, bias kernel.Buf, act kernel.Activation) error {
	d.count("BiasActivationHalf16")
	y := make(kernel.HostBuf, rows*cols)
	if err := kernel.Host.BiasActivation(y, nil, kernel.HostBuf(widen(x16, rows*cols)), rows, cols, bias, act, kernel.KeepNone); err != nil {
		return err
	}
	round16(y16, y)
	return nil
}

// extent16 is the number of 16-bit values an operand op(X) of rows×cols,
// stored transposed when trans, with leading dimension ld spans over batch
// matrices stride apart.
func extent16(trans bool, rows, cols, ld, batch, stride int) int {
	if trans {
		rows, cols = cols, rows
	}
	return (batch-1)*stride + (rows-1)*ld + cols
}

func (d *halfHost) GemmBatchedHalf(transA, transB bool, batch, m, n, k int, alpha float32, a kernel.Buf, lda, strideA int, b kernel.Buf, ldb, strideB int, beta float32, c kernel.Buf, ldc, strideC int) error {
	d.count("GemmBatchedHalf")
	aw := widen(a, extent16(transA, m, k, lda, batch, strideA))
	bw := widen(b, extent16(transB, k, n, ldb, batch, strideB))
	kernel.GemmBatched(transA, transB, batch, m, n, k, alpha, aw, lda, strideA, bw, ldb, strideB, beta, c.(kernel.HostBuf), ldc, strideC)
	return nil
}

func (d *halfHost) SplitHeadsHalf16(y16, x16, bias kernel.Buf, batch, tokens, groups, heads, headDim int) error {
	d.count("SplitHeadsHalf16")
	n := batch * tokens * groups * heads * headDim
	y := make(kernel.HostBuf, n)
	if err := kernel.Host.SplitHeadsBias(y, kernel.HostBuf(widen(x16, n)), bias, batch, tokens, groups, heads, headDim); err != nil {
		return err
	}
	round16(y16, y)
	return nil
}

func (d *halfHost) SoftmaxHalf(y16, x kernel.Buf, rows, cols int, scale float32, causal bool) error {
	d.count("SoftmaxHalf")
	y := make(kernel.HostBuf, rows*cols)
	if err := kernel.Host.Softmax(y, x, rows, cols, scale, causal); err != nil {
		return err
	}
	round16(y16, y)
	return nil
}

// halfBlocks returns an input and two blocks of sizes s whose linear
// layers keep their weights packed (on a device: kept there) or not.
func halfBlocks(s sizes, ins []input, data [][]float64, causal, keep bool) (smat.Tensor, []*BlockParams) {
	xs := asTensors(makeInputs[float32](ins, data))
	var ps []*BlockParams
	for _, b := range blocksFrom(xs, 2, s.batch, s.heads, causal) {
		p := b.params()
		for _, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
			l.KeepPacked(keep)
		}
		ps = append(ps, p)
	}
	return xs[0], ps
}

// TestDeviceBlockHalf runs blocks on a kernel.Half device (halfHost,
// bfloat16, over a launchCounter): a pass without gradients takes 16-bit
// operands in the four linear products of each block (q|k|v's and c_fc's
// into 16 bits, which the head split and the activation read) and in
// attention's two products, converts each frozen weight once (not again
// in the second pass) and agrees with the CPU's float32 within 2e-2 of
// the largest value where attention takes float32 operands (operands with
// 8 bits of mantissa, as TestPrecisionMatchesCPU bounds the features in
// package gpu; 8.6e-3 measured), and where it takes 16-bit ones within
// 4e-2 for the vision blocks (2.3e-2 measured) and 6e-2 for the causal
// text blocks (4.6e-2 measured; 2.0e-2 and 2.6e-2 while q|k|v's product
// was written in float32, 1.4e-2 with float32 attention; without
// in_proj's bias 0.38 and 0.57): the random weights, N(0, 1/4) over
// widths of 48 and 64, give scores s·q·k of 11 to 37 (root mean square),
// which q's and k's bfloat16 rounding (twice now: the product's, then with
// the bias) moves by a fraction of a unit before the softmax, so that the
// peaked probabilities move by several percent. The second pass's
// operations are counted by name, 12 a block as in float32: ln_1 and ln_2
// also write the residual stream with out_proj's and c_proj's bias, which
// those products add onto (no bias-and-residual pass); q|k|v's product
// writes 16 bits only (GemmHalf16, no GemmHalf into float32 for it) and
// attention writes q, k, v and P in 16 bits only (SplitHeadsHalf16 from
// the 16-bit product, SoftmaxHalf, GemmBatchedHalf), and no float32 head
// split, softmax or batched product runs, except where batch·tokens·width
// is odd (q, k and v would not start on a float32 slot), where q|k|v's
// product writes float32 and attention takes float32 operands. The second
// pass uploads its input alone: the LayerNorms' γ and β are resident on the
// device as the weights are (a pass that uploaded them could not be
// replayed from a CUDA Graph). A pass that records for backward, and a block whose weights
// are not kept on the device, take float32 operands and give the bits of
// kernel.Host.
func TestDeviceBlockHalf(t *testing.T) {
	half := map[string]int{"LayerNormHalf": 2, "GemmHalf": 2, "GemmHalf16": 2, "SplitHeadsHalf16": 1, "GemmBatchedHalf": 2,
		"SoftmaxHalf": 1, "MergeHeadsHalf": 1, "BiasActivationHalf16": 1}
	odd := map[string]int{"LayerNormHalf": 2, "GemmHalf": 3, "GemmHalf16": 1, "SplitHeadsBias": 1, "GemmBatched": 2,
		"Softmax": 1, "MergeHeadsHalf": 1, "BiasActivationHalf16": 1}
	for _, c := range []struct {
		name   string
		s      sizes
		causal bool
		ops    map[string]int // per block, in a pass without a conversion
		tol    float64
	}{
		{"vision", sizes{batch: 2, tokens: 7, heads: 4, headDim: 16, mlp: 300}, false, half, 4e-2},
		{"text (causal)", sizes{batch: 3, tokens: 9, heads: 2, headDim: 24, mlp: 200}, true, half, 6e-2},
		{"odd batch·tokens·width", sizes{batch: 1, tokens: 7, heads: 3, headDim: 5, mlp: 40}, false, odd, 2e-2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			ins := blockInputs(s, 2, false)
			for i := range ins {
				ins[i].grad = false
			}
			data := makeData(ins, 31)
			x, ps := halfBlocks(s, ins, data, c.causal, true)
			want := values[float32](TransformerBlocks(x, ps, s.batch))
			d := &halfHost{Device: newLaunchCounter()}
			var got, again []float32
			withDevice(t, d, func() {
				got = values[float32](TransformerBlocks(x, ps, s.batch))
				d.Device.(*launchCounter).take()
				d.uploads.Store(0)
				again = values[float32](TransformerBlocks(x, ps, s.batch))
			})
			if u := d.uploads.Load(); u != 1 {
				t.Errorf("second pass of two blocks: %d uploads, want 1 (the input; the weights and LayerNorms are resident)", u)
			}
			if g, c := d.gemms.Load(), d.converted.Load(); g != 2*2*4 || c != 2*4 {
				t.Errorf("two passes of two blocks: %d products with 16-bit operands and %d weights converted, want 16 and 8", g, c)
			}
			ops, n := d.Device.(*launchCounter).take()
			t.Logf("second pass: %d operations %v", n, sorted(ops))
			if n != 2*12 {
				t.Errorf("second pass of two blocks: %d operations, want 12 a block", n)
			}
			for name, k := range c.ops {
				if ops[name] != 2*k {
					t.Errorf("second pass of two blocks: %d × %s, want %d", ops[name], name, 2*k)
				}
			}
			for name, k := range ops {
				if c.ops[name] == 0 {
					t.Errorf("second pass: %d × %s, want none", k, name)
				}
			}
			e := relErr(f64(got), f64(want))
			t.Logf("bf16 operands: relative error %.2e (bound %.0e)", e, c.tol)
			if e > c.tol || e == 0 {
				t.Errorf("bf16 operands: relative error %.2e, want in (0, %.0e]", e, c.tol)
			}
			sameBits(t, "second pass", again, got)
		})
	}

	s := sizes{batch: 2, tokens: 7, heads: 4, headDim: 16, mlp: 300}
	ins := blockInputs(s, 2, false)
	data := makeData(ins, 31)
	// Recording for backward, and weights not kept: float32 operands.
	for _, c := range []struct {
		name      string
		keep, rec bool
	}{{"recording", true, true}, {"weights not kept", false, false}} {
		for i := range ins {
			ins[i].grad = c.rec && i == 0
		}
		x, ps := halfBlocks(s, ins, data, false, c.keep)
		var want, got []float32
		withDevice(t, kernel.Host, func() { want = values[float32](TransformerBlocks(x, ps, s.batch)) })
		d := &halfHost{Device: kernel.Host}
		var y smat.Tensor
		withDevice(t, d, func() { y = TransformerBlocks(x, ps, s.batch); got = values[float32](y) })
		if c.rec {
			if _, ok := y.(*ag.Operator); !ok {
				t.Fatalf("%s: no graph recorded", c.name)
			}
		}
		if d.gemms.Load() != 0 {
			t.Errorf("%s: %d products with 16-bit operands, want none", c.name, d.gemms.Load())
		}
		sameBits(t, c.name, got, want)
	}
}
