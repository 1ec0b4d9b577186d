//go:build cuda && cgo

package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
)

// TestFusedMatchesCPU runs the fused row-wise kernels against
// kernel.Host's: the bias with either activation, keeping nothing, the
// input or the slope, in place as the blocks run them (the kept values
// over x, or y over x), or multiplying a gradient by the slope, with and
// without a bias; LayerNorm writing the residual stream with a bias
// (LayerNormResidual) and its backward pass adding a residual's gradient
// (LayerNormBackwardResidual), on rows that take a group of threads and
// rows that take a block; and q|k|v split into heads with its bias.
func TestFusedMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range []struct{ rows, cols int }{{1, 1}, {3, 7}, {50, 96}, {13, 1024}} {
		n := s.rows * s.cols
		x, b, g := randSlice(rng, n), randSlice(rng, s.cols), randSlice(rng, n)
		for i := range x {
			x[i] *= 3
		}
		for _, bias := range []bool{true, false} {
			var hb, db kernel.Buf
			if bias {
				hb, db = kernel.HostBuf(b), upload(t, d, b)
			}
			for _, act := range []kernel.Activation{kernel.QuickGELUActivation, kernel.GELUActivation} {
				for _, keep := range []kernel.Keep{kernel.KeepNone, kernel.KeepInput, kernel.KeepSlope, kernel.MulSlope} {
					name := fmt.Sprintf("%d×%d bias=%v act=%d keep=%d", s.rows, s.cols, bias, act, keep)
					aux0 := x // kept over x
					if keep == kernel.MulSlope {
						aux0 = g // a gradient, multiplied in place
					}
					wantY, wantAux := make([]float32, n), append([]float32(nil), aux0...)
					if err := kernel.Host.BiasActivation(kernel.HostBuf(wantY), kernel.HostBuf(wantAux), kernel.HostBuf(x), s.rows, s.cols, hb, act, keep); err != nil {
						t.Fatal(err)
					}
					xd, yd := upload(t, d, x), upload(t, d, make([]float32, n))
					aux := xd
					switch keep {
					case kernel.KeepNone:
						yd, aux = xd, nil // in place, as a pass without a tape runs it
					case kernel.MulSlope:
						aux = upload(t, d, g)
					}
					if err := d.BiasActivation(yd, aux, xd, s.rows, s.cols, db, act, keep); err != nil {
						t.Fatal(err)
					}
					check(t, "BiasActivation y "+name, download(t, d, yd, n), wantY)
					if keep != kernel.KeepNone {
						check(t, "BiasActivation kept "+name, download(t, d, aux, n), wantAux)
					}
				}
			}
		}
	}

	// LayerNorm writing the residual stream x + bias: y and the statistics
	// as LayerNorm's, res bit for bit (the same float32 sum); its backward
	// pass adding res to dx, with and without the parameters' gradients.
	for _, s := range []struct{ rows, cols int }{{1, 1}, {3, 7}, {50, 96}, {13, 1024}, {5, 1500}} {
		n := s.rows * s.cols
		x, gamma, beta, b := randSlice(rng, n), randSlice(rng, s.cols), randSlice(rng, s.cols), randSlice(rng, s.cols)
		dy, res := randSlice(rng, n), randSlice(rng, n)
		xd, gd, bd := upload(t, d, x), upload(t, d, gamma), upload(t, d, beta)
		for _, bias := range []bool{true, false} {
			var hb, db kernel.Buf
			if bias {
				hb, db = kernel.HostBuf(b), upload(t, d, b)
			}
			name := fmt.Sprintf("%d×%d bias=%v", s.rows, s.cols, bias)
			want, wantRes, wantStats := make([]float32, n), make([]float32, n), make([]float32, 2*s.rows)
			ws := kernel.HostBuf(wantStats)
			if err := kernel.Host.LayerNormResidual(kernel.HostBuf(want), kernel.HostBuf(x), s.rows, s.cols, kernel.HostBuf(gamma), kernel.HostBuf(beta), 1e-5,
				ws.Slice(0, s.rows), ws.Slice(s.rows, 2*s.rows), kernel.HostBuf(wantRes), hb); err != nil {
				t.Fatal(err)
			}
			yd, rd, sd := upload(t, d, make([]float32, n)), upload(t, d, make([]float32, n)), upload(t, d, make([]float32, 2*s.rows))
			if err := d.LayerNormResidual(yd, xd, s.rows, s.cols, gd, bd, 1e-5, sd.Slice(0, s.rows), sd.Slice(s.rows, 2*s.rows), rd, db); err != nil {
				t.Fatal(err)
			}
			check(t, "LayerNormResidual y "+name, download(t, d, yd, n), want)
			check(t, "LayerNormResidual statistics "+name, download(t, d, sd, 2*s.rows), wantStats)
			for i, v := range download(t, d, rd, n) {
				if v != wantRes[i] {
					t.Fatalf("LayerNormResidual res %s: value %d is %g, want %g", name, i, v, wantRes[i])
				}
			}
		}
		stats := make([]float32, 2*s.rows)
		st := kernel.HostBuf(stats)
		if err := kernel.Host.LayerNorm(kernel.HostBuf(make([]float32, n)), kernel.HostBuf(x), s.rows, s.cols, kernel.HostBuf(gamma), kernel.HostBuf(beta), 1e-5,
			st.Slice(0, s.rows), st.Slice(s.rows, 2*s.rows)); err != nil {
			t.Fatal(err)
		}
		sd := upload(t, d, stats)
		for _, params := range []bool{false, true} {
			name := fmt.Sprintf("%d×%d parameters=%v", s.rows, s.cols, params)
			want, wantG := make([]float32, n), make([]float32, 2*s.cols)
			var hg, hb, dg, db kernel.Buf
			if params {
				wg := kernel.HostBuf(wantG)
				hg, hb = wg.Slice(0, s.cols), wg.Slice(s.cols, 2*s.cols)
				pd := upload(t, d, make([]float32, 2*s.cols))
				dg, db = pd.Slice(0, s.cols), pd.Slice(s.cols, 2*s.cols)
			}
			if err := kernel.Host.LayerNormBackwardResidual(kernel.HostBuf(want), hg, hb, kernel.HostBuf(dy), kernel.HostBuf(x), kernel.HostBuf(res), s.rows, s.cols,
				kernel.HostBuf(gamma), st.Slice(0, s.rows), st.Slice(s.rows, 2*s.rows)); err != nil {
				t.Fatal(err)
			}
			dxd := upload(t, d, res) // dx written over res, which it may be
			if err := d.LayerNormBackwardResidual(dxd, dg, db, upload(t, d, dy), xd, dxd, s.rows, s.cols, gd, sd.Slice(0, s.rows), sd.Slice(s.rows, 2*s.rows)); err != nil {
				t.Fatal(err)
			}
			check(t, "LayerNormBackwardResidual dx "+name, download(t, d, dxd, n), want)
			if params {
				check(t, "LayerNormBackwardResidual dγ "+name, download(t, d, dg, s.cols), wantG[:s.cols])
				check(t, "LayerNormBackwardResidual dβ "+name, download(t, d, db, s.cols), wantG[s.cols:])
			}
		}
	}
	// q|k|v split into heads with its bias added: heads of 10 values one
	// value a thread, of 12 four (a float4).
	const batch, tokens, groups, heads = 2, 7, 3, 4
	for _, hd := range []int{10, 12} {
		splitHeadsBias(t, d, rng, batch, tokens, groups, heads, hd)
	}

	// Shapes that do not fit are errors.
	small := upload(t, d, make([]float32, 4))
	if err := d.LayerNormResidual(small, small, 2, 2, small, small, 1e-5, nil, nil, small.Slice(0, 3), nil); err == nil {
		t.Error("LayerNormResidual of 2×2 into a residual of 3 values: no error")
	}
	if err := d.LayerNormBackwardResidual(nil, nil, nil, small, small, small, 2, 2, small, small, small); err == nil {
		t.Error("LayerNormBackwardResidual without dx: no error")
	}
	if err := d.BiasActivation(small, nil, small, 2, 2, small.Slice(0, 1), kernel.GELUActivation, kernel.KeepNone); err == nil {
		t.Error("BiasActivation with a bias of 1 value for 2 columns: no error")
	}
}

// splitHeadsBias checks SplitHeadsBias against the CPU's, with and without
// the bias, for heads of hd values.
func splitHeadsBias(t *testing.T, d *device, rng *rand.Rand, batch, tokens, groups, heads, hd int) {
	t.Helper()
	n, row := batch*tokens*groups*heads*hd, groups*heads*hd
	qkv, b := randSlice(rng, n), randSlice(rng, row)
	for _, bias := range []bool{true, false} {
		var hb, db kernel.Buf
		if bias {
			hb, db = kernel.HostBuf(b), upload(t, d, b)
		}
		want := make([]float32, n)
		if err := kernel.Host.SplitHeadsBias(kernel.HostBuf(want), kernel.HostBuf(qkv), hb, batch, tokens, groups, heads, hd); err != nil {
			t.Fatal(err)
		}
		yd := upload(t, d, make([]float32, n))
		if err := d.SplitHeadsBias(yd, upload(t, d, qkv), db, batch, tokens, groups, heads, hd); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("SplitHeadsBias heads of %d, bias=%v", hd, bias), download(t, d, yd, n), want)
	}
}
