package feature

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestDiagnosticsFixture ties the diagnostics to stored SubTTA quantities:
// Σ cos²θ_i over the principal angles of (B_V, B_T) is ‖B_V B_Tᵀ‖²_F =
// −L_align·r·(1−α); the cosine to the predicted class is logits/scale.
func TestDiagnosticsFixture(t *testing.T) {
	cfg := fxt.ReadSubTTAConfig(t)
	x := fxt.Open(t, "fixtures/subtta_fp64.safetensors")
	bt := x.Dense("text.B_T")
	r, _ := bt.Dims()
	text := x.Dense("text.T")
	ls := x.Scalar("logit_scale_exp")
	for k := range x.Batches("b", "B_V") {
		b := fmt.Sprintf("b%d.", k)
		cos, err := PrincipalAngleCosines(x.Dense(b+"B_V"), bt)
		if err != nil {
			t.Fatal(err)
		}
		var ss float64
		for i, c := range cos {
			if c < -1e-12 || c > 1+1e-12 || (i > 0 && c > cos[i-1]) {
				t.Errorf("%s: cosines not in [0,1] descending: %v", b, cos)
			}
			ss += c * c
		}
		want := -x.Scalar(b+"L_align") * float64(r) * math.Max(1-cfg.Alpha, 1e-6)
		fxt.Compare(t, b+"Σcos² = ‖B_V B_Tᵀ‖²", []float64{ss}, []float64{want}, 1e-12, fxt.Rel)

		f3 := x.Dense(b + "F3")
		preds := x.Ints(b + "preds")
		pc, err := PredictedClassCosine(f3, text, preds)
		if err != nil {
			t.Fatal(err)
		}
		logits := x.Dense(b + "logits")
		want2 := make([]float64, len(preds))
		for i, y := range preds {
			want2[i] = logits.At(i, y) / ls
		}
		fxt.Compare(t, b+"cosine to predicted class", pc, want2, 1e-12, fxt.Rel)
	}
}

func TestDiagnostics(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const d = 8
	q := randOrthogonal(rng, d)
	basis := mat.DenseCopyOf(q.Slice(0, d, 0, 3).T()) // rows: 3 orthonormal vectors
	other := mat.DenseCopyOf(q.Slice(0, d, 3, 5).T())
	cos, _ := PrincipalAngleCosines(basis, basis)
	fxt.Compare(t, "angles to itself", cos, []float64{1, 1, 1}, 1e-12, fxt.Abs)
	cos, _ = PrincipalAngleCosines(basis, other)
	fxt.Compare(t, "angles to a complement", cos, []float64{0, 0}, 1e-12, fxt.Abs)

	var p mat.Dense
	p.Mul(basis.T(), basis)
	in := mat.DenseCopyOf(basis.Slice(0, 1, 0, d))
	in.Scale(3, in)
	out := mat.DenseCopyOf(other.Slice(0, 1, 0, d))
	mixed := mat.NewDense(1, d, nil)
	mixed.Add(in, out) // energy 9 inside, 1 outside
	f := mat.NewDense(4, d, nil)
	f.SetRow(0, in.RawRowView(0))
	f.SetRow(1, out.RawRowView(0))
	f.SetRow(2, mixed.RawRowView(0))
	conc, err := SemanticConcentration(f, &p)
	if err != nil {
		t.Fatal(err)
	}
	fxt.Compare(t, "semantic concentration", conc, []float64{1, 0, 0.9, 0}, 1e-12, fxt.Abs)

	if _, err := PrincipalAngleCosines(basis, mat.NewDense(2, d+1, nil)); err == nil {
		t.Error("mismatched bases: no error")
	}
	if _, err := PredictedClassCosine(f, basis, []int{0, 1, 2, 3}); err == nil {
		t.Error("class out of range: no error")
	}
}

func TestFloat32Conversion(t *testing.T) {
	data := []float32{1, -2.5, 3, 0.1, 5, 6}
	m, err := DenseFromFloat32(2, 3, data)
	if err != nil {
		t.Fatal(err)
	}
	if m.At(1, 0) != float64(float32(0.1)) {
		t.Errorf("At(1,0) = %v", m.At(1, 0))
	}
	back := Float32s(m)
	for i := range data {
		if back[i] != data[i] {
			t.Fatalf("round trip differs at %d: %v vs %v", i, back[i], data[i])
		}
	}
	if _, err := DenseFromFloat32(2, 2, data); err == nil {
		t.Error("wrong length: no error")
	}
}
