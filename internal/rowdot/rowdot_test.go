package rowdot

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func randDense(r *rand.Rand, rows, cols int) *mat.Dense {
	m := mat.NewDense(rows, cols, nil)
	for i := range rows {
		for j := range cols {
			m.Set(i, j, r.NormFloat64()*math.Exp2(float64(r.IntN(9)-4)))
		}
	}
	return m
}

// shapes cover both of gonum's summation orders (fewer than four 64×64
// tiles of C: k summed whole; four or more: in blocks of 64), k below,
// at and past a multiple of 4 and of 64, and C's edges past the 3×4 tiles.
var shapes = []struct{ m, k, n int }{
	{1, 1, 1}, {1, 3, 5}, {2, 4, 3}, {3, 4, 4}, {5, 7, 9}, {3, 64, 4}, {7, 65, 13},
	{64, 512, 64}, {64, 513, 129}, {65, 130, 130}, {64, 512, 1000}, {130, 67, 200}, {256, 512, 256},
}

// TestMulMatchesGonum: on amd64 Mul is gonum's mat.Dense.Mul(a, b.T())
// bit for bit, with the vector kernel and with the Go sums; elsewhere
// (where gonum sums in another order) within 1e-13 of the largest
// |a_i|·|b_j| sum.
func TestMulMatchesGonum(t *testing.T) {
	saved := useAVX
	defer func() { useAVX = saved }()
	for _, s := range shapes {
		r := rand.New(rand.NewPCG(uint64(s.m), uint64(s.k*1000+s.n)))
		a, b := randDense(r, s.m, s.k), randDense(r, s.n, s.k)
		var want mat.Dense
		want.Mul(a, b.T())
		for _, vec := range []bool{true, false} {
			if vec && !saved {
				continue
			}
			useAVX = vec
			got, err := Mul(a, b)
			if err != nil {
				t.Fatal(err)
			}
			for i := range s.m {
				for j := range s.n {
					g, w := got.At(i, j), want.At(i, j)
					if runtime.GOARCH == "amd64" {
						if math.Float64bits(g) != math.Float64bits(w) {
							t.Fatalf("%d×%d·(%d×%d)ᵀ, vector kernel %v: C[%d,%d] = %v, gonum %v", s.m, s.k, s.n, s.k, vec, i, j, g, w)
						}
					} else if bound := 1e-13 * mat.Norm(a.RowView(i), 2) * mat.Norm(b.RowView(j), 2); math.Abs(g-w) > bound {
						t.Fatalf("%d×%d·(%d×%d)ᵀ: C[%d,%d] = %v, gonum %v", s.m, s.k, s.n, s.k, i, j, g, w)
					}
				}
			}
		}
	}
}

func TestMulRejects(t *testing.T) {
	if _, err := Mul(mat.NewDense(2, 3, nil), mat.NewDense(2, 4, nil)); err == nil {
		t.Error("3 and 4 columns were accepted")
	}
	if c, err := Mul(&mat.Dense{}, mat.NewDense(2, 4, nil)); err == nil {
		t.Errorf("an empty A gave %v", c)
	}
}

// BenchmarkMul: zero-shot logits at ImageNet's shape (64 images, 512
// dimensions, 1,000 classes) and the diagnostics' basis product (256×512
// by 256×512), with Mul and with gonum, on one core and on all.
func BenchmarkMul(b *testing.B) {
	for _, s := range []struct{ m, k, n int }{{64, 512, 1000}, {256, 512, 256}} {
		r := rand.New(rand.NewPCG(1, 2))
		x, y := randDense(r, s.m, s.k), randDense(r, s.n, s.k)
		for _, procs := range []int{1, runtime.GOMAXPROCS(0)} {
			name := fmt.Sprintf("%dx%dx%d/procs=%d", s.m, s.k, s.n, procs)
			b.Run(name+"/rowdot", func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				for b.Loop() {
					if _, err := Mul(x, y); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/gonum", func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				for b.Loop() {
					var c mat.Dense
					c.Mul(x, y.T())
				}
			})
		}
	}
}

// TestMulMatrix: dense operands take Mul, others gonum's Mul, with the
// same values; a shape mismatch panics as gonum's Mul does.
func TestMulMatrix(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	a, b := randDense(r, 70, 33), randDense(r, 90, 33)
	sym := mat.NewSymDense(33, nil)
	for i := range 33 {
		for j := i; j < 33; j++ {
			sym.SetSym(i, j, r.NormFloat64())
		}
	}
	for _, tc := range []struct {
		name string
		x, y mat.Matrix
	}{{"dense", a, b}, {"symmetric", a, sym}, {"transposed", mat.DenseCopyOf(b.T()).T(), a}} {
		var want mat.Dense
		want.Mul(tc.x, tc.y.T())
		if got := MulMatrix(tc.x, tc.y); !mat.Equal(got, &want) {
			t.Errorf("%s: MulMatrix differs from gonum's Mul", tc.name)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("33 and 34 columns did not panic")
		}
	}()
	MulMatrix(a, randDense(r, 5, 34))
}
