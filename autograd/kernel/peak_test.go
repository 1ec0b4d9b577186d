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
	if fmaPeak(1) == 0 {
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

// TestKernelGFLOPS checks KernelGFLOPS the same way (a comparison with the
// FMA peak would fail on a noisy machine: see BenchmarkKernelCeiling).
func TestKernelGFLOPS(t *testing.T) {
	k := KernelGFLOPS(5 * time.Millisecond)
	t.Logf("KernelGFLOPS: %.0f GFLOP/s with the %s kernel on %d threads", k, Kernel(), Threads())
	if k <= 0 || k > 64*6*float64(Threads()) {
		t.Fatalf("KernelGFLOPS = %g, implausible for %d threads", k, Threads())
	}
}

// BenchmarkKernelCeiling reports the micro-kernel's cache-resident rate
// (KernelGFLOPS) next to the FMA peak measured just before it, and their
// ratio: how close the kernel itself can come to the machine's limit.
func BenchmarkKernelCeiling(b *testing.B) {
	if fmaPeak(1) == 0 {
		b.Skip("no AVX2+FMA on this CPU")
	}
	var peak, kern float64
	for b.Loop() {
		peak += PeakGFLOPS(50 * time.Millisecond)
		kern += KernelGFLOPS(50 * time.Millisecond)
	}
	n := float64(b.N)
	b.ReportMetric(peak/n, "peak-GFLOP/s")
	b.ReportMetric(kern/n, "kernel-GFLOP/s")
	b.ReportMetric(100*kern/peak, "%-of-peak")
}

// TestPeakUsesWidestFMA: on a CPU with AVX-512 the peak is measured with
// 512-bit FMAs. With 256-bit ones only, the AVX-512 GEMM kernel measured
// above "100%" of the peak (174% was reported).
func TestPeakUsesWidestFMA(t *testing.T) {
	if Kernel() != "avx512" {
		t.Skipf("the %s kernel is in use", Kernel())
	}
	if got := fmaPeak(1); got != 384 {
		t.Errorf("the peak loop does %d flops per iteration, want 384 (12 FMAs of 16 lanes)", got)
	}
}
