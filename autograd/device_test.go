package autograd

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/nlpodyssey/spago/ag"
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
// the device seam on kernel.Host and compares them with the CPU path: the
// same kernels in the same order give the same bits. The sizes cross the
// GEMM's K blocks (width and MLP above 256), where the bias must be added
// with the first block of the sum as the CPU adds it.
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
			if d.calls["Gemm"] != 2*4 || d.calls["Softmax"] != 2*c.heads {
				t.Fatalf("device calls %v, want 4 Gemm and %d Softmax per pass", d.calls, c.heads)
			}
			sameBits(t, "block", got, want)
			sameBits(t, "block, weights kept on the device", again, want)
		})
	}
}

// TestDeviceLinearWithGradients runs a block that records for backward
// (LayerNorms trainable, as in adaptation) with the device set: its linear
// products run on the device, the rest on the CPU. Output, input gradient
// and LayerNorm gradients equal the CPU path's bit for bit.
func TestDeviceLinearWithGradients(t *testing.T) {
	s := sizes{batch: 2, tokens: 7, heads: 5, headDim: 56, mlp: 300}
	ins := blockInputs(s, 1, false)
	data := makeData(ins, 11)
	seed := makeData([]input{in(1, 257, false)}, 12)[0]
	run := func() (y []float32, grads [][]float32) {
		xs := makeInputs[float32](ins, data)
		p := blocksFrom(asTensors(xs), 1, s.batch, s.heads, false)[0].params()
		for _, l := range []*LinearParams{p.QKV, p.Out, p.FC, p.Proj} {
			l.KeepPacked(true)
		}
		out := TransformerBlock(xs[0], p, s.batch, nil)
		g := make([]float32, out.Size())
		for i := range g {
			g[i] = float32(seed[i%len(seed)])
		}
		out.AccGrad(newMatrix(g, s.batch*s.tokens, s.heads*s.headDim))
		if err := ag.Backward(out); err != nil {
			t.Fatal(err)
		}
		for i, x := range xs {
			if ins[i].grad {
				grads = append(grads, append([]float32(nil), values[float32](x.Grad())...))
			}
		}
		return append([]float32(nil), values[float32](out)...), grads
	}
	want, wantGrads := run()
	d := newCountingDevice()
	var got []float32
	var gotGrads [][]float32
	withDevice(t, d, func() { got, gotGrads = run() })
	// 4 forward products and 4 input gradients; attention stays on the CPU.
	if d.calls["Gemm"] != 8 || d.calls["Softmax"] != 0 {
		t.Fatalf("device calls %v, want 8 Gemm and no Softmax", d.calls)
	}
	sameBits(t, "output", got, want)
	if len(gotGrads) != len(wantGrads) || len(wantGrads) == 0 {
		t.Fatalf("%d gradients on the device, %d on the CPU", len(gotGrads), len(wantGrads))
	}
	for i := range wantGrads {
		sameBits(t, "gradient", gotGrads[i], wantGrads[i])
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
