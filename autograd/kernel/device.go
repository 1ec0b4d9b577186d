package kernel

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Device is memory and kernels apart from the CPU's, such as a GPU's
// (package gpu, in a binary built with -tags cuda): the seam through which
// model code runs there. Host implements it on the CPU with this package's
// kernels, so that code written against Device runs, and is tested, in
// every build.
//
// Values are float32 and matrices row-major with leading dimensions, as in
// the rest of the package; each operation means what the function of the
// same name does on slices. A buffer lives from Alloc to Free. Operations
// on a device run in the order they are called, and Download returns once
// those before it have finished. A Device may be called from several
// goroutines as long as they touch distinct buffers. Errors are the
// device's (out of memory, a failed launch); shapes that do not fit the
// buffers are errors too.
type Device interface {
	// Name says which device it is, for messages ("host", "cuda:0 …").
	Name() string

	// Alloc returns a buffer of n values, uninitialised.
	Alloc(n int) (Buf, error)
	// Free releases a buffer returned by Alloc (not a Slice of one).
	Free(b Buf)
	// Upload copies src into the first len(src) values of dst.
	Upload(dst Buf, src []float32) error
	// Download copies the first len(dst) values of src into dst.
	Download(dst []float32, src Buf) error

	// Gemm is Gemm on device buffers.
	Gemm(transA, transB bool, m, n, k int, alpha float32, a Buf, lda int, b Buf, ldb int, beta float32, c Buf, ldc int) error
	// GemmBatched is GemmBatched on device buffers.
	GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a Buf, lda, strideA int, b Buf, ldb, strideB int, beta float32, c Buf, ldc, strideC int) error

	// LayerNorm is LayerNorm; the row statistics go to mean and rstd
	// (rows values each) unless they are nil.
	LayerNorm(y, x Buf, rows, cols int, gamma, beta Buf, eps float64, mean, rstd Buf) error
	// LayerNormBackward is LayerNormBackward, except that dgamma and dbeta
	// are overwritten with the column sums rather than added to. Each of dx,
	// dgamma and dbeta may be nil (not wanted); dgamma and dbeta are both
	// nil or both set.
	LayerNormBackward(dx, dgamma, dbeta, dy, x Buf, rows, cols int, gamma, mean, rstd Buf) error
	// Softmax is Softmax, causal mask included.
	Softmax(y, x Buf, rows, cols int, scale float32, causal bool) error
	// SoftmaxBackward is SoftmaxBackward.
	SoftmaxBackward(dx, dy, y Buf, rows, cols int, scale float32) error
	// QuickGELU and GELU apply the activation to n values.
	QuickGELU(y, x Buf, n int) error
	GELU(y, x Buf, n int) error
	// QuickGELUSlope is QuickGELUSlope and GELUSlope is GELUSlope, on n
	// values: the activation's derivative, kept by a forward pass for
	// backward.
	QuickGELUSlope(y, slope, x Buf, n int) error
	GELUSlope(slope, x Buf, n int) error
	// Add computes y = a + b and Mul y = a·b for n values.
	Add(y, a, b Buf, n int) error
	Mul(y, a, b Buf, n int) error
	// FillRows copies v (cols values) into each row of y (rows×cols): a
	// bias, to which a Gemm with beta = 1 then adds a product.
	FillRows(y Buf, rows, cols int, v Buf) error
}

// SymmetricEigen is a Device that can also decompose a symmetric float64
// matrix, as SubTTA's alignment does every step (package gpu: cuSOLVER).
// Host does not implement it: the CPU path is package internal/symeig.
type SymmetricEigen interface {
	// SymEig returns the eigenvalues of the symmetric n×n matrix a
	// (row-major) in ascending order, and the eigenvectors as the rows of
	// vectors (n×n, row-major). An error wrapping ErrUnsupported means the
	// device cannot do it here (a library missing): use the CPU.
	SymEig(a []float64, n int) (values, vectors []float64, err error)
}

// ErrUnsupported is wrapped by the errors of optional Device operations
// that a device cannot run on this machine.
var ErrUnsupported = errors.New("not supported by this device")

// Buf is a run of float32 values in a Device's memory.
type Buf interface {
	// Len is the number of values.
	Len() int
	// Slice returns values i…j−1, sharing the memory (a matrix starting
	// inside another, such as one attention head's columns).
	Slice(i, j int) Buf
}

// Host is the Device of the CPU: its buffers are HostBuf and its operations
// this package's functions, so a computation written against Device gives
// on Host bit for bit what the same functions give called directly.
var Host Device = host{}

// HostBuf is a buffer of Host: a Go slice.
type HostBuf []float32

// Len is len(b).
func (b HostBuf) Len() int { return len(b) }

// Slice is b[i:j].
func (b HostBuf) Slice(i, j int) Buf { return b[i:j] }

type host struct{}

func (host) Name() string { return "host" }

func (host) Alloc(n int) (Buf, error) {
	if n < 0 {
		return nil, fmt.Errorf("kernel: Host.Alloc: %d values", n)
	}
	return make(HostBuf, n), nil
}

func (host) Free(Buf) {}

func (host) Upload(dst Buf, src []float32) error {
	if len(src) > dst.Len() {
		return fmt.Errorf("kernel: Host.Upload: %d values into a buffer of %d", len(src), dst.Len())
	}
	copy(hb(dst), src)
	return nil
}

func (host) Download(dst []float32, src Buf) error {
	if len(dst) > src.Len() {
		return fmt.Errorf("kernel: Host.Download: %d values from a buffer of %d", len(dst), src.Len())
	}
	copy(dst, hb(src))
	return nil
}

func (host) Gemm(transA, transB bool, m, n, k int, alpha float32, a Buf, lda int, b Buf, ldb int, beta float32, c Buf, ldc int) error {
	Gemm(transA, transB, m, n, k, alpha, hb(a), lda, hb(b), ldb, beta, hb(c), ldc)
	return nil
}

func (host) GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a Buf, lda, strideA int, b Buf, ldb, strideB int, beta float32, c Buf, ldc, strideC int) error {
	GemmBatched(transA, transB, batch, m, n, k, alpha, hb(a), lda, strideA, hb(b), ldb, strideB, beta, hb(c), ldc, strideC)
	return nil
}

func (host) LayerNorm(y, x Buf, rows, cols int, gamma, beta Buf, eps float64, mean, rstd Buf) error {
	var m, r []float32
	if mean == nil || rstd == nil {
		stats := make([]float32, 2*rows)
		m, r = stats[:rows], stats[rows:]
	}
	if mean != nil {
		m = hb(mean)
	}
	if rstd != nil {
		r = hb(rstd)
	}
	LayerNorm(hb(y), hb(x), rows, cols, hb(gamma), hb(beta), eps, m, r)
	return nil
}

func (host) LayerNormBackward(dx, dgamma, dbeta, dy, x Buf, rows, cols int, gamma, mean, rstd Buf) error {
	dg, db := hbOrNil(dgamma), hbOrNil(dbeta)
	if (dg == nil) != (db == nil) {
		return fmt.Errorf("kernel: Host.LayerNormBackward: dgamma and dbeta must both be set or both nil")
	}
	clear(dg[:min(len(dg), cols)])
	clear(db[:min(len(db), cols)])
	LayerNormBackward(hbOrNil(dx), dg, db, hb(dy), hb(x), rows, cols, hb(gamma), hb(mean), hb(rstd))
	return nil
}

func (host) Softmax(y, x Buf, rows, cols int, scale float32, causal bool) error {
	Softmax(hb(y), hb(x), rows, cols, scale, causal)
	return nil
}

func (host) SoftmaxBackward(dx, dy, y Buf, rows, cols int, scale float32) error {
	SoftmaxBackward(hb(dx), hb(dy), hb(y), rows, cols, scale)
	return nil
}

func (host) QuickGELUSlope(y, slope, x Buf, n int) error {
	QuickGELUSlope(hb(y)[:n], hb(slope)[:n], hb(x)[:n])
	return nil
}

func (host) GELUSlope(slope, x Buf, n int) error {
	GELUSlope(hb(slope)[:n], hb(x)[:n])
	return nil
}

func (host) Mul(y, a, b Buf, n int) error {
	Mul(hb(y)[:n], hb(a)[:n], hb(b)[:n])
	return nil
}

func (host) QuickGELU(y, x Buf, n int) error {
	QuickGELU(hb(y)[:n], hb(x)[:n])
	return nil
}

func (host) GELU(y, x Buf, n int) error {
	GELU(hb(y)[:n], hb(x)[:n])
	return nil
}

func (host) Add(y, a, b Buf, n int) error {
	Add(hb(y)[:n], hb(a)[:n], hb(b)[:n])
	return nil
}

func (host) FillRows(y Buf, rows, cols int, v Buf) error {
	ys, vs := hb(y), hb(v)[:cols]
	for r := range rows {
		copy(ys[r*cols:(r+1)*cols], vs)
	}
	return nil
}

// hbOrNil is hb, with nil for a nil buffer (an output not wanted).
func hbOrNil(b Buf) []float32 {
	if b == nil {
		return nil
	}
	return hb(b)
}

// hb returns the slice of a Host buffer; any other buffer is a programming
// error.
func hb(b Buf) []float32 {
	s, ok := b.(HostBuf)
	if !ok {
		panic(fmt.Sprintf("kernel: Host given a buffer of another device (%T)", b))
	}
	return s
}

// current is the device the model runs on (autograd.SetDevice), nil for
// the CPU.
var current atomic.Pointer[Device]

// SetCurrent sets the device the model and the code beside it run on; nil
// means the CPU. autograd.SetDevice calls it, and its rules apply.
func SetCurrent(d Device) {
	if d == nil {
		current.Store(nil)
		return
	}
	current.Store(&d)
}

// Current returns the device set by SetCurrent, or nil.
func Current() Device {
	if d := current.Load(); d != nil {
		return *d
	}
	return nil
}
