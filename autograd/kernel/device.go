package kernel

import (
	"errors"
	"fmt"
	"reflect"
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

	// Patches cuts batch images, each a row of channels·height·width
	// values (NCHW), into patch×patch squares: y is [batch·gridRows·
	// gridCols, channels·patch·patch], image-major, then the grid
	// row-major; within a row channel, patch row, patch column (the order
	// of a flattened convolution weight), as autograd.Patches. Pixels that
	// fill no whole patch are dropped.
	Patches(y, x Buf, batch, channels, height, width, patch int) error
	// TokenEmbed builds a vision transformer's tokens from patches [batch·
	// grid, width]: for each image its row class + pos[0], then its patch
	// rows, row i plus pos[1+i], into y [batch·(grid+1), width]; pos is
	// [grid+1, width]. As autograd.TokenEmbedding.
	TokenEmbed(y, patches, class, pos Buf, batch, grid, width int) error
	// StrideRows copies rows 0, step, 2·step, … of x (n rows of cols
	// values) into y [n, cols]: each image's class token.
	StrideRows(y, x Buf, n, cols, step int) error
	// SpreadRows is StrideRows' inverse: x's n rows go to rows 0, step,
	// 2·step, … of y; y's other rows are left alone.
	SpreadRows(y, x Buf, n, cols, step int) error
	// SplitHeads reorders x [batch, tokens, groups·heads·headDim] (attention's
	// q|k|v with groups = 3, or its output with groups = 1) into y [groups,
	// batch, heads, tokens, headDim], where each head of each sequence is a
	// contiguous tokens×headDim matrix, the same stride from the next: what
	// a strided-batched product over batch×heads needs. MergeHeads is its
	// inverse, x from y.
	SplitHeads(y, x Buf, batch, tokens, groups, heads, headDim int) error
	MergeHeads(x, y Buf, batch, tokens, groups, heads, headDim int) error

	// BiasActivation computes y = act(x + bias) for x [rows, cols], bias
	// (cols values, added to every row; nil: none) after a product with
	// beta = 0, and writes to aux what a recording pass keeps for backward:
	// nothing (KeepNone, aux unread), the activation's input x + bias
	// (KeepInput) or its derivative there (KeepSlope); with MulSlope it
	// multiplies aux, a gradient, by that derivative. y may be x, and aux
	// too unless MulSlope.
	BiasActivation(y, aux, x Buf, rows, cols int, bias Buf, act Activation, keep Keep) error
	// LayerNormResidual is LayerNorm of x into y that also writes res =
	// x + bias (bias cols values added to every row; nil: res = x): the
	// residual stream with the bias of the linear layer whose product a
	// Gemm with beta = 1 then adds onto res, so that the bias and the
	// residual take no pass of their own. res may be x, not y.
	LayerNormResidual(y, x Buf, rows, cols int, gamma, beta Buf, eps float64, mean, rstd, res, bias Buf) error
	// LayerNormBackwardResidual is LayerNormBackward with res [rows, cols]
	// added to the input gradient dx (which must be set): the gradient of
	// a residual path around the LayerNorm, in the same pass. res may be
	// dx.
	LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res Buf, rows, cols int, gamma, mean, rstd Buf) error
	// SplitHeadsBias is SplitHeads of x + bias, bias (groups·heads·headDim
	// values; nil: none) added to each token's row: a q|k|v product's bias
	// added as its heads are split.
	SplitHeadsBias(y, x, bias Buf, batch, tokens, groups, heads, headDim int) error
	// GatherRows copies into row i of y [n, cols] row idx[i] of x or, where
	// idx[i] is negative, row −1−idx[i] of alt (nil when no index is
	// negative), and adds row i mod period of pos to it unless pos is nil:
	// the text tower's token embeddings with TPT's context in place of some
	// and the positional embedding added, or the end-of-text token of each
	// sequence. The n row numbers are float32 values, exact for numbers of
	// magnitude up to 2²⁴. As autograd.GatherRows, ReplaceRows and AddTiled.
	GatherRows(y, x, alt, idx Buf, n, cols int, pos Buf, period int) error
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

// Prefetcher is a Device that can copy values up beside the work queued
// on it: the next batch's images while the current batch's pass runs
// (autograd.DeviceInput.Prefetch, called by the goroutine that reads the
// batches). Package gpu implements it with pinned memory of its own and a
// second CUDA stream; Host does not (nothing would run beside its work).
type Prefetcher interface {
	// UploadAhead returns a new buffer, freed with Free as one from Alloc,
	// into which src's values are being copied. The host's part (src into
	// pinned memory) runs on the calling goroutine without holding up the
	// device's other callers, and the device's copy does not wait for the
	// work queued after it, nor that work for it: a pass that reads the
	// buffer calls Await first. src may be reused once UploadAhead returns.
	UploadAhead(src []float32) (Buf, error)
	// Await orders everything queued on the device from now on after the
	// copy into b (a buffer of UploadAhead). It does not wait on the host.
	// Further calls for the same buffer do nothing.
	Await(b Buf) error
}

// Grapher is a Device that can record the work a function queues on it as
// a graph and replay that work later with one call (package gpu: a CUDA
// Graph of its stream). A replay runs the recorded operations on the same
// buffers, with the same shapes and scalars, as the function queued them:
// the caller fills the buffers it reads before a launch and reads the
// buffers it writes after. autograd records the passes without gradients of
// a vision tower (TowerGraphs), where one launch replaces a few hundred.
type Grapher interface {
	// Capture calls f, which queues work on the device from the calling
	// goroutine only, and returns that work as a Graph without running it.
	// While f runs, the device's other callers wait; an operation of f that
	// cannot be recorded (an upload or download through host memory, a
	// wait on the host) fails, and so does Capture. Buffers that f
	// allocates and frees belong to the graph from then on, until Release.
	// An error wrapping ErrGraphsOff means recording is turned off.
	Capture(f func() error) (Graph, error)
}

// Graph is recorded work (Grapher.Capture).
type Graph interface {
	// Launch queues the recorded work, after everything queued before it.
	Launch() error
	// Release frees the graph and the memory it owns; the buffers it reads
	// and writes may then be reused. Further calls do nothing.
	Release()
}

// SameMemory reports whether a and b are the same values of a device's
// memory: the same buffer, or two that report the same address and length
// (a method Addr() uintptr, as package gpu's buffers have: a slice made
// again over the same memory is the same memory). A Graph reads and writes
// memory by address, so this is what decides whether a recording still
// applies.
func SameMemory(a, b Buf) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	type addresser interface{ Addr() uintptr }
	if x, ok := a.(addresser); ok {
		y, ok := b.(addresser)
		return ok && x.Addr() == y.Addr() && a.Len() == b.Len()
	}
	if x, ok := a.(HostBuf); ok {
		y, ok := b.(HostBuf)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	}
	return reflect.TypeOf(a).Comparable() && a == b
}

// ErrGraphsOff is wrapped by Grapher.Capture's error when the device was
// opened with graphs turned off.
var ErrGraphsOff = errors.New("graph recording is turned off")

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

func (host) Patches(y, x Buf, batch, channels, height, width, patch int) error {
	if err := checkPatches(y.Len(), x.Len(), batch, channels, height, width, patch); err != nil {
		return err
	}
	Patches(hb(y), hb(x), batch, channels, height, width, patch)
	return nil
}

// checkPatches checks Patches' shapes against buffers of ny and nx values.
func checkPatches(ny, nx, batch, channels, height, width, patch int) error {
	if batch < 0 || channels <= 0 || patch <= 0 || height < patch || width < patch {
		return fmt.Errorf("kernel: Patches: %d images of %d×%d×%d in patches of %d", batch, channels, height, width, patch)
	}
	gr, gc := height/patch, width/patch
	if nx < batch*channels*height*width || ny < batch*gr*gc*channels*patch*patch {
		return fmt.Errorf("kernel: Patches: buffers of %d and %d values for %d images of %d×%d×%d", nx, ny, batch, channels, height, width)
	}
	return nil
}

// Patches is Device.Patches on slices.
func Patches(y, x []float32, batch, channels, height, width, patch int) {
	gr, gc := height/patch, width/patch
	rowLen := channels * patch * patch
	for b := range batch {
		img := x[b*channels*height*width:]
		for i := range gr {
			for j := range gc {
				dst := y[((b*gr+i)*gc+j)*rowLen:]
				for c := range channels {
					for p := range patch {
						src := img[c*height*width+(i*patch+p)*width+j*patch:]
						copy(dst[(c*patch+p)*patch:(c*patch+p+1)*patch], src[:patch])
					}
				}
			}
		}
	}
}

func (host) TokenEmbed(y, patches, class, pos Buf, batch, grid, width int) error {
	t := grid + 1
	if batch < 0 || grid < 0 || width < 0 || y.Len() < batch*t*width || patches.Len() < batch*grid*width ||
		class.Len() < width || pos.Len() < t*width {
		return fmt.Errorf("kernel: TokenEmbed: %d images of %d patches of %d values do not fit the buffers", batch, grid, width)
	}
	ys, ps, cls, ps0 := hb(y), hb(patches), hb(class), hb(pos)
	for b := range batch {
		yb := ys[b*t*width : (b+1)*t*width]
		Add(yb[:width], cls[:width], ps0[:width])
		Add(yb[width:], ps[b*grid*width:(b+1)*grid*width], ps0[width:t*width])
	}
	return nil
}

func (host) StrideRows(y, x Buf, n, cols, step int) error {
	if n < 0 || cols < 0 || step < 1 || y.Len() < n*cols || (n > 0 && x.Len() < (n-1)*step*cols+cols) {
		return fmt.Errorf("kernel: StrideRows: %d rows of %d values, %d apart, do not fit the buffers", n, cols, step)
	}
	ys, xs := hb(y), hb(x)
	for i := range n {
		copy(ys[i*cols:(i+1)*cols], xs[i*step*cols:])
	}
	return nil
}

func (host) SpreadRows(y, x Buf, n, cols, step int) error {
	if n < 0 || cols < 0 || step < 1 || x.Len() < n*cols || (n > 0 && y.Len() < (n-1)*step*cols+cols) {
		return fmt.Errorf("kernel: SpreadRows: %d rows of %d values, %d apart, do not fit the buffers", n, cols, step)
	}
	ys, xs := hb(y), hb(x)
	for i := range n {
		copy(ys[i*step*cols:], xs[i*cols:(i+1)*cols])
	}
	return nil
}

func (host) SplitHeads(y, x Buf, batch, tokens, groups, heads, headDim int) error {
	if err := checkHeads("SplitHeads", y.Len(), x.Len(), batch, tokens, groups, heads, headDim); err != nil {
		return err
	}
	eachHeadRow(batch, tokens, groups, heads, headDim, func(split, merged int) {
		copy(hb(y)[split:split+headDim], hb(x)[merged:merged+headDim])
	})
	return nil
}

func (host) MergeHeads(x, y Buf, batch, tokens, groups, heads, headDim int) error {
	if err := checkHeads("MergeHeads", y.Len(), x.Len(), batch, tokens, groups, heads, headDim); err != nil {
		return err
	}
	eachHeadRow(batch, tokens, groups, heads, headDim, func(split, merged int) {
		copy(hb(x)[merged:merged+headDim], hb(y)[split:split+headDim])
	})
	return nil
}

// checkHeads checks SplitHeads' and MergeHeads' shapes.
func checkHeads(what string, ny, nx, batch, tokens, groups, heads, headDim int) error {
	n := batch * tokens * groups * heads * headDim
	if batch < 0 || tokens < 0 || groups < 0 || heads < 0 || headDim < 0 || ny < n || nx < n {
		return fmt.Errorf("kernel: %s: [%d, %d, %d·%d·%d] does not fit buffers of %d and %d values", what, batch, tokens, groups, heads, headDim, nx, ny)
	}
	return nil
}

// eachHeadRow calls f with the offsets of each run of headDim values in
// SplitHeads' layout and in the merged one.
func eachHeadRow(batch, tokens, groups, heads, headDim int, f func(split, merged int)) {
	for g := range groups {
		for b := range batch {
			for h := range heads {
				for t := range tokens {
					split := (((g*batch+b)*heads+h)*tokens + t) * headDim
					merged := ((b*tokens+t)*groups*heads + g*heads + h) * headDim
					f(split, merged)
				}
			}
		}
	}
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

// MaxRowIndex is the largest row number GatherRows takes: its indices are
// float32 values, exact up to 2²⁴.
const MaxRowIndex = 1 << 24

func (host) GatherRows(y, x, alt, idx Buf, n, cols int, pos Buf, period int) error {
	if n < 0 || cols < 0 || y.Len() < n*cols || idx.Len() < n || pos != nil && (period < 1 || pos.Len() < min(n, period)*cols) {
		return fmt.Errorf("kernel: GatherRows: %d rows of %d values (positions every %d) do not fit the buffers", n, cols, period)
	}
	ys, is := hb(y), hb(idx)
	for i := range n {
		src, j := x, int(is[i])
		if j < 0 {
			src, j = alt, -1-j
		}
		if src == nil || float32(int(is[i])) != is[i] || (j+1)*cols > src.Len() {
			return fmt.Errorf("kernel: GatherRows: row %d: index %v outside its matrix", i, is[i])
		}
		row := ys[i*cols : (i+1)*cols]
		if pos == nil {
			copy(row, hb(src)[j*cols:(j+1)*cols])
			continue
		}
		p := i % period
		Add(row, hb(src)[j*cols:(j+1)*cols], hb(pos)[p*cols:(p+1)*cols])
	}
	return nil
}
