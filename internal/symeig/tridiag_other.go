//go:build !amd64

package symeig

// tridiagKernels is the Go forms off amd64.
var tridiagKernels = kernelsGo

func symvRows2(a0, a1, vp, wp, v, y []float64, vpi, wpi, vi, vpi1, wpi1, vi1 float64) (h0, h1 float64) {
	return symvRows2Go(a0, a1, vp, wp, v, y, vpi, wpi, vi, vpi1, wpi1, vi1)
}

func reflectRows(z []float64, ldz, rows, n int, v []float64, tau float64) {
	for r := range rows {
		reflectRowGo(z[r*ldz:r*ldz+n], v, tau)
	}
}
