// Package symeig computes all eigenvalues and eigenvectors of a real
// symmetric matrix in float64.
//
// It does what gonum's mat.EigenSym does (Householder reduction to
// tridiagonal form, then the implicit QL algorithm with Wilkinson shifts)
// with the eigenvectors stored as rows, and faster:
//
//   - The reduction is its own (tridiag.go): each step makes one pass over
//     the remaining matrix, which applies the previous step's rank-2
//     update and forms the symmetric matrix-vector product together, and
//     the reflectors are then applied to a few rows of Qᵀ at a time,
//     written in the eigenvectors' layout.
//   - The QL iteration first records its plane rotations, which depend on
//     the tridiagonal matrix alone, and then applies them to the
//     eigenvectors: each rotation updates two contiguous rows, and split
//     over the cores each core rotates a copy of its columns with no wait
//     between sweeps.
//   - The reduction's row kernels and the rotations run in AVX2 or AVX-512
//     assembly where the CPU has them, with the Go code's bits, and the Go
//     code rounds every product before it is summed (no build fuses one
//     into an FMA): a decomposition has the same bits on every amd64 build
//     and CPU.
//
// On SubTTA's 512×512 covariance (ViT-B/32) a decomposition takes about
// 47 ms on one Zen 5-class core (the reduction 11 ms, the rotations 15 ms
// to apply and 9 ms to compute), against 1.7 s for gonum's mat.EigenSym
// (go test -bench 'Factorize|Tridiagonalize|Rotations' ./internal/symeig).
// SubTTA's step runs it once per batch, on the critical path, and eval's
// diagnostics once per batch on a worker goroutine. FactorizeSerial keeps
// the work on one goroutine, to the same bits, for callers that run
// several decompositions at once.
package symeig
