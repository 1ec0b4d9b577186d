package kernel

import (
	"sync/atomic"
)

// lowTileRun computes tiles lowMR-row tiles of C from tile t0 down, for
// column panel panel, into c (leading dimension ldc, lowNR columns wide).
type lowTileRun func(t0, tiles, panel int, c []float32, ldc int)

// lowPost receives the products of row tiles t0 to t1 − 1 of column panel
// panel in buf, rows lowNR values apart (padding rows and columns
// included), for as long as it runs.
type lowPost func(t0, t1, panel int, buf []float32)

// lowDriver runs the tiles of an m×n product over Threads() goroutines:
// units of a block of row tiles and a range of column panels, handed out
// one at a time as gemmPacked does. Full tiles are written in place; a last
// partial row tile or column panel goes through scratch. With post set,
// C is not written: every block of tiles goes through scratch to post.
func lowDriver(m, n int, run lowTileRun, c []float32, ldc int, post lowPost) {
	tiles := (m + lowMR - 1) / lowMR
	full := m / lowMR
	panels := (n + lowNR - 1) / lowNR
	// Units small enough for every thread to get about eight: with the
	// AMX kernel a unit takes tens of microseconds, and the last ones to
	// finish leave the other threads idle.
	t := Threads()
	blockTiles := max(1, min(12, (tiles+4*t-1)/(4*t))) // at most 96 rows: an A block of 96·k bytes stays in L2
	blocks := (tiles + blockTiles - 1) / blockTiles
	want := (8*t + blocks - 1) / blocks // column ranges per block
	perRange := max(1, min(8, panels/want))
	ranges := (panels + perRange - 1) / perRange
	units := blocks * ranges
	var next atomic.Int64
	work := func(_, _, _ int) {
		size := lowMR * lowNR // a partial tile
		if post != nil {
			size *= blockTiles // a whole block of tiles
		}
		tmp := getScratch(size)
		defer putScratch(tmp)
		for {
			u := int(next.Add(1)) - 1
			if u >= units {
				return
			}
			b, r := u/ranges, u%ranges
			t0, t1 := b*blockTiles, min((b+1)*blockTiles, tiles)
			for q := r * perRange; q < min((r+1)*perRange, panels); q++ {
				if post != nil {
					run(t0, t1-t0, q, *tmp, lowNR)
					post(t0, t1, q, *tmp)
					continue
				}
				j0 := q * lowNR
				cols := min(lowNR, n-j0)
				inPlace := t0
				if cols == lowNR && full > t0 {
					inPlace = min(full, t1)
					run(t0, inPlace-t0, q, c[t0*lowMR*ldc+j0:], ldc)
				}
				for tt := inPlace; tt < t1; tt++ {
					run(tt, 1, q, *tmp, lowNR)
					rows := min(lowMR, m-tt*lowMR)
					for i := 0; i < rows; i++ {
						copy(c[(tt*lowMR+i)*ldc+j0:(tt*lowMR+i)*ldc+j0+cols], (*tmp)[i*lowNR:i*lowNR+cols])
					}
				}
			}
		}
	}
	if t == 1 || units == 1 {
		work(0, 0, 0)
		return
	}
	splitRange(t, 1, t, work)
}

// int8Tile runs the int8 kernel kern on tiles tiles, checking the bounds
// the assembly relies on.
func int8Tile(kern lowKernel, groups int, a []uint8, lda int, b []int8, c []float32, ldc int, scale []float32, zero []int32, colSum []int32, colScale, bias []float32, tiles int) {
	_ = a[(tiles*lowMR-1)*lda+groups*4-1]
	_ = b[groups*lowNR*4-1]
	_ = c[(tiles*lowMR-1)*ldc+lowNR-1]
	_ = scale[tiles*lowMR-1]
	_ = zero[tiles*lowMR-1]
	_, _, _ = colSum[lowNR-1], colScale[lowNR-1], bias[lowNR-1]
	if kern.name == "go" {
		goInt8Tile(groups, a, lda, b, c, ldc, scale, zero, colSum, colScale, bias, tiles)
		return
	}
	int8TileAsm(kern, groups, a, lda, b, c, ldc, scale, zero, colSum, colScale, bias, tiles)
}

// bf16Tile runs the bf16 kernel kern on tiles tiles (bounds checked).
func bf16Tile(kern lowKernel, groups int, a []uint8, lda int, b []uint16, c []float32, ldc int, bias []float32, tiles int) {
	_ = a[(tiles*lowMR-1)*lda+groups*4-1]
	_ = b[groups*lowNR*2-1]
	_ = c[(tiles*lowMR-1)*ldc+lowNR-1]
	_ = bias[lowNR-1]
	switch kern.name {
	case goBF16Kernel.name:
		goBF16Tile(groups, a, lda, b, c, ldc, bias, tiles)
		return
	case goAMXBF16Kernel.name:
		goAMXBF16Tile(groups, a, lda, b, c, ldc, bias, tiles)
		return
	}
	bf16TileAsm(kern, groups, a, lda, b, c, ldc, bias, tiles)
}
