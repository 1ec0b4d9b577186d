package feature

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/tta/internal/fxt"
)

// withFloat64Device runs f with d as the current device.
func withFloat64Device(d kernel.Device, f func()) {
	kernel.SetCurrent(d)
	defer kernel.SetCurrent(nil)
	f()
}

// TestAlignerOnDevice runs the Aligner with a kernel.Float64Device set
// (alignOnDevice: Σ kept on the device, its EMA, the decomposition and the
// gradient's products there) over the fp64 fixture batches and random
// problems (the top PC dropped and kept, with and without the EMA), and
// compares it with the CPU path: the fixtures' Σ_old chain (through
// Covariance, downloaded) and L_align within 1e-9 relative, as
// TestAlignerChain holds the CPU path; ∂L/∂F, the eigenvalues and B_V's
// projector within 1e-9 of the CPU's largest value. The two differ only by
// rounding: the products sum in another order, which the eigenvectors'
// gradient divides by the eigen-gaps (down to 8e-5·λ_max in the fixtures).
// It counts that a step uploads Fc and K and downloads λ, V_U, M and ∂L/∂F,
// never Σ, and decomposes once.
func TestAlignerOnDevice(t *testing.T) {
	worst := func(got, want []float64) float64 {
		scale, w := 0.0, 0.0
		for i := range want {
			scale = max(scale, math.Abs(want[i]))
			w = max(w, math.Abs(got[i]-want[i]))
		}
		return w / scale
	}
	projector := func(b *mat.Dense) []float64 {
		var p mat.Dense
		p.Mul(b.T(), b)
		return p.RawMatrix().Data
	}
	compare := func(t *testing.T, name string, got, want *Alignment) {
		t.Helper()
		for _, c := range []struct {
			what      string
			got, want []float64
		}{
			{"loss", []float64{got.Loss}, []float64{want.Loss}},
			{"∂L/∂F", got.DLdF.RawMatrix().Data, want.DLdF.RawMatrix().Data},
			{"eigenvalues", got.Eigvals, want.Eigvals},
			{"B_V's projector", projector(got.Basis), projector(want.Basis)},
		} {
			e := worst(c.got, c.want)
			if !(e <= 1e-9) {
				t.Errorf("%s: %s %.1e from the CPU's (relative), more than 1e-9", name, c.what, e)
			}
			t.Logf("%s: %s within %.1e of the CPU's (relative to the largest)", name, c.what, e)
		}
		if got.GuardedGaps != want.GuardedGaps || math.Abs(got.MinGap-want.MinGap) > 1e-9*math.Abs(want.Eigvals[0]) {
			t.Errorf("%s: %d guarded gaps, smallest %g on the device; %d, %g on the CPU", name, got.GuardedGaps, got.MinGap, want.GuardedGaps, want.MinGap)
		}
		if got.S != nil || got.Sigma != nil || got.Eigvecs != nil || got.DLdS != nil {
			t.Errorf("%s: the device's result holds d×d matrices it should leave there", name)
		}
	}

	t.Run("fixtures", func(t *testing.T) {
		cfg := fxt.ReadSubTTAConfig(t)
		x := fxt.Open(t, "fixtures/subtta_fp64.safetensors")
		ts := textSubspaceFrom(t, x, cfg)
		cpu := NewAligner(ts, AlignOptions{Alpha: cfg.Alpha})
		dev := NewAligner(ts, AlignOptions{Alpha: cfg.Alpha})
		d := &devicetest.Float64Host{Device: kernel.Host}
		n := 0
		for k := range x.Batches("b", "F1") {
			b := fmt.Sprintf("b%d.", k)
			f := x.Dense(b + "F1")
			want, err := cpu.Update(f)
			if err != nil {
				t.Fatal(err)
			}
			var got *Alignment
			d.ResetCounts()
			withFloat64Device(d, func() { got, err = dev.Update(f) })
			if err != nil {
				t.Fatal(err)
			}
			compare(t, b, got, want)
			fxt.Compare(t, b+"L_align (device)", []float64{got.Loss}, []float64{x.Scalar(b + "L_align")}, 1e-9, fxt.Rel)
			rows, dim := f.Dims()
			r := ts.Rank()
			if n > 0 { // the first step also uploads Σ_T, P_T and the ones
				if up, down := rows*dim+dim*r, dim+2*r*dim+rows*dim; d.Up != up || d.Down != down || d.Eigs != 1 {
					t.Errorf("%s: %d values up, %d down, %d decompositions; want %d (Fc, K), %d (λ, V_U, M, ∂L/∂F), 1",
						b, d.Up, d.Down, d.Eigs, up, down)
				}
			}
			n++
		}
		// Σ comes back on demand, and equals the CPU's history.
		fxt.CompareDense(t, "Σ after the chain (downloaded)", dev.Covariance(), mat.DenseCopyOf(cpu.Covariance()), 1e-9, fxt.Rel)
		if n < 2 {
			t.Fatalf("%d fixture batches, want at least 2", n)
		}
		// Reset puts Σ_T back; the next step on the device starts from it.
		cpu.Reset()
		dev.Reset()
		f := x.Dense("b0.F1")
		want, _ := cpu.Update(f)
		var got *Alignment
		var err error
		withFloat64Device(d, func() { got, err = dev.Update(f) })
		if err != nil {
			t.Fatal(err)
		}
		compare(t, "after Reset", got, want)
		// Back on the CPU, the history continues from the device's Σ.
		want, _ = cpu.Update(f)
		if got, err = dev.Update(f); err != nil {
			t.Fatal(err)
		}
		if e := worst([]float64{got.Loss}, []float64{want.Loss}); e > 1e-9 {
			t.Errorf("back on the CPU: loss %.1e from the CPU's", e)
		}
	})

	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		name    string
		keepTop bool
		noEMA   bool
	}{{"top PC dropped", false, false}, {"top PC kept", true, false}, {"no EMA", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			p := newAlignProblem(rng, 24, 40, 12, 5, 0.7, 1e-3, c.keepTop)
			opt := p.opt
			opt.NoEMA = c.noEMA
			cpu, dev := NewAligner(p.text, opt), NewAligner(p.text, opt)
			for _, a := range []*Aligner{cpu, dev} {
				if err := a.SetCovariance(p.sigmaOld); err != nil {
					t.Fatal(err)
				}
			}
			d := &devicetest.Float64Host{Device: kernel.Host}
			for step := range 3 {
				f := fxt.RandDense(rng, 24, 40, 0.1)
				if step == 0 {
					f = p.f
				}
				want, err := cpu.Update(f)
				if err != nil {
					t.Fatal(err)
				}
				var got *Alignment
				withFloat64Device(d, func() { got, err = dev.Update(f) })
				if err != nil {
					t.Fatal(err)
				}
				compare(t, fmt.Sprintf("step %d", step), got, want)
			}
			if e := worst(mat.DenseCopyOf(dev.Covariance()).RawMatrix().Data, mat.DenseCopyOf(cpu.Covariance()).RawMatrix().Data); e > 1e-12 {
				t.Errorf("Σ after three steps: %.1e from the CPU's", e)
			}
		})
	}
}

// TestProjectOnDevice runs Project and Backward with a kernel.Float64Device
// set and compares them with the CPU path, for the hard and the soft
// projection: Z and ∂L/∂F within 1e-13 of the largest value (float64
// products in another order, soft added to P's diagonal before the product
// rather than to its result). It counts that P + soft·I goes up once for
// two batches, then again when soft or P's values change: a call moves F (or ∂L/∂Y) up
// and the product down, B·d values each way.
func TestProjectOnDevice(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	p := newAlignProblem(rng, 16, 24, 8, 4, 0.5, 1e-2, false)
	b, dim := p.f.Dims()
	d := &devicetest.Float64Host{Device: kernel.Host}
	worst := func(got, want *mat.Dense) float64 {
		scale, w := 0.0, 0.0
		g, x := got.RawMatrix().Data, want.RawMatrix().Data
		for i := range x {
			scale = max(scale, math.Abs(x[i]))
			w = max(w, math.Abs(g[i]-x[i]))
		}
		return w / scale
	}
	for _, soft := range []float64{0, 0.3} {
		for batch := range 2 {
			f := fxt.RandDense(rng, b, dim, 1)
			dz := fxt.RandDense(rng, b, dim, 1)
			want, err := Project(f, p.text.Projector, soft)
			if err != nil {
				t.Fatal(err)
			}
			wantG, _ := want.Backward(dz)
			d.ResetCounts()
			var got *Projected
			var gotG *mat.Dense
			withFloat64Device(d, func() {
				if got, err = Project(f, p.text.Projector, soft); err == nil {
					gotG, err = got.Backward(dz)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			ez, eg := worst(got.Z, want.Z), worst(gotG, wantG)
			t.Logf("soft %v, batch %d: Z within %.1e, ∂L/∂F within %.1e of the CPU's", soft, batch, ez, eg)
			if ez > 1e-13 || eg > 1e-13 {
				t.Errorf("soft %v, batch %d: Z %.1e, ∂L/∂F %.1e from the CPU's (tolerance 1e-13)", soft, batch, ez, eg)
			}
			up := 2 * b * dim
			if batch == 0 {
				up += dim * dim // the projector, once per soft
			}
			if d.Up != up || d.Down != 2*b*dim {
				t.Errorf("soft %v, batch %d: %d values up, %d down; want %d and %d", soft, batch, d.Up, d.Down, up, 2*b*dim)
			}
		}
	}
	// A projector written in place goes up again.
	proj := p.text.Projector
	proj.SetSym(2, 5, proj.At(2, 5)+0.125)
	f := fxt.RandDense(rng, b, dim, 1)
	want, _ := Project(f, proj, 0.3)
	d.ResetCounts()
	var got *Projected
	var err error
	withFloat64Device(d, func() { got, err = Project(f, proj, 0.3) })
	if err != nil {
		t.Fatal(err)
	}
	if e := worst(got.Z, want.Z); e > 1e-13 || d.Up != b*dim+dim*dim {
		t.Errorf("a changed projector: Z %.1e from the CPU's, %d values up (want %d)", e, d.Up, b*dim+dim*dim)
	}
}

// TestUpdateDeferred: on a device, UpdateDeferred's result has ∂L/∂F, the
// eigenvalues and the gap counts at once and its loss and basis only after
// finish, which makes them Update's bit for bit; on the CPU finish has
// nothing left to do.
func TestUpdateDeferred(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	p := newAlignProblem(rng, 24, 40, 12, 5, 0.7, 1e-3, false)
	d := &devicetest.Float64Host{Device: kernel.Host}
	deferred, whole := NewAligner(p.text, p.opt), NewAligner(p.text, p.opt)
	for step := range 3 {
		f := fxt.RandDense(rng, 24, 40, 0.1)
		var want, got *Alignment
		var finish func()
		var err error
		withFloat64Device(d, func() {
			if want, err = whole.Update(f); err != nil {
				return
			}
			got, finish, err = deferred.UpdateDeferred(f)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.Basis != nil || got.Loss != 0 {
			t.Fatalf("step %d: basis and loss set before finish", step)
		}
		if !mat.Equal(got.DLdF, want.DLdF) || !slices.Equal(got.Eigvals, want.Eigvals) || got.GuardedGaps != want.GuardedGaps {
			t.Fatalf("step %d: ∂L/∂F, eigenvalues or gap counts differ from Update's", step)
		}
		finish()
		if math.Float64bits(got.Loss) != math.Float64bits(want.Loss) || !mat.Equal(got.Basis, want.Basis) {
			t.Fatalf("step %d: after finish, loss %v and basis differ from Update's %v", step, got.Loss, want.Loss)
		}
	}
	cpu := NewAligner(p.text, p.opt)
	res, finish, err := cpu.UpdateDeferred(p.f)
	if err != nil {
		t.Fatal(err)
	}
	loss := res.Loss
	finish()
	if res.Basis == nil || res.Loss != loss {
		t.Error("on the CPU, UpdateDeferred's result is not whole at once")
	}
}
