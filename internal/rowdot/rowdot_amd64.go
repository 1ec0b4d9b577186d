package rowdot

import "golang.org/x/sys/cpu"

//go:generate go run gen_rowdot.go

// dotTileAdd adds to the 3×4 tile of C at c (rows ldc apart) the dot
// products of the rows a, a+lda, a+2·lda with b, b+ldb, …, b+3·ldb over k
// elements (a multiple of 4): four partial sums, lane l taking the
// products of the elements ≡ l mod 4 in order, each product rounded
// before it is added, then (s0+s2) + (s1+s3) added to C (rowdot_amd64.s,
// from gen_rowdot.go).
//
//go:noescape
func dotTileAdd(a *float64, lda int, b *float64, ldb int, k int, c *float64, ldc int)

// useAVX selects dotTileAdd; tests clear it to run the Go sums.
var useAVX = cpu.X86.HasAVX
