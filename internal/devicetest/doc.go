// Package devicetest helps tests tell that model code took the device seam
// (autograd.SetDevice): a kernel.Device that counts the backward kernels
// it runs, one that counts the values it copies each way, and a
// kernel.Float64Device on kernel.Host.
package devicetest
