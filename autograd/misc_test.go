package autograd

import (
	"slices"
	"strings"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
)

func mat32(rows, cols int, grad bool) *smat.Dense[float32] {
	x := makeInputs[float32]([]input{in(rows, cols, grad)}, makeData([]input{in(rows, cols, grad)}, uint64(rows*131+cols)))[0]
	return x
}

// TestLinearSeesWeightChanges checks that a frozen float32 Linear gives
// x·Wᵀ with the weight's current values: nothing packed is kept between
// calls.
func TestLinearSeesWeightChanges(t *testing.T) {
	x := mat32(9, 300, false) // K over two packing slices
	w := mat32(13, 300, false)
	p := NewLinearParams(w, nil)
	ref := func() []float64 {
		y := make([]float64, 9*13)
		gemm64(false, true, 9, 13, 300, 1, f64(values[float32](x)), 300, f64(values[float32](w)), 300, 0, y, 13)
		return y
	}
	check := func(when string) {
		// float32 dot products of length 300 are accurate to ~1e-6 of the
		// largest result; a stale or wrong weight gives errors of order 1.
		if e := relErr(f64(values[float32](Linear(x, p))), ref()); e > 1e-5 {
			t.Errorf("%s: relative error %.3g", when, e)
		}
	}
	check("first call")
	wd := values[float32](w)
	for i := range wd {
		wd[i] *= -2
	}
	check("after changing the weight")
}

// TestGemm32 checks the float32 GEMM against the float64 reference, for
// every transpose combination, K within one, over two and over several of
// the kernel's K blocks (256 deep), beta 0, 1 and other, and leading
// dimensions wider than the matrices.
func TestGemm32(t *testing.T) {
	const m, n, pad = 37, 45, 3
	for _, k := range []int{255, 257, 3*256 + 17} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, beta := range []float64{0, 1, -0.5} {
				ta, tb := tr[0], tr[1]
				ar, ac := m, k
				if ta {
					ar, ac = k, m
				}
				br, bc := k, n
				if tb {
					br, bc = n, k
				}
				lda, ldb, ldc := ac+pad, bc+pad, n+pad
				data := makeData([]input{in(ar, lda, false), in(br, ldb, false), in(m, ldc, false)}, uint64(k))
				want := slices.Clone(data[2])
				gemm64(ta, tb, m, n, k, 0.75, data[0], lda, data[1], ldb, beta, want, ldc)
				a, b, c := f32(data[0]), f32(data[1]), f32(data[2])
				gemm(ta, tb, m, n, k, float32(0.75), a, lda, b, ldb, float32(beta), c, ldc)
				// float32 sums of up to 800 products: ~1e-6 of the largest.
				if e := relErr(f64(c), want); e > 1e-5 {
					t.Errorf("k=%d trans=%v beta=%g: relative error %.3g", k, tr, beta, e)
				}
			}
		}
	}
}

func f32(v []float64) []float32 {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return f
}

// TestAttentionInference checks that attention without gradients (off the
// tape) gives the same output as with them.
func TestAttentionInference(t *testing.T) {
	for _, causal := range []bool{false, true} {
		a := mat32(3*7, 3*12, true)
		b := mat32(3*7, 3*12, false)
		copy(values[float32](b), values[float32](a))
		ya := values[float32](SelfAttention(a, 3, 4, causal))
		for range 2 {
			yb := values[float32](SelfAttention(b, 3, 4, causal))
			for i := range ya {
				if ya[i] != yb[i] {
					t.Fatalf("causal=%v: element %d: %g with gradients, %g without", causal, i, ya[i], yb[i])
				}
			}
		}
	}
}

// TestShapePanics checks that mismatched shapes panic when the op is
// built, with a message naming the op.
func TestShapePanics(t *testing.T) {
	x := mat32(4, 6, false)
	x64 := newMatrix(make([]float64, 24), 4, 6)
	cases := []struct {
		name string
		f    func()
	}{
		{"Linear", func() { Linear(x, NewLinearParams(mat32(3, 5, false), nil)) }},
		{"NewLinearParams", func() { NewLinearParams(mat32(3, 6, false), mat32(1, 4, false)) }},
		{"LayerNorm", func() { LayerNorm(x, NewLayerNormParams(mat32(1, 5, false), mat32(1, 5, false), 1e-5)) }},
		{"SelfAttention", func() { SelfAttention(x, 3, 1, false) }},
		{"Add", func() { Add(x, mat32(6, 4, false)) }},
		{"Add", func() { Add(x, x64) }},
		{"AddTiled", func() { AddTiled(x, mat32(3, 6, false)) }},
		{"MatMul", func() { MatMul(x, x, false, false) }},
		{"GatherRows", func() { GatherRows(x, []int{4}) }},
		{"CrossEntropy", func() { CrossEntropy(x, []int{0, 1, 2}) }},
		{"CrossEntropy", func() { CrossEntropy(x, []int{0, 1, 2, 6}) }},
		{"Patches", func() { Patches(x, PatchGeometry{Channels: 1, Height: 2, Width: 2, Patch: 2}) }},
		{"PatchEmbed", func() {
			PatchEmbed(mat32(2, 2*5*7, false), NewLinearParams(mat32(3, 7, false), nil), PatchGeometry{Channels: 2, Height: 5, Width: 7, Patch: 2})
		}},
		{"TokenEmbedding", func() { TokenEmbedding(x, mat32(1, 6, false), mat32(4, 6, false), 2) }},
		{"TransformerBlock", func() { TransformerBlock(x, blockParams(6, 2, 12), 3, nil) }}, // 4 rows in 3 sequences
		{"TransformerBlock", func() { TransformerBlock(x, blockParams(6, 4, 12), 2, nil) }}, // 4 heads of width 6
		{"TransformerBlock", func() { TransformerBlock(x, blockParams(8, 2, 12), 2, nil) }}, // width 8
		{"TransformerBlockRows", func() { TransformerBlockRows(x, blockParams(6, 2, 12), 2, []int{4}) }},
		{"TransformerBlockRows", func() { TransformerBlockRows(x, blockParams(6, 2, 12), 3, []int{0}) }},
	}
	for _, c := range cases {
		func() {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.HasPrefix(msg, "autograd: "+c.name) {
					t.Errorf("%s: got panic %v", c.name, r)
				}
			}()
			c.f()
		}()
	}
}

// blockParams returns frozen float32 TransformerBlock parameters of the
// given width, heads and MLP width.
func blockParams(width, heads, mlp int) *BlockParams {
	layerNorm := func() *LayerNormParams {
		return NewLayerNormParams(mat32(1, width, false), mat32(1, width, false), 1e-5)
	}
	return &BlockParams{
		LN1: layerNorm(), QKV: NewLinearParams(mat32(3*width, width, false), nil),
		Out: NewLinearParams(mat32(width, width, false), nil), LN2: layerNorm(),
		FC: NewLinearParams(mat32(mlp, width, false), nil), Proj: NewLinearParams(mat32(width, mlp, false), nil),
		Heads: heads,
	}
}

// TestPatchEmbedWithoutGradients checks PatchEmbed without gradients (cut
// into chunks of images, the weight packed once) against Patches then
// Linear.
func TestPatchEmbedWithoutGradients(t *testing.T) {
	g := PatchGeometry{Channels: 3, Height: 13, Width: 11, Patch: 4}
	for _, batch := range []int{1, patchImages, 2*patchImages + 3} {
		images := mat32(batch, 3*13*11, false)
		w := NewLinearParams(mat32(5, 3*4*4, false), mat32(1, 5, false))
		got := values[float32](PatchEmbed(images, w, g))
		want := values[float32](Linear(Patches(images, g), w))
		// The same products in the same order: equal up to the last bit,
		// with room for a different K split.
		if e := relErr(f64(got), f64(want)); e > 1e-6 {
			t.Errorf("batch %d: relative error %.3g", batch, e)
		}
	}
}
