//go:build !linux

package kernel

// amxPermit: AMX is used on Linux only, where the process asks for it.
func amxPermit() bool { return false }
