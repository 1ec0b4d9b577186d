package feature

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/symeig"
	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestAlignFixture checks stage A of every batch from the stored F1 and
// Sigma_old: S, Sigma, eigenvalues, B_V, L_align, dL/dS and dL/dF1.
func TestAlignFixture(t *testing.T) {
	cfg := fxt.ReadSubTTAConfig(t)
	for _, file := range fxt.SubTTAFiles {
		t.Run(file, func(t *testing.T) {
			x := fxt.Open(t, file)
			tol := tolsFor(file)
			ts := textSubspaceFrom(t, x, cfg)
			for k := range x.Batches("b", "F1") {
				b := fmt.Sprintf("b%d.", k)
				if k == 0 {
					// On the first batch the history is Σ_T.
					fxt.CompareDense(t, b+"Sigma_old = Sigma_T", x.Dense(b+"Sigma_old"), mat.DenseCopyOf(ts.Cov), tol.forward, fxt.Rel)
				}
				res, err := Align(x.Dense(b+"F1"), x.Sym(b+"Sigma_old"), ts, AlignOptions{Alpha: cfg.Alpha})
				if err != nil {
					t.Fatal(err)
				}
				if res.GuardedGaps != 0 {
					t.Errorf("%s: %d eigen-gaps guarded", b, res.GuardedGaps)
				}
				fxt.CompareDense(t, b+"S", res.S, x.Dense(b+"S"), tol.forward, fxt.Rel)
				fxt.CompareDense(t, b+"Sigma", res.Sigma, x.Dense(b+"Sigma"), tol.forward, fxt.Rel)
				fxt.Compare(t, b+"eigvals", res.Eigvals, x.Vec(b+"eigvals"), tol.forward, fxt.Rel)
				// B_V's last row sits on a gap of ~8e-5·λ_max: compare the
				// projector B_VᵀB_V at the gradient tolerance.
				var pv, pvWant mat.Dense
				pv.Mul(res.Basis.T(), res.Basis)
				bv := x.Dense(b + "B_V")
				pvWant.Mul(bv.T(), bv)
				fxt.CompareDense(t, b+"B_V projector", &pv, &pvWant, tol.grad, fxt.Rel)
				fxt.Compare(t, b+"L_align", []float64{res.Loss}, []float64{x.Scalar(b + "L_align")}, tol.loss, fxt.Rel)
				fxt.CompareDense(t, b+"dL_dS", res.DLdS, x.Dense(b+"dL_dS"), tol.grad, fxt.Rel)
				fxt.CompareDense(t, b+"dL_dF1", res.DLdF, x.Dense(b+"dL_dF1"), tol.grad, fxt.Rel)
			}
		})
	}
}

// TestAlignerChain runs the stateful Aligner over the fp64 batches: the
// history it keeps equals the stored Sigma_old of the next batch.
func TestAlignerChain(t *testing.T) {
	cfg := fxt.ReadSubTTAConfig(t)
	x := fxt.Open(t, "fixtures/subtta_fp64.safetensors")
	ts := textSubspaceFrom(t, x, cfg)
	a := NewAligner(ts, AlignOptions{Alpha: cfg.Alpha})
	for k := range x.Batches("b", "F1") {
		b := fmt.Sprintf("b%d.", k)
		fxt.CompareDense(t, b+"Sigma_old (kept by Aligner)", a.Covariance(), x.Dense(b+"Sigma_old"), 1e-9, fxt.Rel)
		res, err := a.Update(x.Dense(b + "F1"))
		if err != nil {
			t.Fatal(err)
		}
		fxt.Compare(t, b+"L_align (Aligner)", []float64{res.Loss}, []float64{x.Scalar(b + "L_align")}, 1e-9, fxt.Rel)
	}
	a.Reset()
	fxt.CompareDense(t, "Sigma after Reset = Sigma_T", a.Covariance(), mat.DenseCopyOf(ts.Cov), 0, fxt.Abs)

	off := NewAligner(ts, AlignOptions{Alpha: 0})
	if res, err := off.Update(x.Dense("b0.F1")); res != nil || err != nil || off.Enabled() {
		t.Errorf("alpha = 0: alignment ran (%v, %v)", res, err)
	}
	dis := NewAligner(ts, AlignOptions{Alpha: 0.5, Disabled: true})
	if res, _ := dis.Update(x.Dense("b0.F1")); res != nil {
		t.Error("Disabled: alignment ran")
	}
}

// alignProblem is a random alignment problem with a controlled eigen-gap
// between λ_r and λ_{r+1} (indices First+r−1 and First+r) of Σ_old.
type alignProblem struct {
	f        *mat.Dense
	sigmaOld *mat.SymDense
	text     *TextSubspace
	opt      AlignOptions
}

func newAlignProblem(rng *rand.Rand, b, d, c, rank int, alpha, gap float64, keepTop bool) alignProblem {
	tm, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	ts, err := NewTextSubspace(tm, SubspaceOptions{Rank: rank, KeepTopPC: keepTop})
	if err != nil {
		panic(err)
	}
	// The target Σ = Q diag(λ) Qᵀ, λ descending and spread over [1, 2],
	// except that the boundary pair (First+r−1, First+r) is split by exactly
	// gap. Σ_old is chosen so that α·Σ_old + (1−α)·S hits the target at F.
	f := fxt.RandDense(rng, b, d, 0.1)
	s, _ := BatchCovariance(f)
	q := randOrthogonal(rng, d)
	lam := make([]float64, d)
	for i := range d {
		lam[i] = 2 - float64(i)/float64(d)
	}
	bnd := ts.First + ts.Rank()
	lam[bnd] = lam[bnd-1] - gap
	sig := mat.NewSymDense(d, nil)
	for i := range d {
		for j := i; j < d; j++ {
			var v float64
			for k := range d {
				v += q.At(i, k) * lam[k] * q.At(j, k)
			}
			sig.SetSym(i, j, (v-(1-alpha)*s.At(i, j))/alpha)
		}
	}
	return alignProblem{f: f, sigmaOld: sig, text: ts, opt: AlignOptions{Alpha: alpha}}
}

func randOrthogonal(rng *rand.Rand, d int) *mat.Dense {
	var qr mat.QR
	qr.Factorize(fxt.RandDense(rng, d, d, 1))
	var q mat.Dense
	qr.QTo(&q)
	return &q
}

func (p alignProblem) loss(f *mat.Dense) float64 {
	res, err := Align(f, p.sigmaOld, p.text, p.opt)
	if err != nil {
		panic(err)
	}
	return res.Loss
}

// TestAlignGradCheck compares the closed-form ∂L/∂F with float64 central
// differences (h = 1e-6) on random problems with well separated eigenvalues.
func TestAlignGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name      string
		b, d, c   int
		rank      int
		alpha     float64
		keepTopPC bool
	}{
		{"alpha0.5", 6, 12, 9, 4, 0.5, false},
		{"alpha0.1", 10, 16, 20, 6, 0.1, false},
		{"keep-top-pc", 6, 12, 9, 4, 0.5, true},
		{"alpha1 (zero gradient)", 6, 10, 9, 3, 1, false},
	}
	for _, tc := range tests {
		p := newAlignProblem(rng, tc.b, tc.d, tc.c, tc.rank, tc.alpha, 0.05, tc.keepTopPC)
		res, err := Align(p.f, p.sigmaOld, p.text, p.opt)
		if err != nil {
			t.Fatal(err)
		}
		// 1e-6: central differences of a smooth function at h=1e-6 are good to
		// ~1e-9 relative; the margin covers the 1/gap curvature.
		fxt.GradCheck(t, tc.name, p.f, p.loss, res.DLdF, 1e-6, 1e-6)
	}
}

// TestAlignSmallGap shrinks the gap between λ_r and λ_{r+1} and reports how
// the closed form and central differences agree. The analytic gradient
// stays exact, but the loss turns sharply non-linear on the scale of the gap
// (its curvature grows like 1/gap²), so differences with h = 1e-7 on F
// degrade once the gap nears the change h causes in Σ, about
// 2·h·|F|/(B−1) ≈ 1e-9 here. The guard is checked separately.
func TestAlignSmallGap(t *testing.T) {
	const b, d, c, rank = 6, 12, 9, 4
	for _, tc := range []struct {
		gap, tol float64
	}{
		{1e-1, 1e-6},
		{1e-3, 1e-6},
		{1e-5, 1e-5},
		{1e-7, 0}, // reported only: differences are no longer meaningful
		{1e-9, 0}, // below DefaultGapTol·λ_max = 2e-9: clamped
	} {
		rng := rand.New(rand.NewPCG(5, 6))
		p := newAlignProblem(rng, b, d, c, rank, 0.5, tc.gap, false)
		res, err := Align(p.f, p.sigmaOld, p.text, p.opt)
		if err != nil {
			t.Fatal(err)
		}
		bnd := p.text.First + p.text.Rank()
		gotGap := res.Eigvals[bnd-1] - res.Eigvals[bnd]
		fxt.GradCheck(t, fmt.Sprintf("gap %.0e (λ_r−λ_r+1 of Σ = %.2g)", tc.gap, gotGap), p.f, p.loss, res.DLdF, 1e-7, tc.tol)
		if tc.tol == 0 {
			// Reported only: a step scaled to the gap recovers agreement while
			// rounding (~1e-16/h) allows.
			fxt.GradCheck(t, fmt.Sprintf("gap %.0e, step scaled to the gap", tc.gap), p.f, p.loss, res.DLdF, tc.gap/10, 0)
		}
		var mx float64
		for _, v := range res.DLdF.RawMatrix().Data {
			mx = math.Max(mx, math.Abs(v))
		}
		t.Logf("    max|dL/dF| = %.3g, guarded gaps %d", mx, res.GuardedGaps)
	}
}

// TestAlignGapGuard: exactly equal eigenvalues across the boundary give a
// finite gradient, clamped and counted; with the guard off (GapTol tiny) the
// same problem gives a far larger gradient.
func TestAlignGapGuard(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const b, d, c, rank = 6, 12, 9, 4
	p := newAlignProblem(rng, b, d, c, rank, 0.5, 0, false) // gap 0 up to rounding
	res, err := Align(p.f, p.sigmaOld, p.text, p.opt)
	if err != nil {
		t.Fatal(err)
	}
	if res.GuardedGaps < 1 {
		t.Fatalf("zero gap: %d guarded gaps (min gap %.3g)", res.GuardedGaps, res.MinGap)
	}
	for _, v := range res.DLdS.RawSymmetric().Data {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatal("guarded gradient is not finite")
		}
	}
	guarded := mat.Norm(res.DLdS, math.Inf(1))
	t.Logf("zero gap: %d pairs guarded, min |gap| %.3g, max|dL/dS| %.3g", res.GuardedGaps, res.MinGap, guarded)
	if guarded == 0 {
		t.Error("guarded gradient is zero")
	}
	// With the guard below the (rounding-sized) gap, nothing is clamped and
	// the gradient explodes: that is what the guard prevents.
	if res.MinGap > 0 {
		p.opt.GapTol = res.MinGap / 2 / math.Abs(res.Eigvals[0])
		res2, _ := Align(p.f, p.sigmaOld, p.text, p.opt)
		raw := mat.Norm(res2.DLdS, math.Inf(1))
		t.Logf("guard below the gap: %d guarded, max|dL/dS| %.3g", res2.GuardedGaps, raw)
		if res2.GuardedGaps != 0 || !(raw > 10*guarded) {
			t.Errorf("unguarded: %d guarded, max|dL/dS| %.3g vs guarded %.3g", res2.GuardedGaps, raw, guarded)
		}
	}
}

func TestAlignBadInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	p := newAlignProblem(rng, 6, 12, 9, 4, 0.5, 0.1, false)
	if _, err := Align(fxt.RandDense(rng, 6, 11, 1), p.sigmaOld, p.text, p.opt); err == nil {
		t.Error("wrong feature dimension: no error")
	}
	if _, err := Align(p.f, mat.NewSymDense(5, nil), p.text, p.opt); err == nil {
		t.Error("wrong covariance size: no error")
	}
	if _, err := Align(p.f, p.sigmaOld, p.text, AlignOptions{Alpha: 1.5}); err == nil {
		t.Error("alpha 1.5: no error")
	}
}

// flippedEigen is a kernel.SymmetricEigen on kernel.Host that decomposes
// with internal/symeig and negates every eigenvector (their signs are
// arbitrary): a basis computed on it differs from the CPU's, so a function
// that left the device path would be seen.
type flippedEigen struct{ kernel.Device }

func (flippedEigen) SymEig(a []float64, n int) ([]float64, []float64, error) {
	dec, err := symeig.Factorize(mat.NewSymDense(n, a))
	if err != nil {
		return nil, nil, err
	}
	v := mat.DenseCopyOf(dec.Vectors).RawMatrix().Data
	for i := range v {
		v[i] = -v[i]
	}
	return dec.Values, v, nil
}

// TestCovarianceBasis checks that CovarianceBasis gives Align's B_V with
// α = 0 against Σ_T bit for bit (what the diagnostics read), on the
// fixtures' batches and on random ones (the top PC dropped and kept, one
// sample to 64), on the CPU, with kernel.Host set and with a device that
// decomposes (whose eigenvectors' signs differ from the CPU's).
func TestCovarianceBasis(t *testing.T) {
	type problem struct {
		name string
		f    *mat.Dense
		ts   *TextSubspace
	}
	var probs []problem
	cfg := fxt.ReadSubTTAConfig(t)
	for _, file := range fxt.SubTTAFiles {
		x := fxt.Open(t, file)
		ts := textSubspaceFrom(t, x, cfg)
		for k := range x.Batches("b", "F1") {
			probs = append(probs, problem{fmt.Sprintf("%s b%d", file, k), x.Dense(fmt.Sprintf("b%d.F1", k)), ts})
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		b, d, c, rank int
		keepTop       bool
	}{{64, 32, 20, 8, false}, {16, 24, 10, 9, true}, {2, 16, 5, 3, false}, {64, 128, 100, 64, false}} {
		tm, _ := NormalizeRows(fxt.RandDense(rng, c.c, c.d, 1))
		ts, err := NewTextSubspace(tm, SubspaceOptions{Rank: c.rank, KeepTopPC: c.keepTop})
		if err != nil {
			t.Fatal(err)
		}
		probs = append(probs, problem{fmt.Sprintf("random %d×%d, %d classes, rank %d, top PC kept %v", c.b, c.d, c.c, c.rank, c.keepTop), fxt.RandDense(rng, c.b, c.d, 0.1), ts})
	}
	for _, dev := range []struct {
		name string
		d    kernel.Device
	}{{"CPU", nil}, {"kernel.Host", kernel.Host}, {"a decomposing device", flippedEigen{kernel.Host}}} {
		for _, p := range probs {
			var want *Alignment
			var got *mat.Dense
			var err1, err2 error
			withFloat64Device(dev.d, func() {
				want, err1 = Align(p.f, p.ts.Cov, p.ts, AlignOptions{})
				got, err2 = CovarianceBasis(p.f, p.ts)
			})
			if err1 != nil || err2 != nil {
				t.Fatalf("%s, %s: %v, %v", dev.name, p.name, err1, err2)
			}
			w, g := want.Basis.RawMatrix(), got.RawMatrix()
			if r, c := got.Dims(); r != p.ts.Rank() || c != w.Cols {
				t.Fatalf("%s, %s: basis %d×%d, want %d×%d", dev.name, p.name, r, c, p.ts.Rank(), w.Cols)
			}
			for i := range w.Rows {
				for j := range w.Cols {
					if a, b := g.Data[i*g.Stride+j], w.Data[i*w.Stride+j]; math.Float64bits(a) != math.Float64bits(b) {
						t.Fatalf("%s, %s: B_V[%d, %d] = %v, Align's %v", dev.name, p.name, i, j, a, b)
					}
				}
			}
		}
	}
	// The decomposing device's basis is the CPU's negated: the comparison
	// above sees which path a function took.
	p := probs[0]
	cpu, _ := CovarianceBasis(p.f, p.ts)
	var dev *mat.Dense
	withFloat64Device(flippedEigen{kernel.Host}, func() { dev, _ = CovarianceBasis(p.f, p.ts) })
	if cpu.At(0, 0) == 0 || dev.At(0, 0) != -cpu.At(0, 0) {
		t.Errorf("the decomposing device's B_V[0, 0] is %v, the CPU's %v: the test cannot tell the paths apart", dev.At(0, 0), cpu.At(0, 0))
	}
}

// TestCovarianceBasisOnHost: with a decomposing device set (whose basis
// is the CPU's negated), CovarianceBasisOnHost still gives the CPU's basis
// bit for bit, serially or not: it never calls the device.
func TestCovarianceBasisOnHost(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	tm, _ := NormalizeRows(fxt.RandDense(rng, 20, 32, 1))
	ts, err := NewTextSubspace(tm, SubspaceOptions{Rank: 8})
	if err != nil {
		t.Fatal(err)
	}
	f := fxt.RandDense(rng, 16, 32, 1)
	cpu, err := CovarianceBasis(f, ts)
	if err != nil {
		t.Fatal(err)
	}
	var host, serial, dev *mat.Dense
	var err1, err2, err3 error
	withFloat64Device(flippedEigen{kernel.Host}, func() {
		host, err1 = CovarianceBasisOnHost(f, ts, false)
		serial, err2 = CovarianceBasisOnHost(f, ts, true)
		dev, err3 = CovarianceBasis(f, ts)
	})
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	c, h, s := cpu.RawMatrix().Data, host.RawMatrix().Data, serial.RawMatrix().Data
	for i := range c {
		if math.Float64bits(c[i]) != math.Float64bits(h[i]) || math.Float64bits(c[i]) != math.Float64bits(s[i]) {
			t.Fatalf("element %d: %v on the host, %v serially there, the CPU's %v", i, h[i], s[i], c[i])
		}
	}
	if dev.At(0, 0) != -cpu.At(0, 0) || cpu.At(0, 0) == 0 {
		t.Errorf("the device's B_V[0, 0] is %v, the CPU's %v: the test cannot tell the paths apart", dev.At(0, 0), cpu.At(0, 0))
	}
}

// TestCovarianceBasisBadInput: features of another width than the text
// subspace's are refused with an error that says so.
func TestCovarianceBasisBadInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	tm, _ := NormalizeRows(fxt.RandDense(rng, 10, 16, 1))
	ts, err := NewTextSubspace(tm, SubspaceOptions{Rank: 4})
	if err != nil {
		t.Fatal(err)
	}
	_, err = CovarianceBasis(fxt.RandDense(rng, 8, 12, 1), ts)
	if err == nil || !strings.Contains(err.Error(), "12 dims") {
		t.Errorf("12-dim features against a 16-dim subspace: error %v", err)
	}
}

// TestAlignLossBits: the alignment loss, whose product is rowdot's, has the
// bits of the product as gonum's mat.Dense.Mul computes it, at the shapes
// of the fixtures and of ViT-B/32's subspace (rank 256 of 512 dimensions).
func TestAlignLossBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, sh := range []struct{ r, d int }{{3, 8}, {10, 64}, {256, 512}} {
		bv, bt := mat.NewDense(sh.r, sh.d, nil), mat.NewDense(sh.r, sh.d, nil)
		for _, m := range []*mat.Dense{bv, bt} {
			raw := m.RawMatrix().Data
			for i := range raw {
				raw[i] = rng.NormFloat64()
			}
		}
		var cross mat.Dense
		cross.Mul(bv, bt.T())
		fro := mat.Norm(&cross, 2)
		want := -fro * fro / (float64(sh.r) * 0.3)
		if got := alignLoss(bv, bt, sh.r, 0.3); math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("rank %d of %d: alignLoss %v, with gonum's product %v", sh.r, sh.d, got, want)
		}
	}
}
