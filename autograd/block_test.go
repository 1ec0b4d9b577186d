package autograd

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// fusedTol bounds max|fused − ops| / max|ops| per tensor in float32. The
// fused block adds the bias and residual terms in another order than the
// separate ops (and sums gradients in another order), which changes
// rounding by a few ulps of the largest values; a wrong term gives errors
// of order 1e-2 or more.
const fusedTol = 1e-5

// TestTransformerBlockMatchesOps runs TransformerBlock and the chain of
// separate ops it replaces on the same float32 inputs (sizes that cross the
// GEMM tiles) and compares the output, every traced intermediate and every
// gradient.
func TestTransformerBlockMatchesOps(t *testing.T) {
	s := sizes{batch: 3, tokens: 11, heads: 4, headDim: 13, mlp: 101}
	for _, c := range []struct {
		name                  string
		linGrad, causal, gelu bool
	}{{"frozenLinear", false, false, false}, {"trainable", true, false, false}, {"causal+gelu", false, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			ins := blockInputs(s, 1, c.linGrad)
			data := makeData(ins, 5)
			seed := makeData([]input{in(1, 257, false)}, 6)[0]
			run := func(fused bool) (out []float32, traced map[string][]float32, grads [][]float32) {
				xs := makeInputs[float32](ins, data)
				b := blocksFrom(asTensors(xs), 1, s.batch, s.heads, c.causal)[0]
				b.gelu = c.gelu
				traced = map[string][]float32{}
				trace := func(name string, t smat.Tensor) { traced[name] = slices.Clone(values[float32](t)) }
				var y smat.Tensor
				if fused {
					y = TransformerBlock(xs[0], b.params(), s.batch, trace)
				} else {
					y = b.forwardOps(xs[0], trace)
				}
				g := make([]float32, y.Size())
				for i := range g {
					g[i] = float32(seed[i%len(seed)])
				}
				y.AccGrad(newMatrix(g, s.batch*s.tokens, s.heads*s.headDim))
				if err := ag.Backward(y); err != nil {
					t.Fatal(err)
				}
				for i, x := range xs {
					if ins[i].grad {
						if !x.HasGrad() {
							t.Fatalf("fused=%v: input %d has no gradient", fused, i)
						}
						grads = append(grads, values[float32](x.Grad()))
					}
				}
				return slices.Clone(values[float32](y)), traced, grads
			}
			yo, to, go_ := run(false)
			yf, tf, gf := run(true)
			check := func(name string, got, want []float32) {
				e := relErr(f64(got), f64(want))
				t.Logf("%-12s relative error %.2e", name, e)
				if e > fusedTol {
					t.Errorf("%s: relative error %.3g > %.0e", name, e, fusedTol)
				}
			}
			check("out", yf, yo)
			if len(tf) != 6 {
				t.Errorf("traced %d intermediates, want 6", len(tf))
			}
			for name, want := range to {
				got, ok := tf[name]
				if !ok {
					t.Errorf("%s: not traced", name)
					continue
				}
				check(name, got, want)
			}
			for i := range go_ {
				check(fmt.Sprintf("grad %d", i), gf[i], go_[i])
			}

			// Tracing must not change the result.
			xs := makeInputs[float32](ins, data)
			b := blocksFrom(asTensors(xs), 1, s.batch, s.heads, c.causal)[0]
			b.gelu = c.gelu
			if y := values[float32](TransformerBlock(xs[0], b.params(), s.batch, nil)); !slices.Equal(y, yf) {
				t.Error("the output differs with and without a trace")
			}
		})
	}
}

func f64(v []float32) []float64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return f
}

// TestOffTapeWithoutGradients checks that an op none of whose operands
// requires gradients returns a plain matrix rather than a tape node, so
// that its result does not keep its inputs alive, and that the result is
// the same as on the tape.
func TestOffTapeWithoutGradients(t *testing.T) {
	s := sizes{batch: 2, tokens: 5, heads: 2, headDim: 8, mlp: 37}
	ins := blockInputs(s, 1, false)
	data := makeData(ins, 8)
	for _, grad := range []bool{false, true} {
		xs := makeInputs[float32](ins, data)
		for i, x := range xs {
			x.SetRequiresGrad(grad && i == 0)
		}
		b := blocksFrom(asTensors(xs), 1, s.batch, s.heads, false)[0]
		for _, c := range []struct {
			name string
			y    smat.Tensor
		}{
			{"TransformerBlock", TransformerBlock(xs[0], b.params(), s.batch, nil)},
			{"LayerNorm", LayerNorm(xs[0], b.ln1)},
			{"Linear", Linear(xs[0], b.inProj)},
		} {
			_, onTape := c.y.(*ag.Operator)
			if onTape != grad {
				t.Errorf("%s: input requires gradients %v, result on the tape %v", c.name, grad, onTape)
			}
		}
	}
}

// TestTransformerBlockRowsMatchesBlock checks TransformerBlockRows against
// the rows gathered from the full TransformerBlock in float32: the output
// and the gradients of the input and of every parameter.
func TestTransformerBlockRowsMatchesBlock(t *testing.T) {
	s := sizes{batch: 3, tokens: 11, heads: 4, headDim: 13, mlp: 101}
	sel := selectedRows(s)
	for _, c := range []struct {
		name            string
		linGrad, causal bool
	}{{"frozenLinear", false, false}, {"trainable", true, false}, {"causal", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			ins := blockInputs(s, 1, c.linGrad)
			data := makeData(ins, 9)
			seed := makeData([]input{in(1, 257, false)}, 10)[0]
			run := func(rows bool) (out []float32, grads [][]float32) {
				xs := makeInputs[float32](ins, data)
				p := blocksFrom(asTensors(xs), 1, s.batch, s.heads, c.causal)[0].params()
				var y smat.Tensor
				if rows {
					y = TransformerBlockRows(xs[0], p, s.batch, sel)
				} else {
					y = GatherRows(TransformerBlock(xs[0], p, s.batch, nil), sel)
				}
				g := make([]float32, y.Size())
				for i := range g {
					g[i] = float32(seed[i%len(seed)])
				}
				y.AccGrad(newMatrix(g, len(sel), s.heads*s.headDim))
				if err := ag.Backward(y); err != nil {
					t.Fatal(err)
				}
				for i, x := range xs {
					if ins[i].grad {
						grads = append(grads, values[float32](x.Grad()))
					}
				}
				return slices.Clone(values[float32](y)), grads
			}
			yf, gf := run(false)
			yr, gr := run(true)
			// The rows run the same operations as the full block, except
			// that gradients from several query rows are summed in another
			// order: rounding differences only.
			check := func(name string, got, want []float32) {
				e := relErr(f64(got), f64(want))
				t.Logf("%-8s relative error %.2e", name, e)
				if e > fusedTol {
					t.Errorf("%s: relative error %.3g > %.0e", name, e, fusedTol)
				}
			}
			check("out", yr, yf)
			for i := range gf {
				check(fmt.Sprintf("grad %d", i), gr[i], gf[i])
			}
		})
	}
}

// TestBF16BlockFusedMLP: a frozen block whose linear layers run in bf16
// fuses the MLP's activation into c_fc (mlpLowBF16) unless it is traced;
// the traced pass runs c_fc, the activation and c_proj one after the
// other. Both give the same bits, with QuickGELU and with GELU, on sizes
// that cross the kernels' tiles.
func TestBF16BlockFusedMLP(t *testing.T) {
	if err := kernel.CheckPrecision(kernel.BF16); err != nil {
		t.Skip(err)
	}
	s := sizes{batch: 3, tokens: 11, heads: 4, headDim: 13, mlp: 101}
	for _, gelu := range []bool{false, true} {
		ins := blockInputs(s, 1, false)
		xs := makeInputs[float32](ins, makeData(ins, 9))
		for _, x := range xs {
			x.SetRequiresGrad(false)
		}
		b := blocksFrom(asTensors(xs), 1, s.batch, s.heads, false)[0]
		b.gelu = gelu
		low, err := LowPrecisionBlocks([]*BlockParams{b.params()}, nil, kernel.BF16)
		if err != nil {
			t.Fatal(err)
		}
		fused := values[float32](TransformerBlock(xs[0], low[0], s.batch, nil))
		traced := false
		separate := values[float32](TransformerBlock(xs[0], low[0], s.batch, func(string, smat.Tensor) { traced = true }))
		if !traced {
			t.Fatal("the traced pass emitted nothing")
		}
		for i := range fused {
			if math.Float32bits(fused[i]) != math.Float32bits(separate[i]) {
				t.Fatalf("gelu=%v: output %d fused %v, separate %v", gelu, i, fused[i], separate[i])
			}
		}
		plain := values[float32](TransformerBlock(xs[0], b.params(), s.batch, nil))
		if slices.Equal(plain, fused) {
			t.Fatalf("gelu=%v: the bf16 block equals float32's: bf16 did not run", gelu)
		}
	}
}
