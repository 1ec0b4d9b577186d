//go:build !amd64

package kernel

func available() []microKernel { return []microKernel{goKernel} }
