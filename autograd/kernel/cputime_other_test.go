//go:build !unix

package kernel

func processCPUSeconds() float64 { return -1 }
