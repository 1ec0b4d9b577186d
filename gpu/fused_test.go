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
// over x, or y over x), with and without a bias; and the bias with the
// residual, y over the residual; and q|k|v split into heads with its bias.
func TestFusedMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range []struct{ rows, cols int }{{1, 1}, {3, 7}, {50, 96}, {13, 1024}} {
		n := s.rows * s.cols
		x, b, res := randSlice(rng, n), randSlice(rng, s.cols), randSlice(rng, n)
		for i := range x {
			x[i] *= 3
		}
		for _, bias := range []bool{true, false} {
			var hb, db kernel.Buf
			if bias {
				hb, db = kernel.HostBuf(b), upload(t, d, b)
			}
			for _, act := range []kernel.Activation{kernel.QuickGELUActivation, kernel.GELUActivation} {
				for _, keep := range []kernel.Keep{kernel.KeepNone, kernel.KeepInput, kernel.KeepSlope} {
					name := fmt.Sprintf("%d×%d bias=%v act=%d keep=%d", s.rows, s.cols, bias, act, keep)
					wantY, wantAux := make([]float32, n), append([]float32(nil), x...)
					if err := kernel.Host.BiasActivation(kernel.HostBuf(wantY), kernel.HostBuf(wantAux), kernel.HostBuf(x), s.rows, s.cols, hb, act, keep); err != nil {
						t.Fatal(err)
					}
					xd, yd := upload(t, d, x), upload(t, d, make([]float32, n))
					aux := xd
					if keep == kernel.KeepNone {
						yd, aux = xd, nil // in place, as a pass without a tape runs it
					}
					if err := d.BiasActivation(yd, aux, xd, s.rows, s.cols, db, act, keep); err != nil {
						t.Fatal(err)
					}
					check(t, "BiasActivation y "+name, download(t, d, yd, n), wantY)
					if keep != kernel.KeepNone {
						check(t, "BiasActivation kept "+name, download(t, d, xd, n), wantAux)
					}
				}
			}
			name := fmt.Sprintf("%d×%d bias=%v", s.rows, s.cols, bias)
			want := make([]float32, n)
			if err := kernel.Host.BiasResidual(kernel.HostBuf(want), kernel.HostBuf(x), hb, kernel.HostBuf(res), s.rows, s.cols); err != nil {
				t.Fatal(err)
			}
			xd, rd := upload(t, d, x), upload(t, d, res)
			if err := d.BiasResidual(rd, xd, db, rd, s.rows, s.cols); err != nil {
				t.Fatal(err)
			}
			check(t, "BiasResidual "+name, download(t, d, rd, n), want)
		}
	}
	// q|k|v split into heads with its bias added.
	const batch, tokens, groups, heads, hd = 2, 7, 3, 4, 10
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
		check(t, fmt.Sprintf("SplitHeadsBias bias=%v", bias), download(t, d, yd, n), want)
	}

	// Shapes that do not fit are errors.
	small := upload(t, d, make([]float32, 4))
	if err := d.BiasResidual(small, small, nil, small, 2, 3); err == nil {
		t.Error("BiasResidual of 2×3 on buffers of 4 values: no error")
	}
	if err := d.BiasActivation(small, nil, small, 2, 2, small.Slice(0, 1), kernel.GELUActivation, kernel.KeepNone); err == nil {
		t.Error("BiasActivation with a bias of 1 value for 2 columns: no error")
	}
}
