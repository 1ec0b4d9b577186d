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
