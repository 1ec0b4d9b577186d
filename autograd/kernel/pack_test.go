package kernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// packRef is the packed layout spelled out one element at a time: K blocks
// of kc rows, each cut into column panels of nr columns stored k-major,
// columns past n zero.
func packRef(nr int, trans bool, k, n int, b []float32, ldb int) []float32 {
	npad := (n + nr - 1) / nr * nr
	out := make([]float32, k*npad)
	for k0 := 0; k0 < k; k0 += kc {
		kb := min(kc, k-k0)
		for j0 := 0; j0 < npad; j0 += nr {
			for kk := 0; kk < kb; kk++ {
				for j := 0; j < nr; j++ {
					var v float32
					if r, c := k0+kk, j0+j; c < n {
						if trans {
							v = b[c*ldb+r]
						} else {
							v = b[r*ldb+c]
						}
					}
					out[k0*npad+j0*kb+kk*nr+j] = v
				}
			}
		}
	}
	return out
}

type packCase struct {
	k, n   int
	ldb    int // 0: tight (k when trans, n otherwise)
	offset int // elements of b before op(B)'s first element
}

// packCases crosses sizes around multiples of 8, of the panel widths (16,
// 32) and of kc (256), plus the ViT shapes, with tight and loose leading
// dimensions and offset starts. The cases of k·n ≥ parallelPack go through
// PackB's parallel path.
func packCases() []packCase {
	sizes := []int{1, 7, 8, 9, 15, 16, 17, 50, 64, 255, 256, 257, 768}
	var cases []packCase
	for _, k := range sizes {
		for _, n := range sizes {
			if k*n > 257*257 {
				continue // the big ones come below, once each
			}
			cases = append(cases, packCase{k: k, n: n}, packCase{k: k, n: n, ldb: -1, offset: 3})
		}
	}
	return append(cases,
		packCase{k: 768, n: 50},
		packCase{k: 50, n: 768, ldb: -1, offset: 1},
		packCase{k: 768, n: 257, ldb: -1, offset: 5},
		packCase{k: 64, n: 50, ldb: 2304, offset: 768}, // attention keys, head 0
		packCase{k: 64, n: 50, ldb: 2304, offset: 768 + 11*64},
	)
}

// operand returns a stored matrix for op(B) = k×n with every element
// distinct, and its leading dimension. ldb −1 means loose: 3·(row length)+5.
// The elements outside op(B) are NaN so a stray read shows.
func (tc packCase) operand(trans bool) ([]float32, int) {
	rows, cols := tc.k, tc.n
	if trans {
		rows, cols = tc.n, tc.k
	}
	ldb := tc.ldb
	switch ldb {
	case 0:
		ldb = cols
	case -1:
		ldb = 3*cols + 5
	}
	nan := float32(0)
	nan /= nan
	b := make([]float32, tc.offset+(rows-1)*ldb+cols+tc.offset)
	for i := range b {
		b[i] = nan
	}
	for r := range rows {
		for c := range cols {
			b[tc.offset+r*ldb+c] = float32(r*cols + c + 1)
		}
	}
	return b[tc.offset : tc.offset+(rows-1)*ldb+cols], ldb
}

// checkPack packs every case with pack(nr, …) and compares with packRef
// element by element; the packing is a pure copy, so equality is exact.
func checkPack(t *testing.T, nr int, trans bool, pack func(trans bool, k, n int, b []float32, ldb int) []float32) {
	t.Helper()
	for _, tc := range packCases() {
		b, ldb := tc.operand(trans)
		got := pack(trans, tc.k, tc.n, b, ldb)
		want := packRef(nr, trans, tc.k, tc.n, b, ldb)
		if len(got) != len(want) {
			t.Fatalf("nr=%d trans=%v %+v: packed %d floats, want %d", nr, trans, tc, len(got), len(want))
		}
		for i := range want {
			// want never holds NaN (packRef reads only op(B)), so a value
			// read from the NaN guard around it fails here.
			if got[i] != want[i] {
				t.Fatalf("nr=%d trans=%v %+v: packed[%d] = %v, want %v", nr, trans, tc, i, got[i], want[i])
			}
		}
	}
}

// packPaths runs test with the assembly transpose on (where this CPU has it)
// and off, so both the vector and the scalar path are compared.
func packPaths(t *testing.T, test func(t *testing.T)) {
	paths := []bool{false}
	if haveTransposeStrip8 {
		paths = append(paths, true)
	}
	for _, vec := range paths {
		t.Run(fmt.Sprintf("vector=%v", vec), func(t *testing.T) {
			prev := haveTransposeStrip8
			haveTransposeStrip8 = vec
			defer func() { haveTransposeStrip8 = prev }()
			test(t)
		})
	}
}

// TestPackB checks PackB under every micro-kernel this CPU has (each sets
// the panel width), both orientations, both transpose paths.
func TestPackB(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		packPaths(t, func(t *testing.T) {
			for _, pack := range []struct {
				name string
				fn   func(trans bool, k, n int, b []float32, ldb int) *PackedB
			}{{"PackB", PackB}, {"PackBToKeep", PackBToKeep}} {
				for _, trans := range []bool{true, false} {
					checkPack(t, active.nr, trans, func(trans bool, k, n int, b []float32, ldb int) []float32 {
						p := pack.fn(trans, k, n, b, ldb)
						if p.K != k || p.N != n || p.nr != active.nr || !p.ForActiveKernel() {
							t.Fatalf("%s(%v, %d, %d): got K=%d N=%d nr=%d", pack.name, trans, k, n, p.K, p.N, p.nr)
						}
						out := append([]float32(nil), p.data...)
						p.Release()
						return out
					})
				}
			}
		})
	})
}

// TestPackBWidths calls the packing directly with panel widths no kernel on
// this CPU may have (32 is the AVX-512 kernel's), into buffers filled with
// garbage to show that padding is written, not assumed zero.
func TestPackBWidths(t *testing.T) {
	for _, nr := range []int{8, 16, 24, 32} {
		t.Run(fmt.Sprintf("nr=%d", nr), func(t *testing.T) {
			packPaths(t, func(t *testing.T) {
				for _, trans := range []bool{true, false} {
					checkPack(t, nr, trans, func(trans bool, k, n int, b []float32, ldb int) []float32 {
						npad := (n + nr - 1) / nr * nr
						out := make([]float32, k*npad)
						for i := range out {
							out[i] = -1
						}
						packB(out, nr, trans, k, n, b, ldb)
						return out
					})
				}
			})
		})
	}
}

// TestTransposeStrip8 checks the assembly routine alone, with random values
// and dst rows wider than 8 whose other entries must stay untouched.
func TestTransposeStrip8(t *testing.T) {
	if !haveTransposeStrip8 {
		t.Skip("no AVX2 transpose on this CPU")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ ldb, dstStride, groups int }{
		{8, 8, 1}, {17, 16, 1}, {64, 16, 8}, {2304, 32, 8}, {771, 24, 32},
	} {
		src := make([]float32, 7*tc.ldb+8*tc.groups)
		for i := range src {
			src[i] = rng.Float32()
		}
		dst := make([]float32, (8*tc.groups-1)*tc.dstStride+8+3)
		for i := range dst {
			dst[i] = -1
		}
		transposeStrip8(dst, tc.dstStride, src, tc.ldb, tc.groups)
		for i, v := range dst {
			kk, j := i/tc.dstStride, i%tc.dstStride
			want := float32(-1)
			if j < 8 && kk < 8*tc.groups {
				want = src[j*tc.ldb+kk]
			}
			if v != want {
				t.Fatalf("%+v: dst[%d] (row %d, col %d) = %v, want %v", tc, i, kk, j, v, want)
			}
		}
	}
}
