package symeig

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/blas"
	lapack "gonum.org/v1/gonum/lapack/gonum"
	"gonum.org/v1/gonum/mat"
)

// tridiagonalizeGonum is tridiagonalize by gonum's LAPACK (Dsytrd, Dorgtr)
// and a transpose: the reduction this package used before, kept as a
// reference for tests and benchmarks.
func tridiagonalizeGonum(a []float64, n int, d, e, z []float64) {
	var impl lapack.Implementation
	tau := make([]float64, n-1)
	work := []float64{0}
	impl.Dsytrd(blas.Upper, n, a, n, d, e, tau, work, -1)
	impl.Dorgtr(blas.Upper, n, a, n, tau, work, -1)
	work = make([]float64, int(work[0])+n)
	impl.Dsytrd(blas.Upper, n, a, n, d, e, tau, work, len(work))
	impl.Dorgtr(blas.Upper, n, a, n, tau, work, len(work))
	for i := range n {
		for j := range n {
			z[j*n+i] = a[i*n+j]
		}
	}
}

// upper is a's upper triangle, row-major n×n, as tridiagonalize takes it
// (the strict lower triangle holds NaN, which must never be read).
func upper(a mat.Symmetric) []float64 {
	n := a.SymmetricDim()
	u := make([]float64, n*n)
	for i := range n {
		for j := range n {
			if j < i {
				u[i*n+j] = math.NaN()
			} else {
				u[i*n+j] = a.At(i, j)
			}
		}
	}
	return u
}

type tridiagResult struct{ d, e, z []float64 }

func runTridiag(f func(a []float64, n int, d, e, z []float64), a mat.Symmetric) tridiagResult {
	n := a.SymmetricDim()
	r := tridiagResult{make([]float64, n), make([]float64, max(n-1, 0)), make([]float64, n*n)}
	f(upper(a), n, r.d, r.e, r.z)
	return r
}

// tridiagErrors returns ‖A − Q·T·Qᵀ‖_max/‖A‖_max (0 for A = 0: then it
// returns ‖Q·T·Qᵀ‖_max) and ‖QᵀQ − I‖_max, Qᵀ being z.
func tridiagErrors(a mat.Symmetric, r tridiagResult) (resid, orth float64) {
	n := a.SymmetricDim()
	qt := mat.NewDense(n, n, r.z)
	t := mat.NewDense(n, n, nil)
	for i := range n {
		t.Set(i, i, r.d[i])
		if i+1 < n {
			t.Set(i, i+1, r.e[i])
			t.Set(i+1, i, r.e[i])
		}
	}
	var tq, qtq, qqt mat.Dense
	tq.Mul(t, qt)
	qtq.Mul(qt.T(), &tq)
	var norm float64
	for i := range n {
		for j := range n {
			norm = math.Max(norm, math.Abs(a.At(i, j)))
			resid = math.Max(resid, math.Abs(a.At(i, j)-qtq.At(i, j)))
		}
	}
	if norm > 0 {
		resid /= norm
	}
	qqt.Mul(qt, qt.T())
	for i := range n {
		for j := range n {
			want := 0.0
			if i == j {
				want = 1
			}
			orth = math.Max(orth, math.Abs(qqt.At(i, j)-want))
		}
	}
	return resid, orth
}

// zeroColumns is a random symmetric matrix whose rows and columns in cols
// are zero: the reflectors that meet them have τ = 0 or start from zero.
func zeroColumns(r *rand.Rand, n int, cols ...int) *mat.SymDense {
	a := randomSym(r, n)
	for _, c := range cols {
		for j := range n {
			a.SetSym(c, j, 0)
		}
	}
	return a
}

// tridiagonal is a random symmetric tridiagonal matrix (every τ is 0).
func tridiagonal(r *rand.Rand, n int) *mat.SymDense {
	a := mat.NewSymDense(n, nil)
	for i := range n {
		a.SetSym(i, i, r.NormFloat64())
		if i+1 < n {
			a.SetSym(i, i+1, r.NormFloat64())
		}
	}
	return a
}

func tridiagCases() []struct {
	name string
	a    *mat.SymDense
} {
	r := rand.New(rand.NewPCG(7, 8))
	diag := mat.NewSymDense(6, nil)
	for i := range 6 {
		diag.SetSym(i, i, float64(i)-2.5)
	}
	scaled := randomSym(r, 40)
	scaled.ScaleSym(1e-300, scaled)
	huge := randomSym(r, 40)
	huge.ScaleSym(1e300, huge)
	cases := []struct {
		name string
		a    *mat.SymDense
	}{
		{"zero 4×4", mat.NewSymDense(4, nil)},
		{"diagonal 6×6", diag},
		{"tridiagonal 33×33", tridiagonal(r, 33)},
		{"graded tridiagonal 40×40", graded(40, true)},
		{"zero columns 0, 5, 6, 29 of 30", zeroColumns(r, 30, 0, 5, 6, 29)},
		{"zero last two columns of 12", zeroColumns(r, 12, 10, 11)},
		{"tiny 40×40 (1e-300)", scaled},
		{"huge 40×40 (1e300)", huge},
		{"covariance 512, batch 64", covariance(r, 512, 64)},
		{"repeated 60", repeated(r, 60)},
	}
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 17, 31, 64, 101, 200, 512} {
		cases = append(cases, struct {
			name string
			a    *mat.SymDense
		}{fmt.Sprintf("random %d×%d", n, n), randomSym(r, n)})
	}
	return cases
}

// TestTridiagonalize checks A = Q·T·Qᵀ and QᵀQ = I. Householder's
// reduction is backward stable: in exact arithmetic on the computed
// reflectors, the residual is at most a modest multiple of n·ε·‖A‖₂
// (Wilkinson; Higham, Accuracy and Stability, §19.3), and so is the
// distance of the computed Q from orthogonality; the error of the test's
// own products (n terms each) is of the same order. Measured: at most
// 1.0·n·ε at the smallest sizes (n = 3: 8e-16), 3.5e-15 and 2.0e-15 at
// n = 512 (0.03·n·ε; gonum's reduction 5.8e-15 and 2.2e-15). The bound
// 8·n·ε (9.1e-13 at n = 512) leaves a margin for unlucky sums yet fails on
// any wrong reflector, sign or update, whose errors are O(1). gonum's
// reduction is measured alongside, and T's eigenvalues (QL) are compared
// with those of gonum's T, relative to ‖A‖₂, against the same bound: both
// are within a few n·ε·‖A‖₂ of A's (Weyl's inequality and the backward
// error above).
func TestTridiagonalize(t *testing.T) {
	const eps = 0x1p-52
	for _, tc := range tridiagCases() {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.a.SymmetricDim()
			got := runTridiag(tridiagonalize, tc.a)
			for i, v := range got.z {
				if math.IsNaN(v) {
					t.Fatalf("z[%d] is NaN: the lower triangle was read", i)
				}
			}
			resid, orth := tridiagErrors(tc.a, got)
			bound := 8 * float64(n) * eps
			line := fmt.Sprintf("n=%d: ‖A−QTQᵀ‖/‖A‖ %.2g, ‖QᵀQ−I‖ %.2g (bound %.2g)", n, resid, orth, bound)
			var vals float64
			if n >= 2 {
				ref := runTridiag(tridiagonalizeGonum, tc.a)
				r2, o2 := tridiagErrors(tc.a, ref)
				vals = eigenvalueDistance(t, got, ref) / math.Max(mat.Norm(tc.a, 2), math.SmallestNonzeroFloat64)
				line += fmt.Sprintf("; gonum %.2g, %.2g; T's eigenvalues vs gonum's T's %.2g", r2, o2, vals)
			}
			t.Log(line)
			if !(resid <= bound && orth <= bound && vals <= bound) {
				t.Errorf("beyond the bound: %s", line)
			}
		})
	}
}

// eigenvalueDistance is the largest difference between the sorted
// eigenvalues of the two results' T (by tridiagonalQL).
func eigenvalueDistance(t *testing.T, x, y tridiagResult) float64 {
	values := func(r tridiagResult) []float64 {
		n := len(r.d)
		d, e := append([]float64(nil), r.d...), make([]float64, n)
		copy(e, r.e)
		if _, err := tridiagonalQL(d, e, n); err != nil {
			t.Fatal(err)
		}
		slices.Sort(d)
		return d
	}
	a, b := values(x), values(y)
	var worst float64
	for i := range a {
		worst = math.Max(worst, math.Abs(a[i]-b[i]))
	}
	return worst
}

// TestTridiagonalizeTridiagonal: a matrix that is already tridiagonal
// has every τ = 0 and comes back unchanged, with Q = I, exactly.
func TestTridiagonalizeTridiagonal(t *testing.T) {
	a := tridiagonal(rand.New(rand.NewPCG(9, 10)), 20)
	got := runTridiag(tridiagonalize, a)
	for i := range 20 {
		if got.d[i] != a.At(i, i) || (i < 19 && got.e[i] != a.At(i, i+1)) {
			t.Fatalf("T changed at %d", i)
		}
		for j := range 20 {
			if want := float64(boolInt(i == j)); got.z[i*20+j] != want {
				t.Fatalf("Q is not I at (%d, %d): %v", i, j, got.z[i*20+j])
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// withKernels runs f with the row kernels' form k.
func withKernels(k kernelForm, f func()) {
	saved := tridiagKernels
	tridiagKernels = k
	defer func() { tridiagKernels = saved }()
	f()
}

func sameBits(x, y []float64) int {
	for i := range x {
		if math.Float64bits(x[i]) != math.Float64bits(y[i]) {
			return i
		}
	}
	return -1
}

// TestTridiagonalizeKernelsBits: each assembly form of the row kernels
// that this CPU runs (AVX-512 and AVX2 on an AVX-512 CPU), and the whole
// reduction with it, give the Go form's bits. Without assembly (not amd64,
// no AVX2+FMA, or turned off by GODEBUG) it is skipped: both legs would be
// the Go form.
func TestTridiagonalizeKernelsBits(t *testing.T) {
	var forms []kernelForm
	for k := tridiagKernels; k > kernelsGo; k-- {
		forms = append(forms, k)
	}
	if len(forms) == 0 {
		t.Skip("the assembly row kernels do not run here (not amd64, no AVX2+FMA, or turned off by GODEBUG)")
	}
	for _, k := range forms {
		t.Run(k.String(), func(t *testing.T) { checkKernelBits(t, k) })
	}
}

func checkKernelBits(t *testing.T, k kernelForm) {
	r := rand.New(rand.NewPCG(11, 12))
	rnd := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = r.NormFloat64()
		}
		return x
	}
	for n := 0; n <= 37; n++ {
		for off := range 3 { // misaligned starts
			a0, a1, vp, wp, v, y := rnd(n + off)[off:], rnd(n + 1)[1:], rnd(n + off)[off:], rnd(n), rnd(n + 1)[1:], rnd(n + off)[off:]
			s := make([]float64, 6)
			for i := range s {
				s[i] = r.NormFloat64()
			}
			c0, c1, y2 := append([]float64(nil), a0...), append([]float64(nil), a1...), append([]float64(nil), y...)
			var h0, h1 float64
			withKernels(k, func() { h0, h1 = symvRows2(a0, a1, vp, wp, v, y, s[0], s[1], s[2], s[3], s[4], s[5]) })
			g0, g1 := symvRows2Go(c0, c1, vp, wp, v, y2, s[0], s[1], s[2], s[3], s[4], s[5])
			if sameBits([]float64{h0, h1}, []float64{g0, g1}) >= 0 || sameBits(a0, c0) >= 0 || sameBits(a1, c1) >= 0 || sameBits(y, y2) >= 0 {
				t.Fatalf("symvRows2 n=%d off=%d: assembly and Go differ (dots %v %v, %v %v)", n, off, h0, h1, g0, g1)
			}
			// Up to 13 rows of z, ld n+off+2: the 8-, 4- and 1-row kernels.
			ld := n + off + 2
			for _, rows := range []int{1, 4, 8, 13} {
				z := rnd(rows * ld)
				z2 := append([]float64(nil), z...)
				tau := r.Float64() + 1
				withKernels(k, func() { reflectRows(z[off:], ld, rows, n, v, tau) })
				for i := range rows {
					reflectRowGo(z2[off+i*ld:off+i*ld+n], v, tau)
				}
				if i := sameBits(z, z2); i >= 0 {
					t.Fatalf("reflectRows n=%d off=%d rows=%d: element %d %v, %v", n, off, rows, i, z[i], z2[i])
				}
			}
		}
	}
	for _, tc := range tridiagCases() {
		var asm, gofor tridiagResult
		withKernels(k, func() { asm = runTridiag(tridiagonalize, tc.a) })
		withKernels(kernelsGo, func() { gofor = runTridiag(tridiagonalize, tc.a) })
		for _, p := range [][2][]float64{{asm.d, gofor.d}, {asm.e, gofor.e}, {asm.z, gofor.z}} {
			if i := sameBits(p[0], p[1]); i >= 0 {
				t.Fatalf("%s: assembly and Go reductions differ at %d: %v, %v", tc.name, i, p[0][i], p[1][i])
			}
		}
	}
}

// TestTridiagonalizeDigest pins the reduction's bits at n = 200 (d, e and
// z hashed): the same on every build, whatever GOAMD64, GODEBUG or CPU.
// A change of the algorithm's operations changes it on purpose; a change
// on one build only is a determinism defect.
func TestTridiagonalizeDigest(t *testing.T) {
	a := randomSym(rand.New(rand.NewPCG(13, 14)), 200)
	got := runTridiag(tridiagonalize, a)
	var h uint64 = 14695981039346656037
	for _, s := range [][]float64{got.d, got.e, got.z} {
		for _, v := range s {
			h = (h ^ math.Float64bits(v)) * 1099511628211
		}
	}
	t.Logf("digest %#x (row kernels: %v)", h, tridiagKernels)
	const want = 0x4b2f04cfb538fedf
	if h != want {
		t.Errorf("digest %#x, want %#x", h, uint64(want))
	}
}

// BenchmarkTridiagonalize: the 512×512 covariance of ViT-B/32's SubTTA
// step, reduced on one goroutine.
func BenchmarkTridiagonalize(b *testing.B) {
	const n = 512
	a := upper(covariance(rand.New(rand.NewPCG(1, 1)), n, 576))
	work := make([]float64, n*n)
	d, e, z := make([]float64, n), make([]float64, n-1), make([]float64, n*n)
	run := func(f func(a []float64, n int, d, e, z []float64)) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				copy(work, a)
				f(work, n, d, e, z)
			}
		}
	}
	for k := tridiagKernels; k >= kernelsGo; k-- {
		b.Run("householder-"+k.String(), func(b *testing.B) { withKernels(k, func() { run(tridiagonalize)(b) }) })
	}
	b.Run("gonum", run(tridiagonalizeGonum))
}

// TestTridiagonalizeGradingForQL: on a rank-deficient covariance, the
// decomposition's residual ‖V·A − Λ·V‖_∞/‖A‖₂ is small (measured 6.1e-15
// at 512×512, batch 64). It guards the reduction's direction: reduced from
// the top down, T has its large elements at the top, against the QL
// iteration's grain, and the residual is 4.7e-14 (3.8e-14 to 4.7e-14 over
// three seeds, against 6.6e-15 to 8.3e-15 from the bottom up); the bound
// 2e-14 lies between.
func TestTridiagonalizeGradingForQL(t *testing.T) {
	a := covariance(rand.New(rand.NewPCG(1, 99)), 512, 64)
	dec, err := FactorizeSerial(a)
	if err != nil {
		t.Fatal(err)
	}
	var av, resid mat.Dense
	av.Mul(dec.Vectors, a)
	resid.Apply(func(i, j int, v float64) float64 { return v - dec.Values[i]*dec.Vectors.At(i, j) }, &av)
	r := mat.Norm(&resid, math.Inf(1)) / mat.Norm(a, 2)
	t.Logf("residual %.2g (bound 2e-14)", r)
	if r > 2e-14 {
		t.Errorf("residual %.2g beyond 2e-14", r)
	}
}
