// Package symeig computes all eigenvalues and eigenvectors of a real
// symmetric matrix in float64.
//
// It does what gonum's mat.EigenSym does (Householder reduction to
// tridiagonal form, then the implicit QL algorithm with Wilkinson shifts)
// with the eigenvectors stored as rows, faster in four ways. The reduction
// is its own (tridiag.go): each step makes one pass over the remaining
// matrix, which applies the previous step's rank-2 update and forms the
// symmetric matrix-vector product together, and the reflectors are then
// applied to a few rows of Qᵀ at a time, written in the eigenvectors'
// layout; its row kernels run in AVX2 or AVX-512 assembly where the CPU
// has them, with the Go code's bits. At 512×512 it takes about 11 ms on
// one core, against about 110 ms for gonum's Dsytrd and Dorgtr and the
// transpose the package used before.
// The QL iteration first records its plane rotations, which depend
// on the tridiagonal matrix alone, and then applies them all to the
// eigenvectors, the columns split over the cores with no wait between
// sweeps. Each rotation updates two contiguous rows, in AVX assembly where
// the CPU has it, with the Go code's bits (the Go code rounds each product
// before the sum, as the assembly does). On
// SubTTA's 512×512 covariance (ViT-B/32) the QL part takes about 30 ms on
// one core, against 1.3 s for gonum's mat.EigenSym as a whole; the step
// runs the decomposition once per batch, on the critical path, and eval's
// diagnostics once per batch on a worker. FactorizeSerial keeps the
// rotations on one goroutine, to the same bits, for callers that run
// several decompositions at once.
package symeig
