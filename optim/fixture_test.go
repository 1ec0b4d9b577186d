package optim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/weights"
)

// fx wraps an open fixture file with test helpers that fail on error.
type fx struct {
	tb testing.TB
	f  *weights.File
}

func openFixture(tb testing.TB, rel string) *fx {
	tb.Helper()
	f, err := weights.Open(fixture.Path(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return &fx{tb: tb, f: f}
}

func readJSON(tb testing.TB, rel string, v any) {
	tb.Helper()
	b, err := os.ReadFile(fixture.Path(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatalf("%s: %v", rel, err)
	}
}

func (x *fx) has(name string) bool { _, ok := x.f.Info(name); return ok }

func (x *fx) vec(name string) []float64 {
	x.tb.Helper()
	v, _, err := x.f.Float64(name)
	if err != nil {
		x.tb.Fatal(err)
	}
	return v
}

// load reads a tensor in the element type T.
func load[T Float](x *fx, name string) []T {
	x.tb.Helper()
	var zero T
	switch any(zero).(type) {
	case float32:
		v, _, err := x.f.Float32(name)
		if err != nil {
			x.tb.Fatal(err)
		}
		return any(v).([]T)
	default:
		return any(x.vec(name)).([]T)
	}
}

// paramNames lists the trained parameters: the names under "init.param.",
// in file order.
func (x *fx) paramNames() []string {
	const prefix = "init.param."
	var out []string
	for _, n := range x.f.Names() {
		if p, ok := strings.CutPrefix(n, prefix); ok {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		x.tb.Fatalf("%s: no %s tensors", x.f.Path(), prefix)
	}
	return out
}

// batches counts the consecutive batches prefix0, prefix1, ... that have a
// tensor named prefix<k>.suffix.
func (x *fx) batches(prefix, suffix string) int {
	k := 0
	for x.has(fmt.Sprintf("%s%d.%s", prefix, k, suffix)) {
		k++
	}
	if k == 0 {
		x.tb.Fatalf("%s: no batches %s0.%s", x.f.Path(), prefix, suffix)
	}
	return k
}

// errStats returns the worst absolute error and the worst error relative to
// max|want|.
func errStats(got, want []float64) (abs, rel float64) {
	var mx float64
	for i, w := range want {
		abs = math.Max(abs, math.Abs(got[i]-w))
		mx = math.Max(mx, math.Abs(w))
	}
	if mx == 0 {
		return abs, abs
	}
	return abs, abs / mx
}

func toF64[T Float](v []T) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
