// Package symeig computes all eigenvalues and eigenvectors of a real
// symmetric matrix in float64.
//
// It does what gonum's mat.EigenSym does (Householder reduction to
// tridiagonal form with gonum's LAPACK, then the implicit QL algorithm with
// Wilkinson shifts) but stores the eigenvectors as rows while the rotations
// are applied, so that each rotation updates two contiguous rows instead of
// two strided columns, and splits the rotations of a sweep over the cores.
// On SubTTA's 512×512 covariance (ViT-B/32) that takes the decomposition
// from 1.3 s to well under 0.2 s; the step runs it once per batch, on the
// critical path. FactorizeSerial keeps the rotations on one goroutine, to
// the same bits, for callers that run several decompositions at once.
package symeig
