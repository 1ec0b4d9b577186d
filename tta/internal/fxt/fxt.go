package fxt

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
)

// File is an open fixture file (fixturefile.File's helpers) with readers of
// gonum matrices.
type File struct{ *fixturefile.File }

func Open(tb testing.TB, rel string) *File { tb.Helper(); return &File{fixturefile.Open(tb, rel)} }

func (x *File) Scalar(name string) float64 {
	x.TB.Helper()
	v, shape := x.F64(name)
	if len(v) != 1 {
		x.TB.Fatalf("%s: shape %v, want a scalar", name, shape)
	}
	return v[0]
}

func (x *File) Dense(name string) *mat.Dense {
	x.TB.Helper()
	v, shape := x.F64(name)
	if len(shape) != 2 {
		x.TB.Fatalf("%s: shape %v, want a matrix", name, shape)
	}
	return mat.NewDense(shape[0], shape[1], v)
}

func (x *File) Sym(name string) *mat.SymDense {
	x.TB.Helper()
	m := x.Dense(name)
	r, c := m.Dims()
	if r != c {
		x.TB.Fatalf("%s: %d×%d, want square", name, r, c)
	}
	return mat.NewSymDense(r, m.RawMatrix().Data)
}

func (x *File) Ints(name string) []int {
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

func Load[T optim.Float](x *File, name string) []T {
	x.TB.Helper()
	return fixturefile.Load[T](x.File, name)
}

type TolKind int

const (
	Rel TolKind = iota // relative to max|want| of the tensor
	Abs
)

// compare logs the worst error of got against want and fails beyond tol.
func Compare(tb testing.TB, what string, got, want []float64, tol float64, kind TolKind) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	abs, rel := fixturefile.ErrStats(got, want)
	e, k := rel, "rel-to-max"
	if kind == Abs {
		e, k = abs, "abs"
	}
	tb.Logf("%-44s worst abs %.3g, rel-to-max %.3g (tol %.0e %s)", what, abs, rel, tol, k)
	if !(e <= tol) {
		tb.Errorf("%s: worst %s error %.3g > %.0e", what, k, e, tol)
	}
}

func CompareDense(tb testing.TB, what string, got mat.Matrix, want *mat.Dense, tol float64, kind TolKind) {
	tb.Helper()
	gr, gc := got.Dims()
	wr, wc := want.Dims()
	if gr != wr || gc != wc {
		tb.Errorf("%s: %d×%d, want %d×%d", what, gr, gc, wr, wc)
		return
	}
	Compare(tb, what, mat.DenseCopyOf(got).RawMatrix().Data, want.RawMatrix().Data, tol, kind)
}

func CompareInts(tb testing.TB, what string, got, want []int) {
	tb.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		tb.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func ToF64[T optim.Float](v []T) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// gradCheck compares analytic with float64 central differences of f at x
// (step h) and fails when the worst error relative to max|numeric| exceeds tol.
func GradCheck(tb testing.TB, what string, x *mat.Dense, f func(*mat.Dense) float64, analytic mat.Matrix, h, tol float64) float64 {
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

// BaselineTol: baseline fixtures are fp32 torch; our float64 computation is held to the
// README's forward tolerance (1e-5 relative to the max of each tensor) for
// logits, losses and feature gradients.
const BaselineTol = 1e-5

type BaselinesJSON struct {
	Config struct {
		Mint struct {
			PriorN float64 `json:"prior_n"`
			Scale  string  `json:"scale"`
		} `json:"mint"`
	} `json:"config"`
}

// LogitScale reads exp(logit_scale) of the fixture model from
// subtta.safetensors; the baselines file, made with the same model, does not
// store it.
func LogitScale(t testing.TB) float64 {
	t.Helper()
	return Open(t, "fixtures/subtta.safetensors").Scalar("logit_scale_exp")
}

// SubTTAConfig is the configuration block of subtta.json.
type SubTTAConfig struct {
	R             int     `json:"R"`
	Alpha         float64 `json:"alpha"`
	LossType      string  `json:"loss_type"`
	RemoveFirstPC bool    `json:"remove_first_pc"`
}

// ReadSubTTAConfig reads subtta.json's configuration.
func ReadSubTTAConfig(tb testing.TB) SubTTAConfig {
	var js struct {
		Config SubTTAConfig `json:"config"`
	}
	fixturefile.ReadJSON(tb, "fixtures/subtta.json", &js)
	if js.Config.R < 1 {
		tb.Fatalf("subtta.json: config %+v has no rank R", js.Config)
	}
	return js.Config
}

// SubTTAFiles are the fp32 and fp64 SubTTA fixture runs.
var SubTTAFiles = []string{"fixtures/subtta.safetensors", "fixtures/subtta_fp64.safetensors"}

// RandDense is an r×c matrix of normal values with standard deviation sd.
func RandDense(rng *rand.Rand, r, c int, sd float64) *mat.Dense {
	data := make([]float64, r*c)
	for i := range data {
		data[i] = sd * rng.NormFloat64()
	}
	return mat.NewDense(r, c, data)
}
