package kernel

import (
	"sync"
	"time"
)

// PeakGFLOPS measures the machine's fp32 FMA throughput now, in GFLOP/s, on
// Threads() goroutines running register-only FMAs for about d: the ceiling
// any GEMM can reach at this moment. On a shared machine the ceiling moves
// with the neighbours' load, so a benchmark that measures it next to its own
// repetitions can state its efficiency honestly. It returns 0 where the CPU
// has no AVX2+FMA (or off amd64).
func PeakGFLOPS(d time.Duration) float64 {
	if !fmaPeak(1) {
		return 0
	}
	// Calibrate on one short run, then size the measured run to about d.
	const probe = 1 << 14
	start := time.Now()
	fmaPeak(probe)
	per := time.Since(start).Seconds() / probe
	iters := max(probe, int(d.Seconds()/max(per, 1e-12)))
	start = time.Now()
	fmaPeakAll(iters)
	return float64(Threads()) * 192 * float64(iters) / time.Since(start).Seconds() / 1e9
}

// fmaPeakAll runs fmaPeak(iters) on Threads() goroutines at once.
func fmaPeakAll(iters int) {
	var wg sync.WaitGroup
	for range Threads() {
		wg.Add(1)
		go func() { defer wg.Done(); fmaPeak(iters) }()
	}
	wg.Wait()
}
