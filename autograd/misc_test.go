package autograd

import (
	"strings"
	"testing"

	"github.com/nlpodyssey/spago/mat"
)

func mat32(rows, cols int, grad bool) *mat.Dense[float32] {
	x := makeInputs[float32]([]input{in(rows, cols, grad)}, makeData([]input{in(rows, cols, grad)}, uint64(rows*131+cols)))[0]
	return x
}

// TestLinearRepack checks that a frozen float32 weight is packed once and
// that Invalidate makes Linear see new values.
func TestLinearRepack(t *testing.T) {
	x := mat32(9, 21, false)
	w := mat32(13, 21, false)
	p := NewLinearParams(w, nil)
	ref := func() []float32 {
		y := make([]float32, 9*13)
		gemm(false, true, 9, 13, 21, 1, values[float32](x), 21, values[float32](w), 21, 0, y, 13)
		return y
	}
	check := func(when string) {
		got, want := values[float32](Linear(x, p)), ref()
		for i := range want {
			if d := got[i] - want[i]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("%s: element %d: got %g, want %g", when, i, got[i], want[i])
			}
		}
	}
	check("first call")
	first := p.packedWT
	check("second call")
	if p.packedWT != first {
		t.Error("the frozen weight was packed again")
	}
	wd := values[float32](w)
	for i := range wd {
		wd[i] *= -2
	}
	p.Invalidate()
	check("after Invalidate")
}

// TestAttentionInference checks that attention without gradients (its
// probabilities in pooled scratch) gives the same output as with them.
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
		{"TokenEmbedding", func() { TokenEmbedding(x, mat32(1, 6, false), mat32(4, 6, false), 2) }},
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
