package symeig

// rotateSweepGo applies one sweep of plane rotations to a block of
// columns: for r = count−1 down to 0, with c = cs[r], s = sn[r], and x and
// y the first width elements of rows r and r+1 (z's rows are stride
// elements apart), y ← s·x + c·y and x ← c·x − s·y. Each product is
// rounded before the sum (the conversions forbid fusing them into an
// FMA), so the bits are the same with any GOAMD64 and the same as the
// assembly's.
func rotateSweepGo(z []float64, stride, count, width int, cs, sn []float64) {
	for r := count - 1; r >= 0; r-- {
		c, s := cs[r], sn[r]
		zi := z[r*stride : r*stride+width]
		zj := z[(r+1)*stride : (r+1)*stride+width][:len(zi)]
		for k, x := range zi {
			y := zj[k]
			zj[k] = float64(s*x) + float64(c*y)
			zi[k] = float64(c*x) - float64(s*y)
		}
	}
}
