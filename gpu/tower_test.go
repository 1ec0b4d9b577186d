//go:build cuda && cgo

package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
)

// TestGatherRowsMatchesCPU compares GatherRows with kernel.Host's, value
// for value (a copy and one float32 sum each): the text tower's embeddings
// (token rows, context rows for negative ids, the positional embedding
// added row i mod period) and a plain gather (the end-of-text rows); an
// index outside its matrix gives NaN on the device (the host refuses it).
func TestGatherRowsMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(21, 22))
	vocab, nctx, cols, L, batch := 50, 3, 20, 7, 4
	n := batch * L
	table, ctx, pos := randSlice(rng, vocab*cols), randSlice(rng, nctx*cols), randSlice(rng, L*cols)
	idx := make([]float32, n)
	for i := range idx {
		idx[i] = float32(rng.IntN(vocab))
		if i%L >= 1 && i%L <= nctx {
			idx[i] = float32(-1 - (i%L - 1))
		}
	}
	exact := func(name string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: value %d is %g, want %g", name, i, got[i], want[i])
			}
		}
	}
	want := make(kernel.HostBuf, n*cols)
	if err := kernel.Host.GatherRows(want, kernel.HostBuf(table), kernel.HostBuf(ctx), kernel.HostBuf(idx), n, cols, kernel.HostBuf(pos), L); err != nil {
		t.Fatal(err)
	}
	yd := upload(t, d, make([]float32, n*cols))
	td, cd, id, pd := upload(t, d, table), upload(t, d, ctx), upload(t, d, idx), upload(t, d, pos)
	if err := d.GatherRows(yd, td, cd, id, n, cols, pd, L); err != nil {
		t.Fatal(err)
	}
	exact("GatherRows with a context and positions", download(t, d, yd, n*cols), want)

	pool := []float32{6, 9, 20, 27}
	wantP := make(kernel.HostBuf, len(pool)*cols)
	if err := kernel.Host.GatherRows(wantP, want, nil, kernel.HostBuf(pool), len(pool), cols, nil, 0); err != nil {
		t.Fatal(err)
	}
	pd2 := upload(t, d, make([]float32, len(pool)*cols))
	if err := d.GatherRows(pd2, yd, nil, upload(t, d, pool), len(pool), cols, nil, 0); err != nil {
		t.Fatal(err)
	}
	exact("GatherRows of pooled rows", download(t, d, pd2, len(pool)*cols), wantP)

	bad := []float32{float32(n)} // one row past the end
	if err := kernel.Host.GatherRows(make(kernel.HostBuf, cols), want, nil, kernel.HostBuf(bad), 1, cols, nil, 0); err == nil {
		t.Error("Host.GatherRows of a row outside the matrix: no error")
	}
	if err := d.GatherRows(pd2, yd, nil, upload(t, d, bad), 1, cols, nil, 0); err != nil {
		t.Fatal(err)
	}
	if v := download(t, d, pd2, cols); !math.IsNaN(float64(v[0])) {
		t.Errorf("GatherRows of a row outside the matrix gives %g, want NaN", v[0])
	}
	if err := d.GatherRows(yd, td, nil, id, n, cols, pd, 0); err == nil {
		t.Error("GatherRows with positions every 0 rows: no error")
	}
}
