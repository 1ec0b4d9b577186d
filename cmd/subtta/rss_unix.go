//go:build unix

package main

import "syscall"

// maxRSSKiB returns the peak resident set size in KiB (Linux reports
// ru_maxrss in KiB).
func maxRSSKiB() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss)
}

// cpuSeconds returns the user and system CPU time this process has used, in
// seconds, or −1 where it cannot be read.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
