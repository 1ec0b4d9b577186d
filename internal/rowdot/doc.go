// Package rowdot computes C = A·Bᵀ in float64 (every row of A against
// every row of B: zero-shot logits, a basis against a basis) with the bits
// of gonum's mat.Dense.Mul(a, b.T()) on amd64, several times faster.
//
// gonum (v0.17.0) computes that product with its Dgemm: each element is
// summed over k in blocks of 64 when the product has at least four 64×64
// tiles of C (over the whole of k otherwise), each block's dot product in
// the order of its SSE2 DotUnitary (four partial sums, the products of
// k ≡ l mod 4 in lane l, a tail of k mod 4 terms added to lane 0, then
// (s0+s2)+(s1+s3)), every product rounded before it is added. Mul does
// the same operations, in that order, element by element, so the result
// is gonum's bit for bit (TestMulMatchesGonum); it gets its speed by
// computing a 3×4 tile of C at once in AVX registers (lanes being the
// four partial sums, the rows' loads shared) and by splitting the rows of
// C over the cores. Without AVX, and off amd64, the same sums run in Go:
// the bits are the same on every architecture (gonum's own, off amd64,
// are not: its Go DotUnitary sums in sequence).
package rowdot
