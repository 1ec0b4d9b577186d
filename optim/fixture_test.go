// The fixture tests are package optim_test, dot-importing optim, because the
// fixture readers they share with package tta's tests
// (internal/fixturefile) import optim.
package optim_test

import (
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	. "github.com/subtta/subtta/optim"
)

// fx is an open fixture file (fixturefile.File's helpers).
type fx struct{ *fixturefile.File }

func openFixture(tb testing.TB, rel string) *fx { tb.Helper(); return &fx{fixturefile.Open(tb, rel)} }

func load[T Float](x *fx, name string) []T { x.TB.Helper(); return fixturefile.Load[T](x.File, name) }

func toF64[T Float](v []T) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
