package fixturefile

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

// File is an open fixture file: weights.File's readers, and helpers that
// fail TB's test instead of returning an error.
type File struct {
	*weights.File
	TB testing.TB
}

// Open opens the shared file rel (see fixture.Path) and closes it when the
// test ends.
func Open(tb testing.TB, rel string) *File {
	tb.Helper()
	f, err := weights.Open(fixture.Path(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return &File{File: f, TB: tb}
}

// Config returns the configuration of the fixture model rel, read from its
// configuration file (fixture.ModelConfig). Tests give it to every loader
// of a fixture model (clip.Options.Config, for instance), so that no head
// count is guessed from the shapes.
func Config(tb testing.TB, rel string) *weights.CLIPConfig {
	tb.Helper()
	c, err := weights.ReadConfig(fixture.ModelConfig(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// CLIP loads the fixture model rel in OpenAI's names with its
// configuration file's configuration (Config), fitted to its tensors.
func CLIP(tb testing.TB, rel string) (*weights.State, *weights.CLIPConfig) {
	tb.Helper()
	s, c, err := weights.LoadCLIPWith(fixture.Path(tb, rel), Config(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	return s, c
}

// ReadJSON decodes the shared JSON file rel into v.
func ReadJSON(tb testing.TB, rel string, v any) {
	tb.Helper()
	b, err := os.ReadFile(fixture.Path(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatalf("%s: %v", rel, err)
	}
}

// Has reports whether the file holds a tensor name.
func (x *File) Has(name string) bool { _, ok := x.Info(name); return ok }

// F64 returns the tensor name in float64 and its shape.
func (x *File) F64(name string) ([]float64, []int) {
	x.TB.Helper()
	v, shape, err := x.Float64(name)
	if err != nil {
		x.TB.Fatal(err)
	}
	return v, shape
}

// Vec returns the tensor name in float64.
func (x *File) Vec(name string) []float64 { v, _ := x.F64(name); return v }

// Load reads a tensor in the element type T.
func Load[T ~float32 | ~float64](x *File, name string) []T {
	x.TB.Helper()
	var zero T
	switch any(zero).(type) {
	case float32:
		v, _, err := x.Float32(name)
		if err != nil {
			x.TB.Fatal(err)
		}
		return any(v).([]T)
	default:
		return any(x.Vec(name)).([]T)
	}
}

// ParamNames lists the trained parameters: the names under "init.param.",
// in file order.
func (x *File) ParamNames() []string {
	const prefix = "init.param."
	var out []string
	for _, n := range x.Names() {
		if p, ok := strings.CutPrefix(n, prefix); ok {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		x.TB.Fatalf("%s: no %s tensors", x.Path(), prefix)
	}
	return out
}

// Batches counts the consecutive batches prefix0, prefix1, ... that have a
// tensor named prefix<k>.suffix.
func (x *File) Batches(prefix, suffix string) int {
	k := 0
	for x.Has(fmt.Sprintf("%s%d.%s", prefix, k, suffix)) {
		k++
	}
	if k == 0 {
		x.TB.Fatalf("%s: no batches %s0.%s", x.Path(), prefix, suffix)
	}
	return k
}

// ErrStats returns the worst absolute error and the worst error relative to
// max|want|.
func ErrStats(got, want []float64) (abs, rel float64) {
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
