package autograd

import (
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// uploadCounter is countingDevice also counting uploads by size.
type uploadCounter struct {
	*countingDevice
	uploads map[int]int
}

func (d *uploadCounter) Upload(dst kernel.Buf, src []float32) error {
	d.mu.Lock()
	d.uploads[len(src)]++
	d.mu.Unlock()
	return d.countingDevice.Upload(dst, src)
}

// TestTransformerBlocksOnDevice runs three blocks through TransformerBlocks
// with the device set to kernel.Host and compares output and gradients bit
// for bit with the loop of TransformerBlock on the same device, and within
// biasTol with the loop on the CPU. On the device the
// activations stay there from the first block to the last: one upload and
// one download of [rows, width] per pass, plus the LayerNorm gradients;
// backward stops at the first block that nothing below needs; and every
// buffer is freed. With trainable linear layers (training), the
// gradients agree within the tolerance of TestDeviceBlockWithGradients.
func TestTransformerBlocksOnDevice(t *testing.T) {
	const blocks = 3
	for _, c := range []struct {
		name     string
		frozenX  bool
		frozenLN []bool // per block
		biasGrad bool
		weights  bool // every linear weight trainable
		noGrad   bool
		causal   bool
		tol      float64 // 0: the same bits
	}{
		{name: "no gradients", noGrad: true},
		{name: "all"},
		{name: "text", causal: true},
		{name: "params only", frozenX: true},
		{name: "input only", frozenLN: []bool{true, true, true}},
		{name: "last block only", frozenX: true, frozenLN: []bool{true, true, false}},
		{name: "trainable biases", biasGrad: true, tol: 1e-5},
		{name: "training", frozenX: true, causal: true, biasGrad: true, weights: true, tol: 1e-5},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sizes{batch: 2, tokens: 7, heads: 5, headDim: 56, mlp: 300}
			w, rows := s.heads*s.headDim, s.batch*s.tokens
			ins := blockInputs(s, blocks, false)
			ins[0].grad = !c.frozenX && !c.noGrad
			for b := range blocks {
				frozen := c.noGrad || c.frozenLN != nil && c.frozenLN[b]
				for _, k := range lnInputs {
					ins[12*b+k].grad = !frozen
				}
				for _, k := range biasInputs {
					ins[12*b+k].grad = c.biasGrad
				}
				for _, k := range weightInputs {
					ins[12*b+k].grad = c.weights
				}
			}
			data := makeData(ins, 21)
			seed := makeData([]input{in(1, 257, false)}, 22)[0]
			build := func() ([]*smat.Dense[float32], []*BlockParams) {
				xs := makeInputs[float32](ins, data)
				var ps []*BlockParams
				for _, b := range blocksFrom(asTensors(xs), blocks, s.batch, s.heads, c.causal) {
					p := b.params()
					for _, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
						l.KeepPacked(true)
					}
					ps = append(ps, p)
				}
				return xs, ps
			}
			pass := func(xs []*smat.Dense[float32], ps []*BlockParams, stacked bool) (y []float32, grads [][]float32) {
				var h smat.Tensor
				if stacked {
					h = TransformerBlocks(xs[0], ps, s.batch)
				} else {
					h = xs[0]
					for _, p := range ps {
						h = TransformerBlock(h, p, s.batch, nil)
					}
				}
				y = append([]float32(nil), values[float32](h)...)
				if c.noGrad {
					return y, nil
				}
				g := make([]float32, h.Size())
				for i := range g {
					g[i] = float32(seed[i%len(seed)])
				}
				h.AccGrad(newMatrix(g, len(g)/w, w))
				if err := ag.Backward(h); err != nil {
					t.Fatal(err)
				}
				for i, x := range xs {
					if ins[i].grad {
						grads = append(grads, append([]float32(nil), values[float32](x.Grad())...))
					}
				}
				return y, grads
			}
			xs, ps := build()
			want, wantGrads := pass(xs, ps, false)
			// The same blocks one by one on the device: the fused kernels'
			// bits, which the stacked op must give.
			xs, ps = build()
			var wantDev []float32
			var wantDevGrads [][]float32
			withDevice(t, kernel.Host, func() { wantDev, wantDevGrads = pass(xs, ps, false) })
			d := &uploadCounter{newCountingDevice(), map[int]int{}}
			xs, ps = build()
			var got [][]float32
			var gotGrads [][][]float32
			var live []int
			withDevice(t, d, func() {
				for range 2 { // the second pass with the weights kept on the device
					y, g := pass(xs, ps, true)
					got, gotGrads = append(got, y), append(gotGrads, g)
					for _, x := range xs {
						x.ZeroGrad()
					}
					live = append(live, d.live())
				}
			})
			for i := range got {
				sameBits(t, "output against the blocks one by one on the device", got[i], wantDev)
				closeTo(t, "output", got[i], want, biasTol)
				if len(gotGrads[i]) != len(wantGrads) || len(wantDevGrads) != len(wantGrads) {
					t.Fatalf("%d gradients on the device, %d on the CPU", len(gotGrads[i]), len(wantGrads))
				}
				for j := range wantGrads {
					if c.tol == 0 {
						sameBits(t, "gradient against the blocks one by one on the device", gotGrads[i][j], wantDevGrads[j])
					}
					closeTo(t, "gradient", gotGrads[i][j], wantGrads[j], max(c.tol, biasGradTol))
				}
			}
			if live[0] != live[1] {
				t.Errorf("buffers live after each pass: %v (a leak)", live)
			}
			// The bias gradients' column of ones goes up once per backward.
			if ones := d.uploads[rows]; c.biasGrad && ones != 2 {
				t.Errorf("%d uploads of a column of ones in two passes, want 2", ones)
			}
			// One upload of x per pass, one of dy per backward; downloads
			// of the output and of the gradients only.
			up, down := 2, 2*rows*w
			if !c.noGrad {
				up += 2
				for _, x := range ins {
					if x.grad {
						down += 2 * x.rows * x.cols
					}
				}
			}
			if d.uploads[rows*w] != up || d.calls["downloaded"] != down {
				t.Errorf("two passes uploaded [rows, width] %d times and downloaded %d values; want %d and %d",
					d.uploads[rows*w], d.calls["downloaded"], up, down)
			}
			// Backward stops below the last block that needs it.
			lnBack := 0
			if !c.noGrad {
				lnBack = 2 * blocks
				if c.frozenX && c.frozenLN != nil && !c.biasGrad && !c.weights {
					lnBack = 2 // the last block's only
				}
			}
			if d.calls["LayerNormBackward"] != 2*lnBack {
				t.Errorf("%d LayerNorm backward calls in two passes, want %d", d.calls["LayerNormBackward"], 2*lnBack)
			}
		})
	}
}
