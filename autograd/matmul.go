package autograd

import (
	"fmt"

	smat "github.com/nlpodyssey/spago/mat"
)

// MatMul returns op(a)·op(b), where op(x) is x, or xᵀ when the matching
// flag is set; both operands get gradients. Image–text logits are
// MatMul(images, texts, false, true). It panics if the inner sizes differ.
func MatMul(a, b smat.Tensor, transA, transB bool) smat.Tensor {
	ra, ca := dims(a)
	rb, cb := dims(b)
	m, k := ra, ca
	if transA {
		m, k = ca, ra
	}
	kb, n := rb, cb
	if transB {
		kb, n = cb, rb
	}
	if k != kb {
		panic(fmt.Sprintf("autograd: MatMul: op(a) is %d×%d, op(b) is %d×%d", m, k, kb, n))
	}
	op := matMulOp{a: a, b: b, transA: transA, transB: transB, m: m, n: n, k: k, lda: ca, ldb: cb}
	if sameType("MatMul", a, b) {
		return run(&matMulT[float32]{op})
	}
	return run(&matMulT[float64]{op})
}

type matMulOp struct {
	a, b           smat.Tensor
	transA, transB bool
	m, n, k        int
	lda, ldb       int // columns of the stored a and b
}

type matMulT[T dtype] struct{ matMulOp }

func (op *matMulT[T]) Operands() []smat.Tensor { return []smat.Tensor{op.a, op.b} }

func (op *matMulT[T]) Forward() (smat.Tensor, error) {
	c := make([]T, op.m*op.n)
	gemm(op.transA, op.transB, op.m, op.n, op.k, 1, values[T](op.a), op.lda, values[T](op.b), op.ldb, 0, c, op.n)
	return newMatrix(c, op.m, op.n), nil
}

func (op *matMulT[T]) Backward(gy smat.Tensor) error {
	dc := values[T](gy)
	a, b := values[T](op.a), values[T](op.b)
	m, n, k := op.m, op.n, op.k
	if op.a.RequiresGrad() {
		buf := getBuf[T](m * k)
		if op.transA { // a is k×m: dA = op(B)·dCᵀ
			gemm(op.transB, true, k, m, n, 1, b, op.ldb, dc, n, 0, *buf, m)
		} else { // dA = dC·op(B)ᵀ
			gemm(false, !op.transB, m, k, n, 1, dc, n, b, op.ldb, 0, *buf, k)
		}
		accGrad(op.a, *buf)
		putBuf(buf)
	}
	if op.b.RequiresGrad() {
		buf := getBuf[T](k * n)
		if op.transB { // b is n×k: dB = dCᵀ·op(A)
			gemm(true, op.transA, n, k, m, 1, dc, n, a, op.lda, 0, *buf, k)
		} else { // dB = op(A)ᵀ·dC
			gemm(!op.transA, false, k, n, m, 1, a, op.lda, dc, n, 0, *buf, n)
		}
		accGrad(op.b, *buf)
		putBuf(buf)
	}
	return nil
}
