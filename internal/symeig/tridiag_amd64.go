package symeig

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Assembly in tridiag_amd64.s (AVX2 and FMA) and tridiag_avx512_amd64.s
// (AVX512F and AVX512VL), both written by gen_asm.go.

//go:noescape
func symvRows2AVX2(a0, a1, vp, wp, v, y *float64, n int, vpi, wpi, vi, vpi1, wpi1, vi1 float64) (h0, h1 float64)

//go:noescape
func symvRows2AVX512(a0, a1, vp, wp, v, y *float64, n int, vpi, wpi, vi, vpi1, wpi1, vi1 float64) (h0, h1 float64)

//go:noescape
func reflectRowAVX2(z, v *float64, n int, tau float64)

//go:noescape
func reflectRows4AVX2(z *float64, ldz int, v *float64, n int, tau float64)

//go:noescape
func reflectRows8AVX512(z *float64, ldz int, v *float64, n int, tau float64)

// tridiagKernels is the row kernels' form: the widest this CPU has, as
// golang.org/x/sys/cpu reports it (GODEBUG=cpu.avx512f=off selects AVX2,
// cpu.avx2=off or cpu.fma=off the Go forms: AVX-512 is taken only with
// AVX2 and FMA as well); tests set it to compare the forms, which give
// the same bits.
var tridiagKernels = func() kernelForm {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return kernelsAVX512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return kernelsAVX2
	}
	return kernelsGo
}()

// symvRows2 applies the pending rank-2 update to two trailing rows i and
// i+1 over the same columns (from i+2 on), accumulates their shares of B·v
// into y and returns their dot products with v (symvRows2Go says what
// exactly).
func symvRows2(a0, a1, vp, wp, v, y []float64, vpi, wpi, vi, vpi1, wpi1, vi1 float64) (h0, h1 float64) {
	n := len(a0)
	if tridiagKernels == kernelsGo || n == 0 {
		return symvRows2Go(a0, a1, vp, wp, v, y, vpi, wpi, vi, vpi1, wpi1, vi1)
	}
	_, _, _, _, _ = a1[n-1], vp[n-1], wp[n-1], v[n-1], y[n-1]
	f := symvRows2AVX2
	if tridiagKernels == kernelsAVX512 {
		f = symvRows2AVX512
	}
	return f(unsafe.SliceData(a0), unsafe.SliceData(a1), unsafe.SliceData(vp), unsafe.SliceData(wp),
		unsafe.SliceData(v), unsafe.SliceData(y), n, vpi, wpi, vi, vpi1, wpi1, vi1)
}

// reflectRow is z ← z − (τ·(z·v))·v (reflectRowGo says what exactly).
func reflectRow(z, v []float64, tau float64) {
	n := len(z)
	if tridiagKernels == kernelsGo || n == 0 {
		reflectRowGo(z, v, tau)
		return
	}
	_ = v[n-1]
	reflectRowAVX2(unsafe.SliceData(z), unsafe.SliceData(v), n, tau)
}

// reflectRows applies reflectRow(z[r·ldz : r·ldz+n], v, τ) to the rows
// r = 0, 1, …, rows−1 of z, eight or four at a time in assembly (the same
// bits as one at a time: each row's sums are its own).
func reflectRows(z []float64, ldz, rows, n int, v []float64, tau float64) {
	r := 0
	if tridiagKernels != kernelsGo && n > 0 {
		_ = v[n-1]
		if tridiagKernels == kernelsAVX512 {
			for ; r+8 <= rows; r += 8 {
				_ = z[(r+7)*ldz+n-1]
				reflectRows8AVX512(&z[r*ldz], ldz, unsafe.SliceData(v), n, tau)
			}
		}
		for ; r+4 <= rows; r += 4 {
			_ = z[(r+3)*ldz+n-1]
			reflectRows4AVX2(&z[r*ldz], ldz, unsafe.SliceData(v), n, tau)
		}
	}
	for ; r < rows; r++ {
		reflectRow(z[r*ldz:r*ldz+n], v, tau)
	}
}
