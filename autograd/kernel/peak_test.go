package kernel

import (
	"testing"
	"time"
)

// TestPeakGFLOPS only checks that the figure is plausible: positive and
// below 64 FLOP per cycle per thread at 6 GHz (a bound no x86 core reaches),
// or 0 without AVX2+FMA.
func TestPeakGFLOPS(t *testing.T) {
	p := PeakGFLOPS(5 * time.Millisecond)
	if !fmaPeak(1) {
		if p != 0 {
			t.Fatalf("PeakGFLOPS = %g without AVX2+FMA, want 0", p)
		}
		return
	}
	t.Logf("PeakGFLOPS: %.0f GFLOP/s on %d threads", p, Threads())
	if p <= 0 || p > 64*6*float64(Threads()) {
		t.Fatalf("PeakGFLOPS = %g, implausible for %d threads", p, Threads())
	}
}
