package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// gemmTol bounds the float32 error of a k-term dot product against the
// float64 reference: each product and partial sum rounds by at most 2⁻²⁴
// relative, so the error is below about k·2⁻²⁴·Σ|a||b|; we test against
// 4·k·2⁻²⁴ times the same sum computed in float64 (plus a tiny absolute term).
func gemmBound(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c0 []float32, ldc int) []float64 {
	aa := make([]float32, len(a))
	bb := make([]float32, len(b))
	cc := make([]float32, len(c0))
	for i := range a {
		aa[i] = float32(math.Abs(float64(a[i])))
	}
	for i := range b {
		bb[i] = float32(math.Abs(float64(b[i])))
	}
	for i := range c0 {
		cc[i] = float32(math.Abs(float64(c0[i])))
	}
	GemmRef(transA, transB, m, n, k, float32(math.Abs(float64(alpha))), aa, lda, bb, ldb, float32(math.Abs(float64(beta))), cc, ldc)
	out := make([]float64, len(cc))
	for i := range cc {
		out[i] = 4*float64(k+2)*0x1p-24*float64(cc[i]) + 1e-30
	}
	return out
}

type gemmCase struct {
	tA, tB      bool
	m, n, k     int
	alpha, beta float32
}

var gemmCases = []gemmCase{
	{false, false, 1, 1, 1, 1, 0},
	{false, false, 7, 33, 5, 1, 0},
	{false, true, 13, 17, 3, 1, 1},
	{true, false, 9, 31, 257, 0.5, 0},
	{true, true, 25, 47, 300, -1, 2},
	{false, false, 96, 64, 256, 1, 0},
	{false, true, 50, 50, 64, 0.125, 0},
	{false, false, 200, 96, 513, 1, 1},
	{true, false, 100, 130, 64, 1, 1},
	{false, false, 6, 16, 1, 1, 0},
	{false, false, 1, 100, 77, 1, 0},
	{false, true, 197, 1, 9, 1, 0},
	{false, true, 103, 50, 300, 1, 0},
	{false, false, 4, 5, 0, 1, 0.5},
}

// operands returns random A and B for tc stored with leading dimensions
// wider than the matrices (lda, ldb), and the leading dimension of C.
func (tc gemmCase) operands(r *rand.Rand) (a []float32, lda int, b []float32, ldb, ldc int) {
	lda, ldb = tc.k+3, tc.n+1
	arows, brows := tc.m, tc.k
	if tc.tA {
		lda, arows = tc.m+2, tc.k
	}
	if tc.tB {
		ldb, brows = tc.k+5, tc.n
	}
	return randSlice(r, arows*lda), lda, randSlice(r, brows*ldb), ldb, tc.n + 4
}

func checkGemm(t *testing.T, tc gemmCase, r *rand.Rand) {
	t.Helper()
	a, lda, b, ldb, ldc := tc.operands(r)
	c := randSlice(r, tc.m*ldc)
	want := append([]float32(nil), c...)
	if tc.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN()) // must be overwritten, never read
		}
	}
	bound := gemmBound(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
	GemmRef(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
	Gemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	worst := 0.0
	for i := 0; i < tc.m; i++ {
		for j := 0; j < tc.n; j++ {
			d := math.Abs(float64(c[i*ldc+j]) - float64(want[i*ldc+j]))
			if !(d <= bound[i*ldc+j]) {
				t.Fatalf("%+v: C[%d,%d] = %g, want %g (bound %g)", tc, i, j, c[i*ldc+j], want[i*ldc+j], bound[i*ldc+j])
			}
			worst = max(worst, d/(bound[i*ldc+j]))
		}
		for j := tc.n; j < ldc && tc.beta == 0; j++ {
			if !math.IsNaN(float64(c[i*ldc+j])) {
				t.Fatalf("%+v: wrote outside C at [%d,%d]", tc, i, j)
			}
		}
	}
	t.Logf("%s %+v: worst error %.3f of bound", Kernel(), tc, worst)
}

// forEachKernel runs test as a subtest on every micro-kernel this CPU has.
func forEachKernel(t *testing.T, test func(t *testing.T)) {
	for _, name := range Kernels() {
		t.Run(name, func(t *testing.T) {
			prev, err := SetKernel(name)
			if err != nil {
				t.Fatal(err)
			}
			defer SetKernel(prev)
			test(t)
		})
	}
}

// TestGemm runs every case on every micro-kernel this CPU has.
func TestGemm(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, tc := range gemmCases {
			t.Run(fmt.Sprintf("%v%v_%dx%dx%d", tc.tA, tc.tB, tc.m, tc.n, tc.k), func(t *testing.T) {
				checkGemm(t, tc, r)
			})
		}
	})
}

// TestGemmPackedBias: C = alpha·op(A)·op(B) + biasᵀ on every micro-kernel,
// against the float64-accumulated reference with the bias as a beta = 1
// term, within the same bound as TestGemm (the bias adds one rounding,
// which the bound's scale covers through |bias|).
func TestGemmPackedBias(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, tc := range gemmCases {
			a, lda, b, ldb, ldc := tc.operands(r)
			bias := randSlice(r, tc.n)
			want := make([]float32, tc.m*ldc)
			for i := range tc.m {
				copy(want[i*ldc:], bias)
			}
			bound := gemmBound(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, 1, want, ldc)
			GemmRef(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, 1, want, ldc)
			c := make([]float32, tc.m*ldc)
			for i := range c {
				c[i] = float32(math.NaN()) // overwritten, never read
			}
			p := PackB(tc.tB, tc.k, tc.n, b, ldb)
			GemmPackedBias(tc.tA, tc.m, tc.alpha, a, lda, p, bias, c, ldc)
			p.Release()
			for i := range tc.m {
				for j := range ldc {
					got, w := c[i*ldc+j], want[i*ldc+j]
					if j >= tc.n {
						if !math.IsNaN(float64(got)) {
							t.Fatalf("%+v: wrote outside C at [%d,%d]", tc, i, j)
						}
						continue
					}
					if d := math.Abs(float64(got) - float64(w)); !(d <= bound[i*ldc+j]) {
						t.Fatalf("%+v: C[%d,%d] = %g, want %g (bound %g)", tc, i, j, got, w, bound[i*ldc+j])
					}
				}
			}
		}
	})
}
