//go:build !amd64

package symeig

// useAVX is false off amd64; tests set it only where it exists.
var useAVX = false

// rotateSweep is rotateSweepGo.
func rotateSweep(z []float64, stride, count, width int, cs, sn []float64) {
	rotateSweepGo(z, stride, count, width, cs, sn)
}
