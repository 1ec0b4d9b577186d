//go:build cuda && cgo

package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nlpodyssey/spago/ag"
	smat "github.com/nlpodyssey/spago/mat"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
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

// TestDgemmMatchesCPU compares Dgemm (cublasDgemm_v2) with Host's float64
// product for every pair of trans flags, with beta 0 and 1, and the
// product of rank 1 down a matrix's diagonal (ldc = n+1) with which SubTTA
// updates its covariance: within 1e-13 of the largest value (float64 sums
// of up to 37 terms in another order). Too small a buffer is refused.
func TestDgemmMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(23, 24))
	f64s := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		return v
	}
	up := func(v []float64) kernel.Buf {
		return upload(t, d, kernel.Float64Bits(v))
	}
	down := func(b kernel.Buf, n int) []float64 {
		v := make([]float64, n)
		if err := kernel.DownloadFloat64(d, v, b); err != nil {
			t.Fatal(err)
		}
		return v
	}
	near := func(name string, got, want []float64) {
		t.Helper()
		scale, worst := 0.0, 0.0
		for i := range want {
			scale = max(scale, math.Abs(want[i]))
			worst = max(worst, math.Abs(got[i]-want[i]))
		}
		if worst > 1e-13*scale {
			t.Errorf("%s: %.1e from the CPU's, more than 1e-13 of its largest %.1e", name, worst, scale)
		}
	}
	m, n, k := 13, 29, 37
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			for _, beta := range []float64{0, 1} {
				a, b, c := f64s(m*k), f64s(k*n), f64s(m*n)
				lda, ldb := k, n
				if ta {
					lda = m
				}
				if tb {
					ldb = k
				}
				want := append([]float64(nil), c...)
				kernel.Dgemm(ta, tb, m, n, k, 0.75, a, lda, b, ldb, beta, want, n)
				cd := up(c)
				if err := d.Dgemm(ta, tb, m, n, k, 0.75, up(a), lda, up(b), ldb, beta, cd, n); err != nil {
					t.Fatal(err)
				}
				near(fmt.Sprintf("Dgemm transA %v transB %v beta %v", ta, tb, beta), down(cd, m*n), want)
			}
		}
	}
	// The diagonal of an n×n matrix: n rows of one value, n+1 apart.
	sq, ones := f64s(n*n), []float64{}
	for range n {
		ones = append(ones, 1)
	}
	want := append([]float64(nil), sq...)
	kernel.Dgemm(false, false, n, 1, 1, 0.5, ones, 1, ones, 1, 1, want, n+1)
	for i := range n {
		if want[i*(n+1)] != sq[i*(n+1)]+0.5 || i > 0 && want[i*(n+1)-1] != sq[i*(n+1)-1] {
			t.Fatalf("Host's Dgemm down the diagonal: value %d is %g, want %g", i, want[i*(n+1)], sq[i*(n+1)]+0.5)
		}
	}
	sd, od := up(sq), up(ones)
	if err := d.Dgemm(false, false, n, 1, 1, 0.5, od, 1, od, 1, 1, sd, n+1); err != nil {
		t.Fatal(err)
	}
	near("Dgemm down the diagonal", down(sd, n*n), want)
	if err := d.Dgemm(false, false, m, n, k, 1, up(f64s(m*k-1)), k, up(f64s(k*n)), n, 0, up(f64s(m*n)), n); err == nil {
		t.Error("Dgemm with too small an A: no error")
	}

	// SymEigInto leaves a as it is and agrees with SymEig.
	sym := make([]float64, n*n)
	for i := range n {
		for j := range n {
			sym[i*n+j] = sq[i*n+j] + sq[j*n+i]
		}
	}
	ad, vals, vecs := up(sym), up(make([]float64, n)), up(make([]float64, n*n))
	if err := d.SymEigInto(vals, vecs, ad, n); err != nil {
		t.Fatal(err)
	}
	wantV, wantE, err := d.SymEig(sym, n)
	if err != nil {
		t.Fatal(err)
	}
	near("SymEigInto's eigenvalues", down(vals, n), wantV)
	got := down(vecs, n*n)
	for i := range n {
		dot := 0.0
		for k := range n {
			dot += got[i*n+k] * wantE[i*n+k]
		}
		if math.Abs(1-math.Abs(dot)) > 1e-10 {
			t.Errorf("SymEigInto's eigenvector %d: |cos| %v with SymEig's", i, math.Abs(dot))
		}
	}
	near("SymEigInto's input", down(ad, n*n), sym)
}

// TestPromptFeaturesMatchCPU runs TPT's pass through the built-in model's
// text tower on the device: the tower as one op recording for backward
// (autograd.TextTowerOnDevice) with a trainable context, and its backward
// pass to the context; then the same prompts without a tape. The features
// and the context's gradient agree with the CPU's within 1e-4 of the
// largest value (float32 products in another order).
func TestPromptFeaturesMatchCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tok := builtin.Tokenizer()
	var tokens [][]int
	for _, c := range data.CIFAR10Classes {
		ids, err := tok.Tokenize("a photo of a "+c+".", m.Config.Text.ContextLength, true)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, ids)
	}
	ctx, err := m.TokenEmbeddings(tokens[0][1:3])
	if err != nil {
		t.Fatal(err)
	}
	embed := m.Config.EmbedDim
	pass := func() (feat, grad, frozen []float32) {
		ctx.SetRequiresGrad(true)
		f, err := m.PromptFeatures(tokens, ctx)
		if err != nil {
			t.Fatal(err)
		}
		seed := make([]float32, len(tokens)*embed)
		for k := range seed {
			seed[k] = float32(k%7)/3 - 1
		}
		f.AccGrad(smat.NewDense[float32](smat.WithShape(len(tokens), embed), smat.WithBacking(seed)))
		if err := ag.Backward(f); err != nil {
			t.Fatal(err)
		}
		grad = slices.Clone(ctx.Grad().Data().F32())
		ctx.ZeroGrad()
		ctx.SetRequiresGrad(false)
		x, err := m.PromptFeatures(tokens, ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(f.Value().Data().F32()), grad, slices.Clone(x.Value().Data().F32())
	}
	wantF, wantG, wantX := pass()
	var gotF, gotG, gotX []float32
	onDevice(d, func() { gotF, gotG, gotX = pass() })
	check(t, "recorded prompt features", gotF, wantF)
	check(t, "context gradient", gotG, wantG)
	check(t, "prompt features without a tape", gotX, wantX)
}
