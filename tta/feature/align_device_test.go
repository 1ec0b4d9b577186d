package feature

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/symeig"
	"github.com/subtta/subtta/tta/internal/fxt"
)

// hostFloat64 is a kernel.Float64Device on kernel.Host: Host's Dgemm and
// internal/symeig's decomposition, counting the float64 values copied each
// way and the decompositions. It is what the device path of the alignment
// runs on in these tests; package gpu's run it with cuBLAS and cuSOLVER.
type hostFloat64 struct {
	kernel.Device
	up, down, eigs int // float64 values, decompositions
}

func (h *hostFloat64) Upload(dst kernel.Buf, src []float32) error {
	h.up += len(src) / 2
	return h.Device.Upload(dst, src)
}

func (h *hostFloat64) Download(dst []float32, src kernel.Buf) error {
	h.down += len(dst) / 2
	return h.Device.Download(dst, src)
}

func (h *hostFloat64) Dgemm(transA, transB bool, m, n, k int, alpha float64, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float64, c kernel.Buf, ldc int) error {
	return h.Device.(interface {
		Dgemm(bool, bool, int, int, int, float64, kernel.Buf, int, kernel.Buf, int, float64, kernel.Buf, int) error
	}).Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func (h *hostFloat64) SymEigInto(values, vectors, a kernel.Buf, n int) error {
	h.eigs++
	full := make([]float64, n*n)
	if err := h.Device.Download(kernel.Float64Bits(full), a); err != nil {
		return err
	}
	dec, err := symeig.Factorize(mat.NewSymDense(n, full))
	if err != nil {
		return err
	}
	if err := h.Device.Upload(values, kernel.Float64Bits(dec.Values)); err != nil {
		return err
	}
	return h.Device.Upload(vectors, kernel.Float64Bits(mat.DenseCopyOf(dec.Vectors).RawMatrix().Data))
}

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
		d := &hostFloat64{Device: kernel.Host}
		n := 0
		for k := range x.Batches("b", "F1") {
			b := fmt.Sprintf("b%d.", k)
			f := x.Dense(b + "F1")
			want, err := cpu.Update(f)
			if err != nil {
				t.Fatal(err)
			}
			var got *Alignment
			d.up, d.down, d.eigs = 0, 0, 0
			withFloat64Device(d, func() { got, err = dev.Update(f) })
			if err != nil {
				t.Fatal(err)
			}
			compare(t, b, got, want)
			fxt.Compare(t, b+"L_align (device)", []float64{got.Loss}, []float64{x.Scalar(b + "L_align")}, 1e-9, fxt.Rel)
			rows, dim := f.Dims()
			r := ts.Rank()
			if n > 0 { // the first step also uploads Σ_T, P_T and the ones
				if up, down := rows*dim+dim*r, dim+2*r*dim+rows*dim; d.up != up || d.down != down || d.eigs != 1 {
					t.Errorf("%s: %d values up, %d down, %d decompositions; want %d (Fc, K), %d (λ, V_U, M, ∂L/∂F), 1",
						b, d.up, d.down, d.eigs, up, down)
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
			d := &hostFloat64{Device: kernel.Host}
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
