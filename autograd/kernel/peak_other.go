//go:build !amd64

package kernel

func fmaPeak(n int) bool { return false }
