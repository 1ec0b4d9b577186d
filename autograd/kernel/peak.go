package kernel

import (
	"sync"
	"time"
)

// PeakGFLOPS measures the machine's fp32 FMA throughput now, in GFLOP/s, on
// Threads() goroutines running register-only FMAs of the widest kind the
// CPU has (512-bit with AVX-512, else 256-bit) for about d: the ceiling any
// GEMM can reach at this moment. On a shared machine the ceiling moves with
// the neighbours' load, so a benchmark that measures it next to its own
// repetitions can state its efficiency honestly. It returns 0 where the CPU
// has no AVX2+FMA (or off amd64).
func PeakGFLOPS(d time.Duration) float64 {
	flops := fmaPeak(1)
	if flops == 0 {
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
	return float64(Threads()) * float64(flops) * float64(iters) / time.Since(start).Seconds() / 1e9
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

// KernelGFLOPS measures the GEMM micro-kernel in use, in GFLOP/s on Threads()
// goroutines for about d, the way gemmBlock calls it but with no memory
// traffic: each goroutine sweeps one kc-deep packed B panel (in L1) over an
// mc-row block of A read in place (in L2), again and again. It is the
// ceiling of any GEMM built on this kernel, below PeakGFLOPS by whatever the
// kernel's loads and broadcasts cost; a whole-model figure divided by it
// separates the kernel's own limit from the cost of everything around it.
func KernelGFLOPS(d time.Duration) float64 {
	k := active
	flops := 2 * float64(mc*kc*k.nr) // one sweep
	sweep := func(a, b, c []float32, n int) {
		for range n {
			if k.rows != nil {
				k.rows(kc, a, kc, b, c, k.nr, 1, false, nil, mc/k.mr)
			} else {
				k.tile(kc, a, b, c, k.nr, 1, false, nil, mc/k.mr)
			}
		}
	}
	operands := func() (a, b, c []float32) {
		a, b, c = make([]float32, mc*kc), make([]float32, kc*k.nr), make([]float32, mc*k.nr)
		for i := range a {
			a[i] = float32(i%13) / 13
		}
		for i := range b {
			b[i] = float32(i%7) / 7
		}
		return a, b, c
	}
	// Calibrate on one goroutine, then size the measured run to about d.
	a, b, c := operands()
	const probe = 64
	start := time.Now()
	sweep(a, b, c, probe)
	per := time.Since(start).Seconds() / probe
	n := max(probe, int(d.Seconds()/max(per, 1e-12)))
	// Every goroutine has its own operands, made before the clock starts.
	var ready, done sync.WaitGroup
	begin := make(chan struct{})
	for range Threads() {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			a, b, c := operands()
			sweep(a, b, c, 1) // bring them into this core's caches
			ready.Done()
			<-begin
			sweep(a, b, c, n)
		}()
	}
	ready.Wait()
	start = time.Now()
	close(begin)
	done.Wait()
	return float64(Threads()) * flops * float64(n) / time.Since(start).Seconds() / 1e9
}
