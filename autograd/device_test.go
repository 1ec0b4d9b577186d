package autograd

import (
	"errors"
	"maps"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// countingDevice is kernel.Host counting the calls of some operations, so a
// test knows the seam was taken.
type countingDevice struct {
	kernel.Device
	mu    sync.Mutex
	calls map[string]int
}

func newCountingDevice() *countingDevice {
	return &countingDevice{Device: kernel.Host, calls: map[string]int{}}
}

func (d *countingDevice) count(name string) {
	d.mu.Lock()
	d.calls[name]++
	d.mu.Unlock()
}

func (d *countingDevice) Gemm(transA, transB bool, m, n, k int, alpha float32, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float32, c kernel.Buf, ldc int) error {
	d.count("Gemm")
	return d.Device.Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func (d *countingDevice) Softmax(y, x kernel.Buf, rows, cols int, scale float32, causal bool) error {
	d.count("Softmax")
	return d.Device.Softmax(y, x, rows, cols, scale, causal)
}

func (d *countingDevice) SoftmaxBackward(dx, dy, y kernel.Buf, rows, cols int, scale float32) error {
	d.count("SoftmaxBackward")
	return d.Device.SoftmaxBackward(dx, dy, y, rows, cols, scale)
}

func (d *countingDevice) LayerNormBackward(dx, dgamma, dbeta, dy, x kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	d.count("LayerNormBackward")
	return d.Device.LayerNormBackward(dx, dgamma, dbeta, dy, x, rows, cols, gamma, mean, rstd)
}

func (d *countingDevice) LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	d.count("LayerNormBackward") // with the residual's gradient added: the same LayerNorm backward
	return d.Device.LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res, rows, cols, gamma, mean, rstd)
}

func (d *countingDevice) Alloc(n int) (kernel.Buf, error) {
	d.count("Alloc")
	return d.Device.Alloc(n)
}

func (d *countingDevice) Free(b kernel.Buf) {
	d.count("Free")
	d.Device.Free(b)
}

func (d *countingDevice) Download(dst []float32, src kernel.Buf) error {
	d.mu.Lock()
	d.calls["downloaded"] += len(dst)
	d.mu.Unlock()
	return d.Device.Download(dst, src)
}

// counts returns a copy of the counts: a cleanup may free a kept weight
// on another goroutine while the test reads them.
func (d *countingDevice) counts() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.calls)
}

// live is the number of buffers allocated and not freed.
func (d *countingDevice) live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls["Alloc"] - d.calls["Free"]
}

// withDevice runs f with d set, and the CPU again after.
func withDevice(t *testing.T, d kernel.Device, f func()) {
	t.Helper()
	SetDevice(d)
	defer SetDevice(nil)
	f()
}

// sameBits fails unless got and want are equal bit for bit.
func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: value %d is %g on the device, %g on the CPU (relative error of the whole %.2e)",
				name, i, got[i], want[i], relErr(f64(got), f64(want)))
		}
	}
}

// TestDeviceBlockMatchesCPU runs frozen blocks without gradients through
// the device seam on kernel.Host and compares them with the CPU path:
// without biases (and K within one block of the GEMM) the same kernels in
// the same order give the same bits; with biases, within biasTol (the bias
// and the residual are added in another order). The sizes of "wide" cross
// the GEMM's K blocks (width and MLP above 256).
func TestDeviceBlockMatchesCPU(t *testing.T) {
	for _, c := range []struct {
		name                           string
		batch, tokens, heads, hd       int
		mlp                            int
		causal, gelu, keep, bias, rows bool
	}{
		{name: "small", batch: 3, tokens: 11, heads: 4, hd: 13, mlp: 101, bias: true},
		{name: "wide", batch: 2, tokens: 7, heads: 5, hd: 56, mlp: 300, bias: true, keep: true},
		{name: "causal+gelu", batch: 3, tokens: 9, heads: 2, hd: 8, mlp: 40, causal: true, gelu: true},
		{name: "rows", batch: 3, tokens: 11, heads: 4, hd: 13, mlp: 101, bias: true, keep: true, rows: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sizes{batch: c.batch, tokens: c.tokens, heads: c.heads, headDim: c.hd, mlp: c.mlp}
			ins := blockInputs(s, 1, false)
			for i := range ins {
				ins[i].grad = false
			}
			xs := asTensors(makeInputs[float32](ins, makeData(ins, 3)))
			p := blocksFrom(xs, 1, c.batch, c.heads, c.causal)[0].params()
			p.GELU = c.gelu
			for _, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
				if !c.bias {
					l.Bias = nil
				}
				l.KeepPacked(c.keep)
			}
			sel := selectedRows(s)
			forward := func() []float32 {
				if c.rows {
					return values[float32](TransformerBlockRows(xs[0], p, c.batch, sel))
				}
				return values[float32](TransformerBlock(xs[0], p, c.batch, nil))
			}
			want := forward()
			d := newCountingDevice()
			var got, again []float32
			withDevice(t, d, func() { got, again = forward(), forward() })
			if c := d.counts(); c["Gemm"] != 2*4 || c["Softmax"] != 2 {
				t.Fatalf("device calls %v, want 4 Gemm and one Softmax (every head) per pass", d.calls)
			}
			tol := 0.0
			if c.bias {
				tol = biasTol
			}
			matches(t, "block", got, want, tol)
			matches(t, "block, weights kept on the device", again, want, tol)
		})
	}
}

// biasTol bounds the difference between a block with biases on a device
// and on the CPU, relative to the largest value: on a device in_proj's and
// c_fc's bias is added after the product's whole sum (a product with beta
// = 0, then SplitHeadsBias or BiasActivation), and out_proj's and c_proj's
// products are added onto the residual stream that the LayerNorm before
// them wrote with their bias ((x + b) + Σ: LayerNormResidual, then a
// product with beta = 1), where the CPU adds the bias with the first block
// of K and the residual after the product ((Σ + b) + x); so each value of
// each linear layer's output is rounded once more or otherwise (6e-8
// relative), and LayerNorm, attention and the blocks above carry that on
// (up to 2.0e-6 measured, three blocks of TestTransformerBlocksOnDevice).
// Without biases the two give the same bits where K fits one block of
// kernel.Host's Gemm (256 terms); past that, Host's Gemm adds each block's
// partial sum onto the residual in turn, a rounding more at the residual's
// magnitude (1.6e-7 measured, "gelu" of TestDeviceBlockWithGradients).
const biasTol = 1e-5

// biasGradTol is biasTol for gradients, which that rounding reaches
// through the backward pass of every block above: they are within 1.5e-4
// of the CPU's (two blocks). The CPU path itself is no steadier: with its
// input moved by one ulp in every other value, the gradients of these
// tests' blocks move by 1.8e-5 (one block), 1.1e-4 (two) and 2.4e-4
// (three), the outputs by 4.6e-6 to 2.4e-5. A wrong term gives errors of
// 1e-2 and more.
const biasGradTol = 5e-4

// matches is sameBits when tol is 0, else closeTo.
func matches(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if tol == 0 {
		sameBits(t, name, got, want)
	} else {
		closeTo(t, name, got, want, tol)
	}
}

// closeTo fails unless got is within tol of want, relative to the whole.
func closeTo(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	e := relErr(f64(got), f64(want))
	if e > tol {
		t.Fatalf("%s: relative error %.2e between the device and the CPU, want at most %.0e", name, e, tol)
	}
	t.Logf("%s: relative error %.2e", name, e)
}

// Per block of blockInputs: the indices of the LayerNorm parameters, of
// the linear weights (in_proj, out_proj, c_fc, c_proj) and of their biases.
var (
	lnInputs     = []int{1, 2, 7, 8}
	weightInputs = []int{3, 5, 9, 11}
	biasInputs   = []int{4, 6, 10, 12}
)

// TestDeviceBlockWithGradients runs blocks that record for backward with
// the device set to kernel.Host, and compares output and every gradient
// with the CPU path. Blocks with every row and no trace run forward and
// backward on the device, keeping what backward needs there; a block with
// rows selected runs on the CPU with only its frozen linear products on
// the device. With biases, outputs are within biasTol and gradients within
// biasGradTol; without, within 1e-5 (width and MLP above 256: see
// biasTol). Trainable biases and a trainable c_proj
// weight take their column sums as a product with ones and the activation's
// derivative as a slope on the device, other roundings than the CPU's
// SumRows and GELU backward. A rounding of each value of the derivative
// (6e-8) is carried through the block's products and the block below:
// within 1e-5 of the whole (1.3e-6 measured).
func TestDeviceBlockWithGradients(t *testing.T) {
	for _, c := range []struct {
		name         string
		causal, gelu bool
		noBias       bool
		frozenLN     bool // only the input's gradient flows
		frozenX      bool // only the LayerNorms' gradients flow
		blocks       int
		rows         bool  // the last block is TransformerBlockRows: CPU
		biasGrad     bool  // trainable biases
		weightGrad   []int // trainable linear weights (0 in_proj … 3 c_proj)
		tol          float64
	}{
		{name: "vision", blocks: 1},
		{name: "text", causal: true, blocks: 1},
		{name: "gelu", gelu: true, noBias: true, blocks: 1, tol: 1e-5},
		{name: "inputOnly", frozenLN: true, blocks: 1},
		{name: "paramsOnly", frozenX: true, blocks: 1},
		{name: "stack", blocks: 2},
		{name: "rows", blocks: 2, rows: true},
		{name: "biasGrad", blocks: 1, biasGrad: true, tol: 1e-5},
		{name: "weightGrad", blocks: 1, weightGrad: []int{0, 1, 2}},
		{name: "training", blocks: 2, causal: true, biasGrad: true, weightGrad: []int{0, 1, 2, 3}, tol: 1e-5},
		{name: "training, gelu", blocks: 1, gelu: true, noBias: true, weightGrad: []int{0, 1, 2, 3}, tol: 1e-5},
		{name: "training, out_proj bias only", blocks: 1, frozenX: true, biasGrad: true, weightGrad: []int{0, 2, 3}, tol: 1e-5},
		{name: "training, rows", blocks: 2, rows: true, biasGrad: true, weightGrad: []int{0, 1, 2, 3}, tol: 1e-5},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sizes{batch: 2, tokens: 7, heads: 5, headDim: 56, mlp: 300}
			w, rows := s.heads*s.headDim, s.batch*s.tokens
			ins := blockInputs(s, c.blocks, false)
			ins[0].grad = !c.frozenX
			for b := range c.blocks {
				for _, k := range lnInputs {
					ins[12*b+k].grad = !c.frozenLN
				}
				for _, k := range biasInputs {
					ins[12*b+k].grad = c.biasGrad && !c.noBias
				}
				for _, l := range c.weightGrad {
					ins[12*b+weightInputs[l]].grad = true
				}
			}
			data := makeData(ins, 11)
			seed := makeData([]input{in(1, 257, false)}, 12)[0]
			var d *countingDevice
			var live []int // buffers allocated and not freed, after each pass
			build := func() ([]*smat.Dense[float32], []*BlockParams) {
				xs := makeInputs[float32](ins, data)
				var ps []*BlockParams
				for _, b := range blocksFrom(asTensors(xs), c.blocks, s.batch, s.heads, c.causal) {
					p := b.params()
					p.GELU = c.gelu
					for _, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
						l.KeepPacked(true)
						if c.noBias {
							l.Bias = nil
						}
					}
					ps = append(ps, p)
				}
				return xs, ps
			}
			pass := func(xs []*smat.Dense[float32], ps []*BlockParams) (y []float32, grads [][]float32) {
				h := smat.Tensor(xs[0])
				for i, p := range ps {
					if c.rows && i == len(ps)-1 {
						h = TransformerBlockRows(h, p, s.batch, selectedRows(s))
					} else {
						h = TransformerBlock(h, p, s.batch, nil)
					}
				}
				g := make([]float32, h.Size())
				for i := range g {
					g[i] = float32(seed[i%len(seed)])
				}
				h.AccGrad(newMatrix(g, len(g)/w, w))
				if d != nil {
					live = append(live, d.live())
				}
				if err := ag.Backward(h); err != nil {
					t.Fatal(err)
				}
				if d != nil {
					live = append(live, d.live())
				}
				for i, x := range xs {
					if ins[i].grad {
						grads = append(grads, append([]float32(nil), values[float32](x.Grad())...))
						x.ZeroGrad()
					}
				}
				return append([]float32(nil), values[float32](h)...), grads
			}
			want, wantGrads := pass(build())
			d = newCountingDevice()
			var got, again []float32
			var gotGrads, againGrads [][]float32
			xs, ps := build() // the same weights twice: kept on the device
			withDevice(t, d, func() { got, gotGrads = pass(xs, ps); again, againGrads = pass(xs, ps) })
			tol, gradTol := c.tol, c.tol
			if !c.noBias {
				tol, gradTol = max(tol, biasTol), max(tol, biasGradTol)
			}
			matches(t, "output", got, want, tol)
			matches(t, "output, weights kept on the device", again, want, tol)
			if len(gotGrads) != len(wantGrads) || len(wantGrads) == 0 {
				t.Fatalf("%d gradients on the device, %d on the CPU", len(gotGrads), len(wantGrads))
			}
			for i := range wantGrads {
				matches(t, "gradient", gotGrads[i], wantGrads[i], gradTol)
				matches(t, "gradient, weights kept on the device", againGrads[i], wantGrads[i], gradTol)
			}

			// Per pass and block on the device: four products and four
			// input gradients, one product per trainable weight and bias,
			// attention forward and backward, and the LayerNorms' backward.
			// A block on the CPU runs only its frozen linear products there.
			onDev := c.blocks
			if c.rows {
				onDev--
			}
			trainW := len(c.weightGrad)
			trainB := 0
			if c.biasGrad && !c.noBias {
				trainB = 4
			}
			gemms := onDev * (8 + trainW + trainB)
			if c.rows && trainW == 0 {
				gemms += 8
			}
			lnBack := 2
			if c.frozenLN && c.frozenX {
				lnBack = 0
			}
			// Attention runs every head in one launch: a softmax forward,
			// and one more with its backward in the backward pass.
			wantCalls := map[string]int{"Gemm": 2 * gemms, "Softmax": 2 * 2 * onDev,
				"SoftmaxBackward": 2 * onDev, "LayerNormBackward": 2 * lnBack * onDev}
			calls := d.counts()
			for name, n := range wantCalls {
				if calls[name] != n {
					t.Errorf("%d calls of %s, want %d (all: %v)", calls[name], name, n, calls)
				}
			}
			// Backward uploads dy once and downloads only dx and the
			// parameters' gradients.
			if onDev == c.blocks && c.blocks == 1 {
				down := 2 * rows * w // the output, twice
				for _, x := range ins {
					if x.grad {
						down += 2 * x.rows * x.cols
					}
				}
				if got := d.counts()["downloaded"]; got != down {
					t.Errorf("%d values downloaded in two passes, want %d", got, down)
				}
			}
			// The buffers each block kept on the device for backward (five,
			// and the attention output when out_proj's weight is trainable)
			// are freed by it, and a second pass leaves no more buffers than
			// the first.
			kept := 5
			if slices.Contains(c.weightGrad, 1) {
				kept++
			}
			if live[0]-live[1] != kept*onDev || live[1] != live[3] {
				t.Errorf("buffers live before and after backward, two passes: %v; want %d freed each time", live, kept*onDev)
			}
		})
	}
}

// TestDeviceErrorPanics: an error of the device surfaces as a panic naming
// the device and the error, and the next pass is unaffected.
func TestDeviceErrorPanics(t *testing.T) {
	p := blockParams(16, 2, 32)
	x := mat32(6, 16, false)
	withDevice(t, failingDevice{kernel.Host}, func() {
		defer func() {
			r := recover()
			err, ok := r.(error)
			if !ok || err.Error() != "autograd: device host: out of device memory" {
				t.Errorf("panic %v, want the device's error", r)
			}
		}()
		TransformerBlock(x, p, 2, nil)
	})
	if y := TransformerBlock(x, p, 2, nil); y.Value().Shape()[0] != 6 {
		t.Error("CPU pass after a device failure")
	}
}

type failingDevice struct{ kernel.Device }

func (failingDevice) Alloc(n int) (kernel.Buf, error) {
	return nil, errOOM
}

var errOOM = errors.New("out of device memory")
