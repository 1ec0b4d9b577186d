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
type halfHost struct {
	kernel.Device
	gemms, converted atomic.Int32
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
	y := make(kernel.HostBuf, rows*cols)
	var err error
	if res != nil {
		err = d.Device.LayerNormResidual(y, x, rows, cols, gamma, beta, eps, nil, nil, res, bias)
	} else {
		err = d.Device.LayerNorm(y, x, rows, cols, gamma, beta, eps, nil, nil)
	}
	if err != nil {
		return err
	}
	round16(y16, y)
	return nil
}

func (d *halfHost) MergeHeadsHalf(x16, y kernel.Buf, batch, tokens, heads, headDim int) error {
	x := make(kernel.HostBuf, batch*tokens*heads*headDim)
	if err := d.Device.MergeHeads(x, y, batch, tokens, 1, heads, headDim); err != nil {
		return err
	}
	round16(x16, x)
	return nil
}

func (d *halfHost) BiasActivationHalf(y16, x kernel.Buf, rows, cols int, bias kernel.Buf, act kernel.Activation) error {
	y := make(kernel.HostBuf, rows*cols)
	if err := d.Device.BiasActivation(y, nil, x, rows, cols, bias, act, kernel.KeepNone); err != nil {
		return err
	}
	round16(y16, y)
	return nil
}

// TestDeviceBlockHalf runs blocks on a kernel.Half device (halfHost,
// bfloat16): a pass without gradients takes 16-bit operands in the four
// linear products of each block, 12 device operations a block as in
// float32, converts each frozen weight once (not again in the second pass)
// and agrees with the CPU's float32 within 2e-2
// of the largest value (operands with 8 bits of mantissa, as
// TestPrecisionMatchesCPU bounds the features in package gpu); a pass that
// records for backward, and a block whose weights are not kept on the
// device, take float32 operands and give the bits of kernel.Host.
func TestDeviceBlockHalf(t *testing.T) {
	s := sizes{batch: 2, tokens: 7, heads: 4, headDim: 16, mlp: 300}
	ins := blockInputs(s, 2, false)
	for i := range ins {
		ins[i].grad = false
	}
	data := makeData(ins, 31)
	build := func(keep bool) (smat.Tensor, []*BlockParams) {
		xs := asTensors(makeInputs[float32](ins, data))
		var ps []*BlockParams
		for _, b := range blocksFrom(xs, 2, s.batch, s.heads, false) {
			p := b.params()
			for _, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
				l.KeepPacked(keep)
			}
			ps = append(ps, p)
		}
		return xs[0], ps
	}
	x, ps := build(true)
	want := values[float32](TransformerBlocks(x, ps, s.batch))
	lc := newLaunchCounter()
	d := &halfHost{Device: lc}
	var got, again []float32
	withDevice(t, d, func() {
		got = values[float32](TransformerBlocks(x, ps, s.batch))
		lc.take() // the first pass also converts the weights
		g := d.gemms.Load()
		again = values[float32](TransformerBlocks(x, ps, s.batch))
		// halfHost's 16-bit LayerNorm, head merge and activation run as
		// the counted float32 operations they round; its products are
		// counted apart.
		calls, n := lc.take()
		if ops := n + int(d.gemms.Load()-g); ops != 2*12 {
			t.Errorf("second pass of two blocks: %d device operations %v and %d 16-bit products, want 12 a block",
				n, sorted(calls), d.gemms.Load()-g)
		}
	})
	if g, c := d.gemms.Load(), d.converted.Load(); g != 2*2*4 || c != 2*4 {
		t.Errorf("two passes of two blocks: %d products with 16-bit operands and %d weights converted, want 16 and 8", g, c)
	}
	e := relErr(f64(got), f64(want))
	t.Logf("bf16 operands: relative error %.2e", e)
	if e > 2e-2 || e == 0 {
		t.Errorf("bf16 operands: relative error %.2e, want in (0, 2e-2]", e)
	}
	sameBits(t, "second pass", again, got)

	// Recording for backward, and weights not kept: float32 operands.
	for _, c := range []struct {
		name      string
		keep, rec bool
	}{{"recording", true, true}, {"weights not kept", false, false}} {
		for i := range ins {
			ins[i].grad = c.rec && i == 0
		}
		x, ps := build(c.keep)
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
