package tta

import (
	"fmt"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
)

// fx is an open fixture file (fixturefile.File's helpers) with readers of
// gonum matrices.
type fx struct{ *fixturefile.File }

func openFixture(tb testing.TB, rel string) *fx { tb.Helper(); return &fx{fixturefile.Open(tb, rel)} }

func (x *fx) scalar(name string) float64 {
	x.TB.Helper()
	v, shape := x.F64(name)
	if len(v) != 1 {
		x.TB.Fatalf("%s: shape %v, want a scalar", name, shape)
	}
	return v[0]
}

func (x *fx) dense(name string) *mat.Dense {
	x.TB.Helper()
	v, shape := x.F64(name)
	if len(shape) != 2 {
		x.TB.Fatalf("%s: shape %v, want a matrix", name, shape)
	}
	return mat.NewDense(shape[0], shape[1], v)
}

func (x *fx) sym(name string) *mat.SymDense {
	x.TB.Helper()
	m := x.dense(name)
	r, c := m.Dims()
	if r != c {
		x.TB.Fatalf("%s: %d×%d, want square", name, r, c)
	}
	return mat.NewSymDense(r, m.RawMatrix().Data)
}

func (x *fx) ints(name string) []int {
	x.TB.Helper()
	v, _, err := x.Int64(name)
	if err != nil {
		x.TB.Fatal(err)
	}
	out := make([]int, len(v))
	for i, y := range v {
		out[i] = int(y)
	}
	return out
}

func load[T optim.Float](x *fx, name string) []T {
	x.TB.Helper()
	return fixturefile.Load[T](x.File, name)
}

type tolKind int

const (
	relTol tolKind = iota // relative to max|want| of the tensor
	absTol
)

// compare logs the worst error of got against want and fails beyond tol.
func compare(tb testing.TB, what string, got, want []float64, tol float64, kind tolKind) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	abs, rel := fixturefile.ErrStats(got, want)
	e, k := rel, "rel-to-max"
	if kind == absTol {
		e, k = abs, "abs"
	}
	tb.Logf("%-44s worst abs %.3g, rel-to-max %.3g (tol %.0e %s)", what, abs, rel, tol, k)
	if !(e <= tol) {
		tb.Errorf("%s: worst %s error %.3g > %.0e", what, k, e, tol)
	}
}

func compareDense(tb testing.TB, what string, got mat.Matrix, want *mat.Dense, tol float64, kind tolKind) {
	tb.Helper()
	gr, gc := got.Dims()
	wr, wc := want.Dims()
	if gr != wr || gc != wc {
		tb.Errorf("%s: %d×%d, want %d×%d", what, gr, gc, wr, wc)
		return
	}
	compare(tb, what, mat.DenseCopyOf(got).RawMatrix().Data, want.RawMatrix().Data, tol, kind)
}

func compareInts(tb testing.TB, what string, got, want []int) {
	tb.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		tb.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func toF64[T optim.Float](v []T) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// gradCheck compares analytic with float64 central differences of f at x
// (step h) and fails when the worst error relative to max|numeric| exceeds tol.
func gradCheck(tb testing.TB, what string, x *mat.Dense, f func(*mat.Dense) float64, analytic mat.Matrix, h, tol float64) float64 {
	tb.Helper()
	r, c := x.Dims()
	num := make([]float64, 0, r*c)
	for i := range r {
		for j := range c {
			v := x.At(i, j)
			x.Set(i, j, v+h)
			fp := f(x)
			x.Set(i, j, v-h)
			fm := f(x)
			x.Set(i, j, v)
			num = append(num, (fp-fm)/(2*h))
		}
	}
	_, rel := fixturefile.ErrStats(mat.DenseCopyOf(analytic).RawMatrix().Data, num)
	tb.Logf("gradcheck %-34s h=%.0e worst rel-to-max %.3g (tol %.0e)", what, h, rel, tol)
	if tol > 0 && !(rel <= tol) {
		tb.Errorf("gradcheck %s: worst rel-to-max error %.3g > %.0e", what, rel, tol)
	}
	return rel
}
