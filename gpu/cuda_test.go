//go:build cuda && cgo

package gpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/fixture"
)

// tol bounds the error of a device op against the CPU's, relative to the
// largest value (fixture.RelErr), with TF32 off.
const tol = 1e-4

// openOrSkip opens device 0, or skips the test with the reason there is
// none. Where a device is available, a failing Open fails the test.
func openOrSkip(t *testing.T, o Options) *device {
	t.Helper()
	if ok, why := Available(); !ok {
		t.Skip("gpu: no CUDA device: " + why)
	}
	d, err := open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("%s", d.Name())
	return d
}

func randSlice(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// upload returns v on the device.
func upload(t *testing.T, d *device, v []float32) kernel.Buf {
	t.Helper()
	b, err := d.Alloc(len(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(b, v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	return b
}

// download returns the first n values of b.
func download(t *testing.T, d *device, b kernel.Buf, n int) []float32 {
	t.Helper()
	v := make([]float32, n)
	if err := d.Download(v, b); err != nil {
		t.Fatal(err)
	}
	return v
}

func check(t *testing.T, name string, got, want []float32) {
	t.Helper()
	fixture.CheckRelErr(t, name, got, want, tol)
}

func TestUploadDownload(t *testing.T) {
	d := openOrSkip(t, Options{})
	v := randSlice(rand.New(rand.NewPCG(1, 2)), 1000)
	b := upload(t, d, v)
	got := download(t, d, b.Slice(10, 20), 10)
	for i, x := range got {
		if x != v[10+i] {
			t.Fatalf("value %d of the slice: %g, want %g", i, x, v[10+i])
		}
	}
	if err := d.Upload(b, make([]float32, 1001)); err == nil {
		t.Error("uploading 1001 values into 1000: no error")
	}
	if err := d.Download(make([]float32, 11), b.Slice(0, 10)); err == nil {
		t.Error("downloading 11 values from 10: no error")
	}
}

// TestErrorNamesCall: a CUDA failure is an *Error naming the call.
func TestErrorNamesCall(t *testing.T) {
	d := openOrSkip(t, Options{})
	_, err := d.Alloc(1 << 45) // 128 TiB
	var e *Error
	if !errors.As(err, &e) || e.Call != "cudaMalloc" || e.Code == 0 || !strings.Contains(err.Error(), "cudaMalloc") {
		t.Fatalf("Alloc(2⁴⁵): %v; want a cudaMalloc error", err)
	}
	t.Log(err)
}

// TestGemmMatchesCPU compares the device's GEMM (all four transpositions,
// leading dimensions wider than the rows, beta 0 and 1) with kernel.Gemm.
func TestGemmMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct{ m, n, k, pad int }{{1, 1, 1, 0}, {37, 45, 300, 3}, {64, 768, 768, 0}, {5, 3, 2, 1}} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, beta := range []float32{0, 1} {
				ta, tb := tr[0], tr[1]
				ar, ac := s.m, s.k
				if ta {
					ar, ac = ac, ar
				}
				br, bc := s.k, s.n
				if tb {
					br, bc = bc, br
				}
				lda, ldb, ldc := ac+s.pad, bc+s.pad, s.n+s.pad
				a, b, c := randSlice(rng, ar*lda), randSlice(rng, br*ldb), randSlice(rng, s.m*ldc)
				want := append([]float32(nil), c...)
				kernel.Gemm(ta, tb, s.m, s.n, s.k, 0.5, a, lda, b, ldb, beta, want, ldc)
				cd := upload(t, d, c)
				if err := d.Gemm(ta, tb, s.m, s.n, s.k, 0.5, upload(t, d, a), lda, upload(t, d, b), ldb, beta, cd, ldc); err != nil {
					t.Fatal(err)
				}
				check(t, fmt.Sprintf("Gemm %v %v %v β=%g", s, ta, tb, beta), download(t, d, cd, len(c)), want)
			}
		}
	}
}

// TestGemmBatchedMatchesCPU runs attention's products: per head, the
// sequences' blocks of a q|k|v matrix, a stride of rows apart.
func TestGemmBatchedMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(5, 6))
	batch, n, w, dh := 3, 50, 96, 32
	qkv := randSlice(rng, batch*n*3*w)
	s := make([]float32, batch*n*n)
	kernel.GemmBatched(false, true, batch, n, n, dh, 0.125, qkv, 3*w, n*3*w, qkv[w:], 3*w, n*3*w, 0, s, n, n*n)
	qd := upload(t, d, qkv)
	sd := upload(t, d, make([]float32, len(s)))
	if err := d.GemmBatched(false, true, batch, n, n, dh, 0.125, qd, 3*w, n*3*w, qd.Slice(w, qd.Len()), 3*w, n*3*w, 0, sd, n, n*n); err != nil {
		t.Fatal(err)
	}
	check(t, "GemmBatched Q·Kᵀ", download(t, d, sd, len(s)), s)
	if err := d.GemmBatched(false, true, batch, n, n, dh, 1, qd, 3*w, n*3*w, qd, 3*w, n*3*w, 0, sd, n, 2*n*n); err == nil {
		t.Error("a batch past the end of C: no error")
	}
}

// TestRowwiseMatchesCPU compares every row-wise kernel with its CPU
// function, on rows shorter and longer than a block and in place.
func TestRowwiseMatchesCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(7, 8))
	for _, s := range []struct{ rows, cols int }{{1, 1}, {3, 7}, {50, 50}, {10, 768}, {13, 1024}, {2, 1025}, {4, 3000}, {1300, 96}} {
		n := s.rows * s.cols
		x, g, b := randSlice(rng, n), randSlice(rng, s.cols), randSlice(rng, s.cols)
		for i := range x {
			x[i] = 3*x[i] + 1 // LayerNorm with a mean and a spread
		}
		xd, gd, bd := upload(t, d, x), upload(t, d, g), upload(t, d, b)
		name := fmt.Sprintf("%d×%d", s.rows, s.cols)

		want := make([]float32, n)
		stats := make([]float32, 2*s.rows)
		kernel.LayerNorm(want, x, s.rows, s.cols, g, b, 1e-5, stats[:s.rows], stats[s.rows:])
		yd := upload(t, d, make([]float32, n))
		if err := d.LayerNorm(yd, xd, s.rows, s.cols, gd, bd, 1e-5, nil, nil); err != nil {
			t.Fatal(err)
		}
		check(t, "LayerNorm "+name, download(t, d, yd, n), want)
		sd := upload(t, d, make([]float32, 2*s.rows))
		if err := d.LayerNorm(yd, xd, s.rows, s.cols, gd, bd, 1e-5, sd.Slice(0, s.rows), sd.Slice(s.rows, 2*s.rows)); err != nil {
			t.Fatal(err)
		}
		check(t, "LayerNorm with statistics "+name, download(t, d, yd, n), want)
		check(t, "LayerNorm mean "+name, download(t, d, sd, s.rows), stats[:s.rows])
		check(t, "LayerNorm rstd "+name, download(t, d, sd.Slice(s.rows, 2*s.rows), s.rows), stats[s.rows:])

		// LayerNorm's backward from the statistics: dx, and dγ, dβ
		// (overwritten: the buffer starts with garbage), together and
		// apart.
		dy := randSlice(rng, n)
		dyd := upload(t, d, dy)
		wantDx, wantDp := make([]float32, n), make([]float32, 2*s.cols)
		kernel.LayerNormBackward(wantDx, wantDp[:s.cols], wantDp[s.cols:], dy, x, s.rows, s.cols, g, stats[:s.rows], stats[s.rows:])
		dxd, dpd := upload(t, d, make([]float32, n)), upload(t, d, randSlice(rng, 2*s.cols))
		dgd, dbd := dpd.Slice(0, s.cols), dpd.Slice(s.cols, 2*s.cols)
		if err := d.LayerNormBackward(dxd, dgd, dbd, dyd, xd, s.rows, s.cols, gd, sd.Slice(0, s.rows), sd.Slice(s.rows, 2*s.rows)); err != nil {
			t.Fatal(err)
		}
		check(t, "LayerNormBackward dx "+name, download(t, d, dxd, n), wantDx)
		check(t, "LayerNormBackward dγ "+name, download(t, d, dgd, s.cols), wantDp[:s.cols])
		check(t, "LayerNormBackward dβ "+name, download(t, d, dbd, s.cols), wantDp[s.cols:])
		dxOnly := upload(t, d, make([]float32, n))
		if err := d.LayerNormBackward(dxOnly, nil, nil, dyd, xd, s.rows, s.cols, gd, sd.Slice(0, s.rows), sd.Slice(s.rows, 2*s.rows)); err != nil {
			t.Fatal(err)
		}
		check(t, "LayerNormBackward dx alone "+name, download(t, d, dxOnly, n), wantDx)
		dpOnly := upload(t, d, randSlice(rng, 2*s.cols))
		if err := d.LayerNormBackward(nil, dpOnly.Slice(0, s.cols), dpOnly.Slice(s.cols, 2*s.cols), dyd, xd, s.rows, s.cols, gd, sd.Slice(0, s.rows), sd.Slice(s.rows, 2*s.rows)); err != nil {
			t.Fatal(err)
		}
		check(t, "LayerNormBackward dγ|dβ alone "+name, download(t, d, dpOnly, 2*s.cols), wantDp)

		for _, causal := range []bool{false, true} {
			if causal && s.rows%s.cols != 0 {
				continue
			}
			kernel.Softmax(want, x, s.rows, s.cols, 0.3, causal)
			if err := d.Softmax(yd, xd, s.rows, s.cols, 0.3, causal); err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("Softmax %s causal=%v", name, causal), download(t, d, yd, n), want)

			// Its backward, in place on dy as attention runs it.
			wantDx := make([]float32, n)
			kernel.SoftmaxBackward(wantDx, dy, want, s.rows, s.cols, 0.3)
			dyc := upload(t, d, dy)
			if err := d.SoftmaxBackward(dyc, dyc, yd, s.rows, s.cols, 0.3); err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("SoftmaxBackward %s causal=%v", name, causal), download(t, d, dyc, n), wantDx)
		}

		kernel.QuickGELU(want, x)
		if err := d.QuickGELU(yd, xd, n); err != nil {
			t.Fatal(err)
		}
		check(t, "QuickGELU "+name, download(t, d, yd, n), want)

		kernel.GELU(want, x)
		if err := d.GELU(yd, xd, n); err != nil {
			t.Fatal(err)
		}
		check(t, "GELU "+name, download(t, d, yd, n), want)

		// The slopes, in place on x as the forward pass keeps them.
		wantSlope := make([]float32, n)
		kernel.QuickGELUSlope(want, wantSlope, x)
		xc := upload(t, d, x)
		if err := d.QuickGELUSlope(yd, xc, xc, n); err != nil {
			t.Fatal(err)
		}
		check(t, "QuickGELUSlope y "+name, download(t, d, yd, n), want)
		check(t, "QuickGELUSlope slope "+name, download(t, d, xc, n), wantSlope)
		kernel.GELUSlope(wantSlope, x)
		if err := d.Upload(xc, x); err != nil {
			t.Fatal(err)
		}
		if err := d.GELUSlope(xc, xc, n); err != nil {
			t.Fatal(err)
		}
		check(t, "GELUSlope "+name, download(t, d, xc, n), wantSlope)

		kernel.Mul(want, x, dy)
		if err := d.Mul(yd, xd, dyd, n); err != nil {
			t.Fatal(err)
		}
		check(t, "Mul "+name, download(t, d, yd, n), want)

		kernel.Add(want, x, want)
		if err := d.Add(yd, xd, yd, n); err != nil { // in place, as the residuals
			t.Fatal(err)
		}
		check(t, "Add "+name, download(t, d, yd, n), want) // yd held Mul's result

		for r := range s.rows {
			copy(want[r*s.cols:(r+1)*s.cols], b)
		}
		if err := d.FillRows(yd, s.rows, s.cols, bd); err != nil {
			t.Fatal(err)
		}
		check(t, "FillRows "+name, download(t, d, yd, n), want)

		// In place: LayerNorm and Softmax overwrite their input.
		kernel.Softmax(want, x, s.rows, s.cols, 1, false)
		if err := d.Softmax(xd, xd, s.rows, s.cols, 1, false); err != nil {
			t.Fatal(err)
		}
		check(t, "Softmax in place "+name, download(t, d, xd, n), want)
	}
}

func TestTF32Option(t *testing.T) {
	d := openOrSkip(t, Options{TF32: true})
	if !strings.Contains(d.Name(), "TF32 on") {
		t.Errorf("name %q does not say TF32 is on", d.Name())
	}
	// TF32 keeps 10 bits of mantissa: products within about 1e-2.
	rng := rand.New(rand.NewPCG(9, 10))
	m, n, k := 64, 64, 256
	a, b := randSlice(rng, m*k), randSlice(rng, k*n)
	want := make([]float32, m*n)
	kernel.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
	cd := upload(t, d, make([]float32, m*n))
	if err := d.Gemm(false, false, m, n, k, 1, upload(t, d, a), k, upload(t, d, b), n, 0, cd, n); err != nil {
		t.Fatal(err)
	}
	if e := fixture.RelErr(download(t, d, cd, m*n), want); e > 1e-2 || math.IsNaN(e) {
		t.Errorf("TF32 product: relative error %.2e", e)
	} else {
		t.Logf("TF32 product: relative error %.2e", e)
	}
}

// TestTowerOpsMatchCPU compares the vision tower's data-movement kernels
// (patches, token embedding, strided rows and their inverse, attention
// heads split and merged) with kernel.Host's: they copy or add, so they agree exactly.
func TestTowerOpsMatchCPU(t *testing.T) {
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(11, 12))
	exact := func(name string, got, want []float32) {
		t.Helper()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: value %d is %g, want %g", name, i, got[i], want[i])
			}
		}
	}
	// 3 images of 3×37×35 in 8-pixel patches: 4×4 patches, the last pixels dropped.
	batch, c, h, w, p := 3, 3, 37, 35, 8
	x := randSlice(rng, batch*c*h*w)
	ny := batch * (h / p) * (w / p) * c * p * p
	want := make(kernel.HostBuf, ny)
	if err := kernel.Host.Patches(want, kernel.HostBuf(x), batch, c, h, w, p); err != nil {
		t.Fatal(err)
	}
	yd := upload(t, d, make([]float32, ny))
	if err := d.Patches(yd, upload(t, d, x), batch, c, h, w, p); err != nil {
		t.Fatal(err)
	}
	exact("Patches", download(t, d, yd, ny), want)
	if err := d.Patches(yd, upload(t, d, x[:len(x)-1]), batch, c, h, w, p); err == nil {
		t.Error("Patches from too few pixels: no error")
	}

	grid, width := 16, 24
	pt, cls, pos := randSlice(rng, batch*grid*width), randSlice(rng, width), randSlice(rng, (grid+1)*width)
	n := batch * (grid + 1) * width
	wantT := make(kernel.HostBuf, n)
	if err := kernel.Host.TokenEmbed(wantT, kernel.HostBuf(pt), kernel.HostBuf(cls), kernel.HostBuf(pos), batch, grid, width); err != nil {
		t.Fatal(err)
	}
	td := upload(t, d, make([]float32, n))
	if err := d.TokenEmbed(td, upload(t, d, pt), upload(t, d, cls), upload(t, d, pos), batch, grid, width); err != nil {
		t.Fatal(err)
	}
	exact("TokenEmbed", download(t, d, td, n), wantT)

	wantR := make(kernel.HostBuf, batch*width)
	if err := kernel.Host.StrideRows(wantR, wantT, batch, width, grid+1); err != nil {
		t.Fatal(err)
	}
	rd := upload(t, d, make([]float32, batch*width))
	if err := d.StrideRows(rd, td, batch, width, grid+1); err != nil {
		t.Fatal(err)
	}
	exact("StrideRows", download(t, d, rd, batch*width), wantR)
	wide := randSlice(rng, n)
	wantW := kernel.HostBuf(slices.Clone(wide))
	if err := kernel.Host.SpreadRows(wantW, wantR, batch, width, grid+1); err != nil {
		t.Fatal(err)
	}
	wd := upload(t, d, wide)
	if err := d.SpreadRows(wd, rd, batch, width, grid+1); err != nil {
		t.Fatal(err)
	}
	exact("SpreadRows", download(t, d, wd, n), wantW)

	// A head of 5 values moves one value a thread, one of 8 as two float4.
	tokens, heads := 7, 3
	for _, c := range []struct{ groups, dh int }{{1, 5}, {3, 5}, {1, 8}, {3, 8}} {
		groups, dh := c.groups, c.dh
		n := batch * tokens * groups * heads * dh
		m := randSlice(rng, n)
		wantS := make(kernel.HostBuf, n)
		if err := kernel.Host.SplitHeads(wantS, kernel.HostBuf(m), batch, tokens, groups, heads, dh); err != nil {
			t.Fatal(err)
		}
		sd, md := upload(t, d, make([]float32, n)), upload(t, d, m)
		if err := d.SplitHeads(sd, md, batch, tokens, groups, heads, dh); err != nil {
			t.Fatal(err)
		}
		exact(fmt.Sprintf("SplitHeads, %d groups of %d", groups, dh), download(t, d, sd, n), wantS)
		back := upload(t, d, make([]float32, n))
		if err := d.MergeHeads(back, sd, batch, tokens, groups, heads, dh); err != nil {
			t.Fatal(err)
		}
		exact(fmt.Sprintf("MergeHeads, %d groups of %d", groups, dh), download(t, d, back, n), m)
	}
}

// TestUploadRing makes the pinned ring that uploads go through hold only
// two uploads at a time, and queues many with no device work between them,
// the last larger than the ring, in parts:
// each region is written again only after the copy that read it ran (on
// the stand-in CUDA the copies run late, when something waits for them,
// so one written too early would give wrong values).
func TestUploadRing(t *testing.T) {
	defer func(n, p int) { stageMin, stagePart = n, p }(stageMin, stagePart)
	// The last upload goes in four parts, the first of which grows the ring.
	stageMin, stagePart = 1024, 300
	d := openOrSkip(t, Options{})
	rng := rand.New(rand.NewPCG(13, 14))
	var vs [][]float32
	for i := range 9 {
		vs = append(vs, randSlice(rng, 100+i)) // 512 bytes of the ring each
	}
	vs = append(vs, randSlice(rng, 1000)) // larger than the ring: in parts
	// Allocated first: cudaMalloc waits for the queued copies.
	var bs []kernel.Buf
	for _, v := range vs {
		b, err := d.Alloc(len(v))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Free(b)
		bs = append(bs, b)
	}
	for i, v := range vs {
		if err := d.Upload(bs[i], v); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range vs {
		got := download(t, d, bs[i], len(v))
		for j := range v {
			if got[j] != v[j] {
				t.Fatalf("upload %d, value %d: %g on the device, %g uploaded", i, j, got[j], v[j])
			}
		}
	}
}

// TestPrecisionMatchesCPU runs products and clip-tiny's features with the
// operands rounded to BF16, FP16 and TF32, against the CPU's float32. The
// bounds are relative to the largest value: a product of K terms with
// both operands rounded to p bits of mantissa errs by about 2^-p per term,
// in random directions; bf16 (8 bits) 1e-2, fp16 and tf32 (11 bits)
// 2e-3. The features pass through twelve such products and the
// normalisations between: 2e-2 for bf16, 5e-3 for the others (the
// stand-in CUDA, which rounds the operands alike, gives 4.5e-3 for bf16,
// 4.8e-4 for fp16 and 4.9e-4 for tf32). In bf16 and fp16 the product also
// runs from 16-bit operands in memory (ToHalf, GemmHalf) within the same
// bound, and the features' blocks must take that path: four products a
// block, q|k|v's and c_fc's into 16 bits, and attention's two products
// and softmax in 16 bits.
func TestPrecisionMatchesCPU(t *testing.T) {
	for _, c := range []struct {
		prec       Precision
		gemm, feat float64
	}{{BF16, 1e-2, 2e-2}, {FP16, 2e-3, 5e-3}, {TF32, 2e-3, 5e-3}} {
		t.Run(c.prec.String(), func(t *testing.T) {
			d := openOrSkip(t, Options{Precision: c.prec})
			rng := rand.New(rand.NewPCG(15, 16))
			m, n, k := 64, 48, 256
			a, b := randSlice(rng, m*k), randSlice(rng, k*n)
			want := make([]float32, m*n)
			kernel.Gemm(false, true, m, n, k, 1, a, k, b, k, 0, want, n)
			cd := upload(t, d, make([]float32, m*n))
			if err := d.Gemm(false, true, m, n, k, 1, upload(t, d, a), k, upload(t, d, b), k, 0, cd, n); err != nil {
				t.Fatal(err)
			}
			e := fixture.RelErr(download(t, d, cd, m*n), want)
			t.Logf("%v product: relative error %.2e (bound %.0e)", c.prec, e, c.gemm)
			if e > c.gemm || e == 0 || math.IsNaN(e) {
				t.Errorf("%v product: relative error %.2e, want in (0, %.0e]", c.prec, e, c.gemm)
			}
			// The batched product, as attention runs it.
			if err := d.GemmBatched(false, true, 2, m/2, n, k, 1, upload(t, d, a), k, m/2*k, upload(t, d, b), k, 0, 0, cd, n, m/2*n); err != nil {
				t.Fatal(err)
			}
			e = fixture.RelErr(download(t, d, cd, m*n), want)
			if e > c.gemm || e == 0 || math.IsNaN(e) {
				t.Errorf("%v batched product: relative error %.2e, want in (0, %.0e]", c.prec, e, c.gemm)
			}
			// bf16 and fp16: the same product from 16-bit operands in
			// memory (kernel.Half), as a forward pass's linear layers run.
			if d.HalfFormat() != kernel.HalfNone {
				a16, b16 := alloc16(t, d, m*k), alloc16(t, d, k*n)
				if err := d.ToHalf(a16, upload(t, d, a), m*k); err != nil {
					t.Fatal(err)
				}
				if err := d.ToHalf(b16, upload(t, d, b), k*n); err != nil {
					t.Fatal(err)
				}
				if err := d.GemmHalf(false, true, m, n, k, 1, a16, k, b16, k, 0, cd, n); err != nil {
					t.Fatal(err)
				}
				e = fixture.RelErr(download(t, d, cd, m*n), want)
				t.Logf("%v product of 16-bit operands: relative error %.2e (bound %.0e)", c.prec, e, c.gemm)
				if e > c.gemm || e == 0 || math.IsNaN(e) {
					t.Errorf("%v product of 16-bit operands: relative error %.2e, want in (0, %.0e]", c.prec, e, c.gemm)
				}
			}
			before, beforeO, beforeB, beforeS := halfGemms.Load(), halfOutGemms.Load(), halfBatchedGemms.Load(), halfSoftmaxes.Load()
			img, wantImg := tinyImageFeatures(t, d)
			// bf16 and fp16 take 16-bit operands in the blocks' four
			// linear products (q|k|v's and c_fc's with a 16-bit output) and
			// attention's two, and write P in 16 bits (clip-tiny: 2
			// blocks), tf32 none.
			ops := [4]int64{halfGemms.Load() - before, halfOutGemms.Load() - beforeO, halfBatchedGemms.Load() - beforeB, halfSoftmaxes.Load() - beforeS}
			wantOps := [4]int64{2 * 4, 2 * 2, 2 * 2, 2}
			if c.prec == TF32 {
				wantOps = [4]int64{}
			}
			if ops != wantOps {
				t.Errorf("%v: %d products (%d of them with a 16-bit output), %d batched products and %d softmaxes with 16-bit operands, want %d (%d), %d, %d",
					c.prec, ops[0], ops[1], ops[2], ops[3], wantOps[0], wantOps[1], wantOps[2], wantOps[3])
			}
			t.Logf("%v: %d products (%d of them with a 16-bit output), %d batched products and %d softmaxes with 16-bit operands", c.prec, ops[0], ops[1], ops[2], ops[3])
			e = fixture.RelErr(img, wantImg)
			t.Logf("%v clip-tiny image features: relative error %.2e (bound %.0e)", c.prec, e, c.feat)
			if e > c.feat || math.IsNaN(e) {
				t.Errorf("%v clip-tiny image features: relative error %.2e, more than %.0e", c.prec, e, c.feat)
			}
		})
	}
}
