package autograd

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// launchCounter is kernel.Host counting every operation that runs on the
// device (a kernel launch or a product on a GPU), by name; memory and
// copies are not counted.
type launchCounter struct {
	kernel.Device
	mu    sync.Mutex
	calls map[string]int
}

func newLaunchCounter() *launchCounter {
	return &launchCounter{Device: kernel.Host, calls: map[string]int{}}
}

func (d *launchCounter) count(name string) {
	d.mu.Lock()
	d.calls[name]++
	d.mu.Unlock()
}

// take returns the counts so far and their total, and starts again.
func (d *launchCounter) take() (map[string]int, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, n := d.calls, 0
	for _, v := range c {
		n += v
	}
	d.calls = map[string]int{}
	return c, n
}

func (d *launchCounter) Gemm(transA, transB bool, m, n, k int, alpha float32, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float32, c kernel.Buf, ldc int) error {
	d.count("Gemm")
	return d.Device.Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func (d *launchCounter) GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a kernel.Buf, lda, strideA int, b kernel.Buf, ldb, strideB int, beta float32, c kernel.Buf, ldc, strideC int) error {
	d.count("GemmBatched")
	return d.Device.GemmBatched(transA, transB, batch, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC)
}

func (d *launchCounter) LayerNorm(y, x kernel.Buf, rows, cols int, gamma, beta kernel.Buf, eps float64, mean, rstd kernel.Buf) error {
	d.count("LayerNorm")
	return d.Device.LayerNorm(y, x, rows, cols, gamma, beta, eps, mean, rstd)
}

func (d *launchCounter) LayerNormBackward(dx, dgamma, dbeta, dy, x kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	d.count("LayerNormBackward")
	return d.Device.LayerNormBackward(dx, dgamma, dbeta, dy, x, rows, cols, gamma, mean, rstd)
}

func (d *launchCounter) Softmax(y, x kernel.Buf, rows, cols int, scale float32, causal bool) error {
	d.count("Softmax")
	return d.Device.Softmax(y, x, rows, cols, scale, causal)
}

func (d *launchCounter) SoftmaxBackward(dx, dy, y kernel.Buf, rows, cols int, scale float32) error {
	d.count("SoftmaxBackward")
	return d.Device.SoftmaxBackward(dx, dy, y, rows, cols, scale)
}

func (d *launchCounter) QuickGELU(y, x kernel.Buf, n int) error {
	d.count("QuickGELU")
	return d.Device.QuickGELU(y, x, n)
}

func (d *launchCounter) GELU(y, x kernel.Buf, n int) error {
	d.count("GELU")
	return d.Device.GELU(y, x, n)
}

func (d *launchCounter) QuickGELUSlope(y, slope, x kernel.Buf, n int) error {
	d.count("QuickGELUSlope")
	return d.Device.QuickGELUSlope(y, slope, x, n)
}

func (d *launchCounter) GELUSlope(slope, x kernel.Buf, n int) error {
	d.count("GELUSlope")
	return d.Device.GELUSlope(slope, x, n)
}

func (d *launchCounter) Add(y, a, b kernel.Buf, n int) error {
	d.count("Add")
	return d.Device.Add(y, a, b, n)
}

func (d *launchCounter) Mul(y, a, b kernel.Buf, n int) error {
	d.count("Mul")
	return d.Device.Mul(y, a, b, n)
}

func (d *launchCounter) FillRows(y kernel.Buf, rows, cols int, v kernel.Buf) error {
	d.count("FillRows")
	return d.Device.FillRows(y, rows, cols, v)
}

func (d *launchCounter) SplitHeads(y, x kernel.Buf, batch, tokens, groups, heads, headDim int) error {
	d.count("SplitHeads")
	return d.Device.SplitHeads(y, x, batch, tokens, groups, heads, headDim)
}

func (d *launchCounter) MergeHeads(x, y kernel.Buf, batch, tokens, groups, heads, headDim int) error {
	d.count("MergeHeads")
	return d.Device.MergeHeads(x, y, batch, tokens, groups, heads, headDim)
}

func (d *launchCounter) BiasActivation(y, aux, x kernel.Buf, rows, cols int, bias kernel.Buf, act kernel.Activation, keep kernel.Keep) error {
	d.count("BiasActivation")
	return d.Device.BiasActivation(y, aux, x, rows, cols, bias, act, keep)
}

func (d *launchCounter) LayerNormResidual(y, x kernel.Buf, rows, cols int, gamma, beta kernel.Buf, eps float64, mean, rstd, res, bias kernel.Buf) error {
	d.count("LayerNormResidual")
	return d.Device.LayerNormResidual(y, x, rows, cols, gamma, beta, eps, mean, rstd, res, bias)
}

func (d *launchCounter) LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res kernel.Buf, rows, cols int, gamma, mean, rstd kernel.Buf) error {
	d.count("LayerNormBackwardResidual")
	return d.Device.LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res, rows, cols, gamma, mean, rstd)
}

func (d *launchCounter) SplitHeadsBias(y, x, bias kernel.Buf, batch, tokens, groups, heads, headDim int) error {
	d.count("SplitHeadsBias")
	return d.Device.SplitHeadsBias(y, x, bias, batch, tokens, groups, heads, headDim)
}

// TestDeviceBlockLaunches counts the operations one transformer block
// runs on a device, with biases, in a pass without gradients, in a pass
// recording for backward and in its backward pass, for QuickGELU and GELU:
// adaptation (the LayerNorms trainable), adaptation with the input's
// gradient too (a block above another), and training (every parameter
// trainable, the input too). The counts are what docs/gpu.md states; a
// change that adds a launch to a block fails here. Forward: 2 LayerNorms
// that also write the residual stream with the bias of out_proj and c_proj
// (LayerNormResidual), 4 products (out_proj and c_proj with beta = 1 onto
// it), 5 of attention, 1 bias-and-activation pass.
func TestDeviceBlockLaunches(t *testing.T) {
	for _, c := range []struct {
		name                      string
		gelu, dx, train           bool
		forward, record, backward int
	}{
		{name: "QuickGELU", forward: 12, record: 12, backward: 17},
		{name: "GELU", gelu: true, forward: 12, record: 12, backward: 17},
		{name: "QuickGELU, input gradient", dx: true, forward: 12, record: 12, backward: 17},
		{name: "GELU, training", gelu: true, dx: true, train: true, forward: 12, record: 12, backward: 27},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sizes{batch: 2, tokens: 7, heads: 4, headDim: 8, mlp: 64}
			ins := blockInputs(s, 1, false)
			for i := range ins {
				ins[i].grad = false
			}
			data := makeData(ins, 5)
			block := func() (smat.Tensor, *BlockParams) {
				xs := asTensors(makeInputs[float32](ins, data))
				p := blocksFrom(xs, 1, s.batch, s.heads, false)[0].params()
				p.GELU = c.gelu
				for _, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
					l.KeepPacked(true)
					if l.Bias == nil {
						t.Fatal("blockInputs gave a layer without a bias")
					}
				}
				return xs[0], p
			}
			x0, frozen := block()
			for _, k := range lnInputs {
				ins[k].grad = true
			}
			ins[0].grad = c.dx
			if c.train {
				for _, k := range append(slices.Clone(weightInputs), biasInputs...) {
					ins[k].grad = true
				}
			}
			x1, p := block()
			d := newLaunchCounter()
			withDevice(t, d, func() {
				TransformerBlock(x0, frozen, s.batch, nil)
				fc, fn := d.take()
				y := TransformerBlock(x1, p, s.batch, nil)
				rc, rn := d.take()
				rows, w := dims(y)
				y.AccGrad(newMatrix(make([]float32, rows*w), rows, w))
				if err := ag.Backward(y); err != nil {
					t.Fatal(err)
				}
				bc, bn := d.take()
				t.Logf("forward %d %v", fn, sorted(fc))
				t.Logf("recording forward %d %v", rn, sorted(rc))
				t.Logf("backward %d %v", bn, sorted(bc))
				if fn != c.forward || rn != c.record || bn != c.backward {
					t.Errorf("launches per block: forward %d, recording %d, backward %d; want %d, %d, %d",
						fn, rn, bn, c.forward, c.record, c.backward)
				}
			})
		})
	}
}

// sorted lists counts by name, for logs.
func sorted(c map[string]int) []string {
	var s []string
	for k, v := range c {
		s = append(s, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(s)
	return s
}
