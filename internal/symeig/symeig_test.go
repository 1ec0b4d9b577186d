package symeig

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func randomSym(r *rand.Rand, n int) *mat.SymDense {
	a := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			a.SetSym(i, j, r.NormFloat64())
		}
	}
	return a
}

// covariance is a batch covariance like SubTTA's: rank at most b−1, so
// most eigenvalues are (numerically) zero, a large repeated cluster.
func covariance(r *rand.Rand, n, b int) *mat.SymDense {
	x := mat.NewDense(b, n, nil)
	for i := range b {
		for j := range n {
			x.Set(i, j, r.NormFloat64()*float64(1+j%7))
		}
	}
	var a mat.SymDense
	a.SymOuterK(1/float64(b-1), x.T())
	return &a
}

// repeated has eigenvalues 2 (multiplicity n/2), −1 and 0: a rotated
// diagonal with exact ties.
func repeated(r *rand.Rand, n int) *mat.SymDense {
	var qr mat.QR
	qr.Factorize(mat.DenseCopyOf(randomSym(r, n)))
	var q mat.Dense
	qr.QTo(&q)
	diag := make([]float64, n)
	for i := range diag {
		switch {
		case i < n/2:
			diag[i] = 2
		case i < n-2:
			diag[i] = -1
		}
	}
	var qd, a mat.Dense
	qd.Mul(&q, mat.NewDiagDense(n, diag))
	a.Mul(&qd, q.T())
	s := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			s.SetSym(i, j, (a.At(i, j)+a.At(j, i))/2)
		}
	}
	return s
}

// TestFactorize checks, against gonum's EigenSym and against the
// definitions: eigenvalues, A·vᵢ = λᵢ·vᵢ (residual), and VVᵀ = I. Both
// algorithms are backward stable, so every error is a modest multiple of
// n·ε·‖A‖ (ε = 1.1e-16); the bound 1e-13·n·‖A‖ leaves a factor ~10³ of
// room and still fails on any wrong rotation.
func TestFactorize(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name string
		a    *mat.SymDense
	}{
		{"1×1", randomSym(r, 1)},
		{"2×2", randomSym(r, 2)},
		{"3×3", randomSym(r, 3)},
		{"17×17", randomSym(r, 17)},
		{"200×200", randomSym(r, 200)},
		{"zero 5×5", mat.NewSymDense(5, nil)},
		{"diagonal", mat.NewSymDense(4, []float64{3, 0, 0, 0, 0, -1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3})},
		{"covariance 300, batch 64", covariance(r, 300, 64)},
		{"repeated 60", repeated(r, 60)},
		{"graded, large last", graded(40, false)},
		{"graded, large first", graded(40, true)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.a.SymmetricDim()
			got, err := Factorize(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			var ref mat.EigenSym
			if !ref.Factorize(tc.a, false) {
				t.Fatal("gonum: no convergence")
			}
			want := ref.Values(nil)
			norm := math.Max(mat.Norm(tc.a, 2), math.SmallestNonzeroFloat64)
			tol := 1e-13 * float64(n) * norm
			var worstVal, worstRes, worstOrth float64
			for i := range n {
				worstVal = math.Max(worstVal, math.Abs(got.Values[i]-want[i]))
				if i > 0 && got.Values[i] < got.Values[i-1] {
					t.Fatalf("values not ascending at %d: %v", i, got.Values[i-1:i+1])
				}
			}
			var av, resid mat.Dense
			av.Mul(got.Vectors, tc.a) // row i: vᵢᵀA = λᵢvᵢᵀ
			resid.Apply(func(i, j int, v float64) float64 { return v - got.Values[i]*got.Vectors.At(i, j) }, &av)
			worstRes = mat.Norm(&resid, math.Inf(1))
			var vvt mat.Dense
			vvt.Mul(got.Vectors, got.Vectors.T())
			for i := range n {
				for j := range n {
					want := 0.0
					if i == j {
						want = 1
					}
					worstOrth = math.Max(worstOrth, math.Abs(vvt.At(i, j)-want))
				}
			}
			t.Logf("n=%d: eigenvalues vs gonum %.2g, residual %.2g (tolerance %.2g), orthogonality %.2g",
				n, worstVal, worstRes, tol, worstOrth)
			if worstVal > tol || worstRes > tol*float64(n) || worstOrth > 1e-13*float64(n) {
				t.Errorf("errors beyond tolerance")
			}
		})
	}
}

// graded has entries spanning 10^±20, where an unscaled test for negligible
// couplings would misjudge.
func graded(n int, largeFirst bool) *mat.SymDense {
	a := mat.NewSymDense(n, nil)
	for i := range n {
		p := float64(i - n/2)
		if largeFirst {
			p = -p
		}
		a.SetSym(i, i, math.Pow(10, p))
		if i+1 < n {
			a.SetSym(i, i+1, math.Pow(10, p)/3)
		}
	}
	return a
}

func TestFactorizeRejectsNonFinite(t *testing.T) {
	a := mat.NewSymDense(3, nil)
	a.SetSym(1, 2, math.NaN())
	if _, err := Factorize(a); err == nil {
		t.Error("a NaN element was accepted")
	}
}

// BenchmarkFactorize: the 512×512 covariance of ViT-B/32's SubTTA step,
// split over the cores (symeig), on one goroutine (serial), and with
// gonum's mat.EigenSym.
func BenchmarkFactorize(b *testing.B) {
	a := covariance(rand.New(rand.NewPCG(1, 1)), 512, 576)
	b.Run("symeig", func(b *testing.B) {
		for b.Loop() {
			if _, err := Factorize(a); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := FactorizeSerial(a); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gonum", func(b *testing.B) {
		for b.Loop() {
			var e mat.EigenSym
			e.Factorize(a, true)
		}
	})
}

// TestFactorizeSerial: the decomposition with the rotations on one
// goroutine has the bits of the one split over four (at 300×300 a sweep's
// rotations are split), values and vectors.
func TestFactorizeSerial(t *testing.T) {
	a := randomSym(rand.New(rand.NewPCG(5, 6)), 300)
	split, err := factorize(a, 4)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := FactorizeSerial(a)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range split.Values {
		if math.Float64bits(v) != math.Float64bits(serial.Values[i]) {
			t.Fatalf("value %d: %v serially, %v split", i, serial.Values[i], v)
		}
	}
	s, p := serial.Vectors.RawMatrix().Data, split.Vectors.RawMatrix().Data
	for i := range p {
		if math.Float64bits(s[i]) != math.Float64bits(p[i]) {
			t.Fatalf("vector element %d: %v serially, %v split", i, s[i], p[i])
		}
	}
}

// TestFactorizeDigest pins the bits of a decomposition of a rank-deficient
// covariance (200 dimensions, 64 samples, formed with every product
// rounded so that the input is the same in every build): the same digest
// with GOAMD64=v1 or v3 and whichever assembly the CPU runs (AVX-512, AVX2
// or none: GODEBUG=cpu.avx512f=off, cpu.avx2=off), since no step of the
// decomposition lets the compiler fuse a product into an FMA. A change of
// the algorithm that changes the bits changes the digest here.
func TestFactorizeDigest(t *testing.T) {
	const n, b = 200, 64
	r := rand.New(rand.NewPCG(21, 22))
	x := make([]float64, b*n)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	a := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			s := 0.0
			for k := range b {
				s += float64(x[k*n+i] * x[k*n+j])
			}
			a.SetSym(i, j, s)
		}
	}
	dec, err := FactorizeSerial(a)
	if err != nil {
		t.Fatal(err)
	}
	var h uint64 = 14695981039346656037
	for _, s := range [][]float64{dec.Values, dec.Vectors.RawMatrix().Data} {
		for _, v := range s {
			h = (h ^ math.Float64bits(v)) * 1099511628211
		}
	}
	t.Logf("digest %#x", h)
	const want = 0xf13ccf906308a955
	if h != want {
		t.Errorf("digest %#x, want %#x", h, uint64(want))
	}
}
