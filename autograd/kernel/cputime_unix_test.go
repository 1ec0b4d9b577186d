//go:build unix

package kernel

import "syscall"

// processCPUSeconds is the CPU time (user and system) this process has used
// so far, or -1 where it cannot be read.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
