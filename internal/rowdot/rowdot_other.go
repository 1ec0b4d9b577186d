//go:build !amd64

package rowdot

// useAVX is false off amd64: the Go sums run.
var useAVX = false

func dotTileAdd(a *float64, lda int, b *float64, ldb int, k int, c *float64, ldc int) {
	panic("rowdot: no vector kernel off amd64")
}
