// Package symeig computes all eigenvalues and eigenvectors of a real
// symmetric matrix in float64.
//
// It does what gonum's mat.EigenSym does (Householder reduction to
// tridiagonal form with gonum's LAPACK, then the implicit QL algorithm with
// Wilkinson shifts) with the eigenvectors stored as rows, faster in three
// ways. The QL iteration first records its plane rotations, which depend
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
