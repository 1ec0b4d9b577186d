//go:build !amd64

package kernel

func fmaPeak(n int) int { return 0 }
