package autograd

import (
	"fmt"
	"math"
	"slices"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// Softmax returns the softmax of every row of x.
func Softmax(x smat.Tensor) smat.Tensor {
	if is32("Softmax", x) {
		return run(&softmaxOp[float32]{x: x})
	}
	return run(&softmaxOp[float64]{x: x})
}

// LogSoftmax returns x − log Σ exp(x) for every row of x.
func LogSoftmax(x smat.Tensor) smat.Tensor {
	if is32("LogSoftmax", x) {
		return run(&softmaxOp[float32]{x: x, log: true})
	}
	return run(&softmaxOp[float64]{x: x, log: true})
}

type softmaxOp[T dtype] struct {
	x   smat.Tensor
	log bool
	y   []T
}

func (op *softmaxOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x} }

func (op *softmaxOp[T]) Forward() (smat.Tensor, error) {
	rows, cols := dims(op.x)
	op.y = make([]T, rows*cols)
	if op.log {
		kernel.LogSoftmax(op.y, values[T](op.x), rows, cols)
	} else {
		kernel.Softmax(op.y, values[T](op.x), rows, cols, 1, false)
	}
	return newMatrix(op.y, rows, cols), nil
}

func (op *softmaxOp[T]) Backward(gy smat.Tensor) error {
	if !op.x.RequiresGrad() {
		return nil
	}
	rows, cols := dims(op.x)
	buf := getBuf[T](rows * cols)
	if op.log {
		kernel.LogSoftmaxBackward(*buf, values[T](gy), op.y, rows, cols)
	} else {
		kernel.SoftmaxBackward(*buf, values[T](gy), op.y, rows, cols, 1)
	}
	accGrad(op.x, *buf)
	putBuf(buf)
	return nil
}

// CrossEntropy returns the mean over rows of −log softmax(logits)[label]:
// a scalar. labels holds one class index per row of logits. It panics if
// the counts differ or a label is out of range.
func CrossEntropy(logits smat.Tensor, labels []int) smat.Tensor {
	rows, cols := dims(logits)
	if len(labels) != rows {
		panic(fmt.Sprintf("autograd: CrossEntropy: %d labels for %d rows", len(labels), rows))
	}
	for _, l := range labels {
		if l < 0 || l >= cols {
			panic(fmt.Sprintf("autograd: CrossEntropy: label %d out of range [0, %d)", l, cols))
		}
	}
	if is32("CrossEntropy", logits) {
		return run(&crossEntropyOp[float32]{x: logits, labels: slices.Clone(labels)})
	}
	return run(&crossEntropyOp[float64]{x: logits, labels: slices.Clone(labels)})
}

type crossEntropyOp[T dtype] struct {
	x      smat.Tensor
	labels []int
	logp   []T
}

func (op *crossEntropyOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x} }

func (op *crossEntropyOp[T]) Forward() (smat.Tensor, error) {
	rows, cols := dims(op.x)
	op.logp = make([]T, rows*cols)
	kernel.LogSoftmax(op.logp, values[T](op.x), rows, cols)
	var s float64
	for r, l := range op.labels {
		s -= float64(op.logp[r*cols+l])
	}
	return newMatrix([]T{T(s / float64(max(rows, 1)))}, 1, 1), nil
}

// Backward: dx = (softmax(x) − onehot(label))·g/rows.
func (op *crossEntropyOp[T]) Backward(gy smat.Tensor) error {
	if !op.x.RequiresGrad() {
		return nil
	}
	rows, cols := dims(op.x)
	g := values[T](gy)[0] / T(rows)
	buf := getBuf[T](rows * cols)
	dx := *buf
	for i, v := range op.logp {
		dx[i] = g * T(math.Exp(float64(v)))
	}
	for r, l := range op.labels {
		dx[r*cols+l] -= g
	}
	accGrad(op.x, dx)
	putBuf(buf)
	return nil
}

// Entropy returns the Shannon entropy −Σ p·log p of p = softmax(row) for
// every row of logits, as a [rows, 1] matrix (natural logarithm).
func Entropy(logits smat.Tensor) smat.Tensor {
	if is32("Entropy", logits) {
		return run(&entropyOp[float32]{x: logits})
	}
	return run(&entropyOp[float64]{x: logits})
}

// MeanEntropy returns the mean over rows of Entropy(logits): a scalar, the
// loss of entropy-minimising test-time adaptation (TENT).
func MeanEntropy(logits smat.Tensor) smat.Tensor { return Mean(Entropy(logits)) }

type entropyOp[T dtype] struct {
	x    smat.Tensor
	logp []T
	h    []T
}

func (op *entropyOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x} }

func (op *entropyOp[T]) Forward() (smat.Tensor, error) {
	rows, cols := dims(op.x)
	op.logp = make([]T, rows*cols)
	kernel.LogSoftmax(op.logp, values[T](op.x), rows, cols)
	op.h = make([]T, rows)
	for r := range rows {
		var s float64
		for _, lp := range op.logp[r*cols : (r+1)*cols] {
			s -= math.Exp(float64(lp)) * float64(lp)
		}
		op.h[r] = T(s)
	}
	return newMatrix(op.h, rows, 1), nil
}

// Backward: dH/dx_j = −p_j·(log p_j + H).
func (op *entropyOp[T]) Backward(gy smat.Tensor) error {
	if !op.x.RequiresGrad() {
		return nil
	}
	dh := values[T](gy)
	rows, cols := dims(op.x)
	buf := getBuf[T](rows * cols)
	dx := *buf
	for r := range rows {
		h, g := float64(op.h[r]), float64(dh[r])
		for j, lp := range op.logp[r*cols : (r+1)*cols] {
			l := float64(lp)
			dx[r*cols+j] = T(-g * math.Exp(l) * (l + h))
		}
	}
	accGrad(op.x, dx)
	putBuf(buf)
	return nil
}

// Mean returns the mean of all elements of x: a scalar.
func Mean(x smat.Tensor) smat.Tensor {
	if is32("Mean", x) {
		return run(&meanOp[float32]{x: x})
	}
	return run(&meanOp[float64]{x: x})
}

type meanOp[T dtype] struct{ x smat.Tensor }

func (op *meanOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x} }

func (op *meanOp[T]) Forward() (smat.Tensor, error) {
	var s float64
	x := values[T](op.x)
	for _, v := range x {
		s += float64(v)
	}
	return newMatrix([]T{T(s / float64(max(len(x), 1)))}, 1, 1), nil
}

func (op *meanOp[T]) Backward(gy smat.Tensor) error {
	if !op.x.RequiresGrad() {
		return nil
	}
	n := op.x.Size()
	buf := getBuf[T](n)
	g := values[T](gy)[0] / T(n)
	for i := range *buf {
		(*buf)[i] = g
	}
	accGrad(op.x, *buf)
	putBuf(buf)
	return nil
}
