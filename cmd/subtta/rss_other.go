//go:build !unix

package main

func maxRSSKiB() int64 { return 0 }

func cpuSeconds() float64 { return -1 }
