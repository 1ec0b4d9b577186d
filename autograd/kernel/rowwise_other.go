//go:build !amd64

package kernel

func expVector(x []float32) int                       { return 0 }
func addVector(y, a, b []float32) int                 { return 0 }
func quickGELUVector(y, x []float32) int              { return 0 }
func quickGELUSlopeVector(y, slope, x []float32) int  { return 0 }
func quickGELUBackwardVector(dx, dy, x []float32) int { return 0 }
func geluVector(y, x []float32) int                   { return 0 }
func geluSlopeVector(slope, x []float32) int          { return 0 }
func geluAndSlopeVector(y, slope, x []float32) int    { return 0 }
func geluBackwardVector(dx, dy, x []float32) int      { return 0 }
func softmaxRow32(y, x []float32, scale float32) bool { return false }

func layerNormRow32(y, x, g, b []float32, eps float64, mean, rstd *float32) bool { return false }
func layerNormBackwardRow32(dx, pg, pb, dy, x, g []float32, m, q float32) bool   { return false }

// haveAVX2 is false off amd64: every row-wise kernel runs its Go loop.
var haveAVX2 = false
