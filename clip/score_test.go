package clip

import (
	"math"
	"slices"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"gonum.org/v1/gonum/mat"
)

// TestZeroShotLogits compares the scorer with the cosine similarities
// written out, row by row, and shows a zero feature row gives zero logits
// (normalize's 1e-12 floor) rather than NaN.
func TestZeroShotLogits(t *testing.T) {
	const scale = 100
	w := mat.NewDense(3, 2, []float64{1, 0, 0, 1, math.Sqrt(0.5), -math.Sqrt(0.5)})
	for _, tc := range []struct {
		name string
		f    []float64 // one image's features
		want []float64
	}{
		{"along the first class", []float64{3, 0}, []float64{100, 0, 100 * math.Sqrt(0.5)}},
		{"between the first two", []float64{2, 2}, []float64{100 * math.Sqrt(0.5), 100 * math.Sqrt(0.5), 0}},
		{"opposite the third", []float64{-1, 1}, []float64{-100 * math.Sqrt(0.5), 100 * math.Sqrt(0.5), -100}},
		{"zero", []float64{0, 0}, []float64{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ZeroShotLogits(mat.NewDense(1, 2, tc.f), w, scale).RawRowView(0)
			for j := range tc.want {
				if math.Abs(got[j]-tc.want[j]) > 1e-12 || math.IsNaN(got[j]) {
					t.Errorf("logits %v, want %v", got, tc.want)
					break
				}
			}
		})
	}
}

// TestClassifyIsZeroShotLogits: Classify is the scorer on the model's
// float32 features and head, bit for bit, whatever the precision it is
// given them in.
func TestClassifyIsZeroShotLogits(t *testing.T) {
	m := &Model{LogitScale: 42.5}
	f32 := []float32{0.3, -1.25, 2, 0.5, 0.125, -0.75}
	w32 := []float32{0.6, 0.8, 0, 0, 0.6, -0.8, 1, 0, 0}
	head := &ZeroShot{Classes: []string{"a", "b", "c"}, Weights: smat.NewDense[float32](smat.WithShape(3, 3), smat.WithBacking(w32))}
	got := m.Classify(head, smat.NewDense[float32](smat.WithShape(2, 3), smat.WithBacking(f32)))
	if s := got.Value().Shape(); !slices.Equal(s, []int{2, 3}) {
		t.Fatalf("shape %v, want [2 3]", s)
	}
	f64 := make([]float64, len(f32))
	for i, v := range f32 {
		f64[i] = float64(v)
	}
	w64 := make([]float64, len(w32))
	for i, v := range w32 {
		w64[i] = float64(v)
	}
	want := ZeroShotLogits(mat.NewDense(2, 3, f64), mat.NewDense(3, 3, w64), m.LogitScale)
	if !slices.Equal(got.Value().Data().F64(), want.RawMatrix().Data) {
		t.Errorf("Classify %v, ZeroShotLogits %v", got.Value().Data().F64(), want.RawMatrix().Data)
	}
}
