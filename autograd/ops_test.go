package autograd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"
)

// gradTol is the gradient-check tolerance on |analytic − numeric| /
// max(1, |numeric|). In float64 with step 1e-5 the central difference is
// accurate to ~1e-9 on these small graphs (see GradcheckStep); a wrong
// index, sign or factor gives errors of order 1e-2 or more.
const gradTol = 1e-6

// f32Tol bounds max|float32 − float64| / max|float64| per tensor when the
// float32 fast paths (packed GEMM kernels, float32 row kernels) run the same
// graph as the float64 reference. float32 rounding (6e-8) over sums of up to
// a few hundred terms and a dozen stacked ops gives ~1e-6 to 1e-5; a bug
// gives errors of order 1.
const f32Tol = 2e-4

// input describes one input of a test case.
type input struct {
	rows, cols int
	grad       bool    // requires gradients
	center     float64 // values are center + spread·N(0, 1)
	spread     float64
}

func in(rows, cols int, grad bool) input { return input{rows: rows, cols: cols, grad: grad, spread: 1} }

// gamma is a LayerNorm scale input: 1 + 0.2·N(0, 1).
func gammaIn(cols int, grad bool) input {
	return input{rows: 1, cols: cols, grad: grad, center: 1, spread: 0.2}
}

type opCase struct {
	name   string
	inputs []input
	build  func(x []smat.Tensor) smat.Tensor
}

// sizes are the dimensions the cases are built with: small ones for the
// float64 gradient checks, larger ragged ones (crossing the kernels' tile
// and parallel thresholds) for the float32-versus-float64 comparison.
type sizes struct {
	rows, width, out      int
	batch, tokens, heads  int
	headDim, mlp          int
	channels, height, wid int
	patch                 int
}

var (
	smallSizes = sizes{rows: 5, width: 7, out: 3, batch: 2, tokens: 3, heads: 2, headDim: 3, mlp: 5,
		channels: 2, height: 5, wid: 7, patch: 2}
	largeSizes = sizes{rows: 131, width: 133, out: 67, batch: 3, tokens: 17, heads: 3, headDim: 11, mlp: 45,
		channels: 3, height: 19, wid: 23, patch: 4}
)

func lin(w, b smat.Tensor) *LinearParams {
	if b == nil {
		return NewLinearParams(w.(smat.Matrix), nil)
	}
	return NewLinearParams(w.(smat.Matrix), b.(smat.Matrix))
}

func ln(g, b smat.Tensor) *LayerNormParams {
	return NewLayerNormParams(g.(smat.Matrix), b.(smat.Matrix), 1e-5)
}

func opCases(s sizes) []opCase {
	r, w, o := s.rows, s.width, s.out
	attW := s.heads * s.headDim
	attRows := s.batch * s.tokens
	g := PatchGeometry{Channels: s.channels, Height: s.height, Width: s.wid, Patch: s.patch}
	gr, gc := g.Grid()
	grid := gr * gc
	patchLen := s.channels * s.patch * s.patch
	labels := make([]int, r)
	for i := range labels {
		labels[i] = (i * 7) % o
	}
	gather := []int{0, r - 1, r / 2, r - 1, 1 % r}
	cases := []opCase{
		{"Linear/frozen", []input{in(r, w, true), in(o, w, false), in(1, o, false)},
			func(x []smat.Tensor) smat.Tensor { return Linear(x[0], lin(x[1], x[2])) }},
		{"Linear/trainable", []input{in(r, w, true), in(o, w, true), in(1, o, true)},
			func(x []smat.Tensor) smat.Tensor { return Linear(x[0], lin(x[1], x[2])) }},
		{"Linear/nobias", []input{in(r, w, false), in(o, w, true)},
			func(x []smat.Tensor) smat.Tensor { return Linear(x[0], lin(x[1], nil)) }},
		{"Linear/1x1", []input{in(1, 1, true), in(1, 1, true), in(1, 1, true)},
			func(x []smat.Tensor) smat.Tensor { return Linear(x[0], lin(x[1], x[2])) }},
		{"LayerNorm/trainable", []input{in(r, w, true), gammaIn(w, true), in(1, w, true)},
			func(x []smat.Tensor) smat.Tensor { return LayerNorm(x[0], ln(x[1], x[2])) }},
		{"LayerNorm/frozen", []input{in(r, w, true), gammaIn(w, false), in(1, w, false)},
			func(x []smat.Tensor) smat.Tensor { return LayerNorm(x[0], ln(x[1], x[2])) }},
		{"LayerNorm/paramsOnly", []input{in(r, w, false), gammaIn(w, true), in(1, w, true)},
			func(x []smat.Tensor) smat.Tensor { return LayerNorm(x[0], ln(x[1], x[2])) }},
		{"LayerNorm/width1", []input{in(r, 1, true), gammaIn(1, true), in(1, 1, true)},
			func(x []smat.Tensor) smat.Tensor { return LayerNorm(x[0], ln(x[1], x[2])) }},
		{"SelfAttention", []input{in(attRows, 3*attW, true)},
			func(x []smat.Tensor) smat.Tensor { return SelfAttention(x[0], s.batch, s.heads, false) }},
		{"SelfAttention/causal", []input{in(attRows, 3*attW, true)},
			func(x []smat.Tensor) smat.Tensor { return SelfAttention(x[0], s.batch, s.heads, true) }},
		{"SelfAttention/1token1head", []input{in(s.batch, 3*s.headDim, true)},
			func(x []smat.Tensor) smat.Tensor { return SelfAttention(x[0], s.batch, 1, true) }},
		{"QuickGELU", []input{{rows: r, cols: w, grad: true, spread: 3}},
			func(x []smat.Tensor) smat.Tensor { return QuickGELU(x[0]) }},
		{"GELU", []input{{rows: r, cols: w, grad: true, spread: 3}},
			func(x []smat.Tensor) smat.Tensor { return GELU(x[0]) }},
		{"Add", []input{in(r, w, true), in(r, w, true)},
			func(x []smat.Tensor) smat.Tensor { return Add(x[0], x[1]) }},
		{"Add/same", []input{in(r, w, true)},
			func(x []smat.Tensor) smat.Tensor { return Add(x[0], x[0]) }},
		{"AddTiled", []input{in(attRows, w, true), in(s.tokens, w, true)},
			func(x []smat.Tensor) smat.Tensor { return AddTiled(x[0], x[1]) }},
		{"Scale", []input{in(r, w, true)},
			func(x []smat.Tensor) smat.Tensor { return Scale(x[0], -2.5) }},
		{"ExpScale", []input{in(r, w, true), {rows: 1, cols: 1, grad: true, center: 1, spread: 0.3}},
			func(x []smat.Tensor) smat.Tensor { return ExpScale(x[0], x[1]) }},
		{"ExpScale/scaleOnly", []input{in(r, w, false), {rows: 1, cols: 1, grad: true, center: 1, spread: 0.3}},
			func(x []smat.Tensor) smat.Tensor { return ExpScale(x[0], x[1]) }},
		{"Patches", []input{in(s.batch, s.channels*s.height*s.wid, true)},
			func(x []smat.Tensor) smat.Tensor { return Patches(x[0], g) }},
		{"PatchEmbed", []input{in(s.batch, s.channels*s.height*s.wid, true), in(o, patchLen, false)},
			func(x []smat.Tensor) smat.Tensor { return PatchEmbed(x[0], lin(x[1], nil), g) }},
		{"PatchEmbed/noGrad", []input{in(2*patchImages+1, s.channels*s.height*s.wid, false), in(o, patchLen, false), in(1, o, false)},
			func(x []smat.Tensor) smat.Tensor { return PatchEmbed(x[0], lin(x[1], x[2]), g) }}, // three chunks, with a bias
		{"PatchEmbed/trainable", []input{in(s.batch, s.channels*s.height*s.wid, false), in(o, patchLen, true)},
			func(x []smat.Tensor) smat.Tensor { return PatchEmbed(x[0], lin(x[1], nil), g) }},
		{"TokenEmbedding", []input{in(s.batch*grid, w, true), in(1, w, true), in(grid+1, w, true)},
			func(x []smat.Tensor) smat.Tensor { return TokenEmbedding(x[0], x[1], x[2], s.batch) }},
		{"GatherRows", []input{in(r, w, true)},
			func(x []smat.Tensor) smat.Tensor { return GatherRows(x[0], gather) }},
		{"ReplaceRows", []input{in(r, w, true), in(3, w, true)},
			func(x []smat.Tensor) smat.Tensor { return ReplaceRows(x[0], []int{1, r - 1, 0}, x[1], []int{2, 0, 2}) }},
		{"ReplaceRows/srcOnly", []input{in(r, w, false), in(2, w, true)},
			func(x []smat.Tensor) smat.Tensor { return ReplaceRows(x[0], []int{0, 1}, x[1], []int{1, 0}) }},
		{"L2Normalize", []input{in(r, w, true)},
			func(x []smat.Tensor) smat.Tensor { return L2Normalize(x[0]) }},
		{"Softmax", []input{{rows: r, cols: w, grad: true, spread: 3}},
			func(x []smat.Tensor) smat.Tensor { return Softmax(x[0]) }},
		{"LogSoftmax", []input{{rows: r, cols: w, grad: true, spread: 3}},
			func(x []smat.Tensor) smat.Tensor { return LogSoftmax(x[0]) }},
		{"CrossEntropy", []input{{rows: r, cols: o, grad: true, spread: 3}},
			func(x []smat.Tensor) smat.Tensor { return CrossEntropy(x[0], labels) }},
		{"Entropy", []input{{rows: r, cols: o, grad: true, spread: 3}},
			func(x []smat.Tensor) smat.Tensor { return Entropy(x[0]) }},
		{"MeanEntropy", []input{{rows: r, cols: o, grad: true, spread: 3}},
			func(x []smat.Tensor) smat.Tensor { return MeanEntropy(x[0]) }},
		{"Mean", []input{in(r, w, true)},
			func(x []smat.Tensor) smat.Tensor { return Mean(x[0]) }},
	}
	for _, t := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		ta, tb := t[0], t[1]
		a, b := in(r, w, true), in(w, o, true)
		if ta {
			a.rows, a.cols = a.cols, a.rows
		}
		if tb {
			b.rows, b.cols = b.cols, b.rows
		}
		cases = append(cases, opCase{fmt.Sprintf("MatMul/%v%v", ta, tb), []input{a, b},
			func(x []smat.Tensor) smat.Tensor { return MatMul(x[0], x[1], ta, tb) }})
	}
	return cases
}

// blockInputs lists the inputs of a pre-LN transformer: x, then for each
// block ln1 (γ, β), in_proj (W, b), out_proj (W, b), ln2 (γ, β), c_fc (W,
// b), c_proj (W, b). Linear weights are trainable when linGrad is set.
func blockInputs(s sizes, blocks int, linGrad bool) []input {
	w := s.heads * s.headDim
	ins := []input{in(s.batch*s.tokens, w, true)}
	for range blocks {
		ins = append(ins,
			gammaIn(w, true), in(1, w, true),
			input{rows: 3 * w, cols: w, grad: linGrad, spread: 0.5}, in(1, 3*w, linGrad),
			input{rows: w, cols: w, grad: linGrad, spread: 0.5}, in(1, w, linGrad),
			gammaIn(w, true), in(1, w, true),
			input{rows: s.mlp, cols: w, grad: linGrad, spread: 0.5}, in(1, s.mlp, linGrad),
			input{rows: w, cols: s.mlp, grad: linGrad, spread: 0.5}, in(1, w, linGrad),
		)
	}
	return ins
}

// transformerBlock is a CLIP residual attention block (pre-LN):
// x += out_proj(attn(in_proj(ln_1(x)))); x += c_proj(QuickGELU(c_fc(ln_2(x)))).
// With fused set, forward is the one op TransformerBlock; otherwise the
// chain of separate ops it replaces.
type transformerBlock struct {
	ln1, ln2        *LayerNormParams
	inProj, outProj *LinearParams
	fc, proj        *LinearParams
	batch, heads    int
	causal, gelu    bool
	fused           bool
}

func (b *transformerBlock) params() *BlockParams {
	return &BlockParams{LN1: b.ln1, QKV: b.inProj, Out: b.outProj, LN2: b.ln2, FC: b.fc, Proj: b.proj,
		Heads: b.heads, Causal: b.causal, GELU: b.gelu}
}

func (b *transformerBlock) forward(x smat.Tensor) smat.Tensor {
	if b.fused {
		return TransformerBlock(x, b.params(), b.batch, nil)
	}
	return b.forwardOps(x, nil)
}

// forwardOps is the block as separate ops, passing the intermediates that
// TransformerBlock traces to trace (if not nil).
func (b *transformerBlock) forwardOps(x smat.Tensor, trace Trace) smat.Tensor {
	emit := func(name string, t smat.Tensor) smat.Tensor {
		if trace != nil {
			trace(name, t)
		}
		return t
	}
	h := emit("ln_1", LayerNorm(x, b.ln1))
	h = Linear(h, b.inProj)
	h = emit("attn", Linear(SelfAttention(h, b.batch, b.heads, b.causal), b.outProj))
	x = emit("after_attn", Add(x, h))
	h = emit("ln_2", LayerNorm(x, b.ln2))
	h = Linear(h, b.fc)
	if b.gelu {
		h = GELU(h)
	} else {
		h = QuickGELU(h)
	}
	h = emit("mlp_hidden", h)
	return Add(x, emit("mlp_out", Linear(h, b.proj)))
}

func blocksFrom(x []smat.Tensor, blocks, batch, heads int, causal bool) []*transformerBlock {
	var bs []*transformerBlock
	for i := range blocks {
		p := x[1+12*i:]
		bs = append(bs, &transformerBlock{
			ln1: ln(p[0], p[1]), inProj: lin(p[2], p[3]), outProj: lin(p[4], p[5]),
			ln2: ln(p[6], p[7]), fc: lin(p[8], p[9]), proj: lin(p[10], p[11]),
			batch: batch, heads: heads, causal: causal,
		})
	}
	return bs
}

// transformerCases are two stacked blocks, as separate ops
// ("Transformer2/…") and as TransformerBlock ("Block2/…").
func transformerCases(s sizes) []opCase {
	var cases []opCase
	for _, c := range []struct {
		name                  string
		linGrad, causal, gelu bool
	}{
		{name: "frozenLinear"}, {name: "trainable", linGrad: true}, {name: "causal", causal: true},
		{name: "gelu", gelu: true}, {name: "inputOnly"}, {name: "paramsOnly"}, {name: "biasOnly", linGrad: true},
		{name: "manyRows", linGrad: true},
	} {
		for _, kind := range []string{"Transformer2/", "Block2/", "BlockRows2/"} {
			if c.name == "manyRows" && kind != "BlockRows2/" {
				continue // a case of TransformerBlockRows only
			}
			name := kind + c.name
			ins := blockInputs(s, 2, c.linGrad)
			switch c.name {
			case "inputOnly": // frozen LayerNorms: only the input's gradient flows
				for i := 1; i < len(ins); i++ {
					ins[i].grad = false
				}
			case "paramsOnly": // the input needs no gradient
				ins[0].grad = false
			case "biasOnly": // trainable biases, frozen Linear weights
				for i := 1; i < len(ins); i += 12 {
					for _, k := range []int{2, 4, 8, 10} {
						ins[i+k].grad = false
					}
				}
			}
			cases = append(cases, opCase{name, ins, func(x []smat.Tensor) smat.Tensor {
				h := x[0]
				bs := blocksFrom(x, 2, s.batch, s.heads, c.causal)
				for i, b := range bs {
					b.gelu, b.fused = c.gelu, kind != "Transformer2/"
					if kind == "BlockRows2/" && i == len(bs)-1 {
						sel := selectedRows(s)
						if c.name == "manyRows" {
							sel = manyRows(s)
						}
						return TransformerBlockRows(h, b.params(), s.batch, sel)
					}
					h = b.forward(h)
				}
				return h
			}})
		}
	}
	return cases
}

// selectedRows are the rows the BlockRows cases compute: the first, the
// last, an inner one and a repeat, over more than one sequence and in no
// particular order.
func selectedRows(s sizes) []int {
	n := s.batch * s.tokens
	return []int{n - 1, 0, s.tokens + 1, 1 % n, n - 1, s.tokens}
}

// manyRows selects more rows than there are (every row, then the first
// again).
func manyRows(s sizes) []int {
	n := s.batch * s.tokens
	rows := make([]int, n+1)
	for i := range n {
		rows[i] = n - 1 - i
	}
	return rows
}

// makeData draws the values of a case's inputs.
func makeData(ins []input, seed uint64) [][]float64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	data := make([][]float64, len(ins))
	for i, s := range ins {
		data[i] = make([]float64, s.rows*s.cols)
		for j := range data[i] {
			data[i][j] = s.center + s.spread*rng.NormFloat64()
		}
	}
	return data
}

func makeInputs[T dtype](ins []input, data [][]float64) []*smat.Dense[T] {
	xs := make([]*smat.Dense[T], len(ins))
	for i, s := range ins {
		v := make([]T, len(data[i]))
		for j, f := range data[i] {
			v[j] = T(f)
		}
		xs[i] = newMatrix(v, s.rows, s.cols)
		xs[i].SetRequiresGrad(s.grad)
	}
	return xs
}

func asTensors[T dtype](xs []*smat.Dense[T]) []smat.Tensor {
	ts := make([]smat.Tensor, len(xs))
	for i, x := range xs {
		ts[i] = x
	}
	return ts
}

func TestGradcheck(t *testing.T) {
	cases := append(opCases(smallSizes), transformerCases(smallSizes)...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := makeData(c.inputs, 1)
			xs := makeInputs[float64](c.inputs, data)
			var checked []*smat.Dense[float64]
			var idx []int
			for i, x := range xs {
				if c.inputs[i].grad {
					checked = append(checked, x)
					idx = append(idx, i)
				}
			}
			if len(checked) == 0 {
				t.Skip("no input requires gradients (the values are checked by TestFloat32MatchesFloat64)")
			}
			ts := asTensors(xs)
			res, err := Gradcheck(func() smat.Tensor { return c.build(ts) }, checked, 0)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for k, e := range res {
				worst = max(worst, e.Err)
				if e.Err > gradTol || e.Index < 0 {
					t.Errorf("input %d: element %d: analytic %.10g, numeric %.10g (err %.3g)", idx[k], e.Index, e.Analytic, e.Numeric, e.Err)
				}
			}
			t.Logf("worst gradient error %.3g over %d inputs", worst, len(res))
		})
	}
}

// runCase runs a case forward and backward in precision T with the output
// gradient seed, returning the output and the gradients of the inputs that
// require them, in float64.
func runCase[T dtype](c opCase, data [][]float64, seed []float64) ([]float64, [][]float64) {
	xs := makeInputs[T](c.inputs, data)
	out := c.build(asTensors(xs))
	g := make([]T, out.Size())
	for i := range g {
		g[i] = T(seed[i%len(seed)])
	}
	out.AccGrad(smat.NewDense[T](smat.WithShape(out.Value().Shape()...), smat.WithBacking(g)))
	if err := ag.Backward(out); err != nil {
		panic(err)
	}
	toF64 := func(v []T) []float64 {
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		return f
	}
	var grads [][]float64
	for i, x := range xs {
		if !c.inputs[i].grad {
			continue
		}
		if !x.HasGrad() {
			grads = append(grads, nil)
			continue
		}
		grads = append(grads, toF64(values[T](x.Grad())))
	}
	return toF64(values[T](out)), grads
}

// relErr is max|a − b| / max|b|.
func relErr(a, b []float64) float64 {
	var d, m float64
	for i := range b {
		d = max(d, math.Abs(a[i]-b[i]))
		m = max(m, math.Abs(b[i]))
	}
	if m == 0 {
		return d
	}
	return d / m
}

func TestFloat32MatchesFloat64(t *testing.T) {
	s := largeSizes
	cases := opCases(s)
	if !testing.Short() {
		// Wider blocks: GEMMs with several kernel tiles per dimension.
		ts := s
		ts.headDim, ts.heads, ts.mlp, ts.tokens = 13, 4, 101, 11
		cases = append(cases, transformerCases(ts)...)
	}
	seed := makeData([]input{in(1, 257, false)}, 99)[0]
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := makeData(c.inputs, 2)
			y64, g64 := runCase[float64](c, data, seed)
			y32, g32 := runCase[float32](c, data, seed)
			e := relErr(y32, y64)
			if e > f32Tol {
				t.Errorf("output: relative error %.3g", e)
			}
			worst := e
			for k := range g64 {
				if (g64[k] == nil) != (g32[k] == nil) {
					t.Errorf("gradient %d: present in one precision only", k)
					continue
				}
				if g64[k] == nil {
					continue
				}
				e := relErr(g32[k], g64[k])
				worst = max(worst, e)
				if e > f32Tol {
					t.Errorf("gradient %d: relative error %.3g", k, e)
				}
			}
			t.Logf("worst relative error %.3g (output and %d gradients)", worst, len(g64))
		})
	}
}
