package kernel

import (
	"math/rand/v2"
	"testing"
)

// TestHostLayerNormBackward: Host's LayerNormBackward gives the function's
// bits, with dgamma and dbeta overwritten rather than added to, and
// skips the outputs that are nil.
func TestHostLayerNormBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 2))
	rows, cols := 9, 24
	x, dy := to32(randVec(rng, rows*cols, 1, 2)), to32(randVec(rng, rows*cols, 0, 1))
	g, b := to32(randVec(rng, cols, 1, 0.1)), to32(randVec(rng, cols, 0, 0.1))
	y, mean, rstd := make([]float32, rows*cols), make([]float32, rows), make([]float32, rows)
	LayerNorm(y, x, rows, cols, g, b, 1e-5, mean, rstd)
	wantDx, wantDg, wantDb := make([]float32, rows*cols), make([]float32, cols), make([]float32, cols)
	LayerNormBackward(wantDx, wantDg, wantDb, dy, x, rows, cols, g, mean, rstd)

	dx, dg, db := HostBuf(make([]float32, rows*cols)), HostBuf(to32(randVec(rng, cols, 0, 1))), HostBuf(to32(randVec(rng, cols, 0, 1)))
	if err := Host.LayerNormBackward(dx, dg, db, HostBuf(dy), HostBuf(x), rows, cols, HostBuf(g), HostBuf(mean), HostBuf(rstd)); err != nil {
		t.Fatal(err)
	}
	same := func(name string, got, want []float32) {
		t.Helper()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s[%d] = %g, want %g", name, i, got[i], want[i])
			}
		}
	}
	same("dx", dx, wantDx)
	same("dgamma", dg, wantDg)
	same("dbeta", db, wantDb)
	dx2 := HostBuf(make([]float32, rows*cols))
	if err := Host.LayerNormBackward(dx2, nil, nil, HostBuf(dy), HostBuf(x), rows, cols, HostBuf(g), HostBuf(mean), HostBuf(rstd)); err != nil {
		t.Fatal(err)
	}
	same("dx alone", dx2, wantDx)
	if err := Host.LayerNormBackward(nil, dg, nil, HostBuf(dy), HostBuf(x), rows, cols, HostBuf(g), HostBuf(mean), HostBuf(rstd)); err == nil {
		t.Error("dgamma without dbeta: no error")
	}
}

// TestHostLayerNormResidual: Host's LayerNormResidual gives LayerNorm's
// bits and res = x + bias (x itself without a bias), also written over x;
// LayerNormBackwardResidual gives LayerNormBackward's bits plus res, also
// written over res; either refuses a missing buffer.
func TestHostLayerNormResidual(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 3))
	rows, cols := 5, 300
	n := rows * cols
	x, dy, r := to32(randVec(rng, n, 1, 2)), to32(randVec(rng, n, 0, 1)), to32(randVec(rng, n, 0, 1))
	g, b, bias := to32(randVec(rng, cols, 1, 0.1)), to32(randVec(rng, cols, 0, 0.1)), to32(randVec(rng, cols, 0, 1))
	wantY, mean, rstd := make([]float32, n), make([]float32, rows), make([]float32, rows)
	LayerNorm(wantY, x, rows, cols, g, b, 1e-5, mean, rstd)
	same := func(name string, got, want []float32) {
		t.Helper()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s[%d] = %g, want %g", name, i, got[i], want[i])
			}
		}
	}
	for _, c := range []struct {
		name   string
		bias   Buf
		overX  bool
		wantFn func(i int) float32
	}{
		{"bias", HostBuf(bias), false, func(i int) float32 { return x[i] + bias[i%cols] }},
		{"no bias", nil, false, func(i int) float32 { return x[i] }},
		{"bias, over x", HostBuf(bias), true, func(i int) float32 { return x[i] + bias[i%cols] }},
	} {
		xs := HostBuf(append([]float32(nil), x...))
		y, res, m, q := HostBuf(make([]float32, n)), HostBuf(make([]float32, n)), HostBuf(make([]float32, rows)), HostBuf(make([]float32, rows))
		if c.overX {
			res = xs
		}
		if err := Host.LayerNormResidual(y, xs, rows, cols, HostBuf(g), HostBuf(b), 1e-5, m, q, res, c.bias); err != nil {
			t.Fatal(err)
		}
		same(c.name+": y", y, wantY)
		same(c.name+": mean", m, mean)
		same(c.name+": rstd", q, rstd)
		want := make([]float32, n)
		for i := range want {
			want[i] = c.wantFn(i)
		}
		same(c.name+": res", res, want)
	}

	wantDx, wantDg, wantDb := make([]float32, n), make([]float32, cols), make([]float32, cols)
	LayerNormBackward(wantDx, wantDg, wantDb, dy, x, rows, cols, g, mean, rstd)
	for i := range wantDx {
		wantDx[i] += r[i]
	}
	for _, over := range []bool{false, true} {
		dx, res := HostBuf(make([]float32, n)), HostBuf(append([]float32(nil), r...))
		if over {
			dx = res
		}
		dg, db := HostBuf(make([]float32, cols)), HostBuf(make([]float32, cols))
		if err := Host.LayerNormBackwardResidual(dx, dg, db, HostBuf(dy), HostBuf(x), res, rows, cols, HostBuf(g), HostBuf(mean), HostBuf(rstd)); err != nil {
			t.Fatal(err)
		}
		same("backward dx", dx, wantDx)
		same("backward dgamma", dg, wantDg)
		same("backward dbeta", db, wantDb)
	}
	if err := Host.LayerNormResidual(HostBuf(make([]float32, n)), HostBuf(x), rows, cols, HostBuf(g), HostBuf(b), 1e-5, nil, nil, nil, nil); err == nil {
		t.Error("LayerNormResidual without res: no error")
	}
	if err := Host.LayerNormBackwardResidual(nil, nil, nil, HostBuf(dy), HostBuf(x), HostBuf(r), rows, cols, HostBuf(g), HostBuf(mean), HostBuf(rstd)); err == nil {
		t.Error("LayerNormBackwardResidual without dx: no error")
	}
}

// TestHostBiasActivationMulSlope: MulSlope gives the activation KeepSlope
// gives and multiplies the gradient by the slope KeepSlope keeps, bit for
// bit, for both activations.
func TestHostBiasActivationMulSlope(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 4))
	rows, cols := 6, 50
	n := rows * cols
	x, bias, grad := to32(randVec(rng, n, 0, 3)), to32(randVec(rng, cols, 0, 1)), to32(randVec(rng, n, 0, 1))
	for _, act := range []Activation{QuickGELUActivation, GELUActivation} {
		wantY, slope := HostBuf(make([]float32, n)), HostBuf(make([]float32, n))
		if err := Host.BiasActivation(wantY, slope, HostBuf(x), rows, cols, HostBuf(bias), act, KeepSlope); err != nil {
			t.Fatal(err)
		}
		y, g := HostBuf(make([]float32, n)), HostBuf(append([]float32(nil), grad...))
		if err := Host.BiasActivation(y, g, HostBuf(x), rows, cols, HostBuf(bias), act, MulSlope); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if y[i] != wantY[i] || g[i] != grad[i]*slope[i] {
				t.Fatalf("activation %d, value %d: y %g and gradient %g, want %g and %g", act, i, y[i], g[i], wantY[i], grad[i]*slope[i])
			}
		}
	}
}
