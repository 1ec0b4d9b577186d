//go:build !amd64

package symeig

// The instruction sets of rotateSweep: Go alone off amd64.
const (
	isaGo = iota
	isaAVX
	isaAVX512
)

// rotateISA is isaGo off amd64; tests skip the others.
var rotateISA = isaGo

// rotateSweep is rotateSweepGo.
func rotateSweep(z []float64, stride, count, width int, cs, sn []float64) {
	rotateSweepGo(z, stride, count, width, cs, sn)
}
