package devicetest

import (
	"sync"

	"github.com/subtta/subtta/autograd/kernel"
)

// Null is a device that computes nothing, for measuring what the host
// does around a device's work: with it under the model, a pass or a step
// takes the time its host side would take next to an infinitely fast GPU
// (the graph, the float64 losses and logits, the copies into and out of
// pinned memory, which Null makes too, as package gpu does). Its buffers
// hold no memory; a download gives zeros, a count of non-finite values
// none. It is a kernel.Device, kernel.AdamDevice and kernel.Float64Device
// (the optimizer and SubTTA's alignment take their device paths), not a
// kernel.Half (16-bit passes take the float32 path) nor a
// kernel.Prefetcher.
type Null struct {
	mu     sync.Mutex
	pinned []float32 // what an upload copies its values into
}

type nullBuf int

func (b nullBuf) Len() int                  { return int(b) }
func (b nullBuf) Slice(i, j int) kernel.Buf { return nullBuf(j - i) }

// Name is "null".
func (*Null) Name() string { return "null" }

// Alloc returns a buffer of n values that holds none.
func (*Null) Alloc(n int) (kernel.Buf, error) { return nullBuf(n), nil }

// Free does nothing.
func (*Null) Free(kernel.Buf) {}

// Upload copies src into host memory of its own, as package gpu copies it
// into pinned memory.
func (d *Null) Upload(_ kernel.Buf, src []float32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pinned) < len(src) {
		d.pinned = make([]float32, len(src))
	}
	copy(d.pinned, src)
	return nil
}

// Download writes zeros into dst.
func (*Null) Download(dst []float32, _ kernel.Buf) error {
	clear(dst)
	return nil
}

// The operations do nothing.

func (*Null) Gemm(bool, bool, int, int, int, float32, kernel.Buf, int, kernel.Buf, int, float32, kernel.Buf, int) error {
	return nil
}
func (*Null) GemmBatched(bool, bool, int, int, int, int, float32, kernel.Buf, int, int, kernel.Buf, int, int, float32, kernel.Buf, int, int) error {
	return nil
}
func (*Null) LayerNorm(_, _ kernel.Buf, _, _ int, _, _ kernel.Buf, _ float64, _, _ kernel.Buf) error {
	return nil
}
func (*Null) LayerNormBackward(_, _, _, _, _ kernel.Buf, _, _ int, _, _, _ kernel.Buf) error {
	return nil
}
func (*Null) Softmax(_, _ kernel.Buf, _, _ int, _ float32, _ bool) error            { return nil }
func (*Null) SoftmaxBackward(_, _, _ kernel.Buf, _, _ int, _ float32) error         { return nil }
func (*Null) QuickGELU(_, _ kernel.Buf, _ int) error                                { return nil }
func (*Null) GELU(_, _ kernel.Buf, _ int) error                                     { return nil }
func (*Null) QuickGELUSlope(_, _, _ kernel.Buf, _ int) error                        { return nil }
func (*Null) GELUSlope(_, _ kernel.Buf, _ int) error                                { return nil }
func (*Null) Add(_, _, _ kernel.Buf, _ int) error                                   { return nil }
func (*Null) Mul(_, _, _ kernel.Buf, _ int) error                                   { return nil }
func (*Null) FillRows(_ kernel.Buf, _, _ int, _ kernel.Buf) error                   { return nil }
func (*Null) Patches(_, _ kernel.Buf, _, _, _, _, _ int) error                      { return nil }
func (*Null) TokenEmbed(_, _, _, _ kernel.Buf, _, _, _ int) error                   { return nil }
func (*Null) StrideRows(_, _ kernel.Buf, _, _, _ int) error                         { return nil }
func (*Null) SpreadRows(_, _ kernel.Buf, _, _, _ int) error                         { return nil }
func (*Null) SplitHeads(_, _ kernel.Buf, _, _, _, _, _ int) error                   { return nil }
func (*Null) MergeHeads(_, _ kernel.Buf, _, _, _, _, _ int) error                   { return nil }
func (*Null) SplitHeadsBias(_, _, _ kernel.Buf, _, _, _, _, _ int) error            { return nil }
func (*Null) GatherRows(_, _, _, _ kernel.Buf, _, _ int, _ kernel.Buf, _ int) error { return nil }
func (*Null) BiasActivation(_, _, _ kernel.Buf, _, _ int, _ kernel.Buf, _ kernel.Activation, _ kernel.Keep) error {
	return nil
}
func (*Null) LayerNormResidual(_, _ kernel.Buf, _, _ int, _, _ kernel.Buf, _ float64, _, _, _, _ kernel.Buf) error {
	return nil
}
func (*Null) LayerNormBackwardResidual(_, _, _, _, _, _ kernel.Buf, _, _ int, _, _, _ kernel.Buf) error {
	return nil
}
func (*Null) Dgemm(bool, bool, int, int, int, float64, kernel.Buf, int, kernel.Buf, int, float64, kernel.Buf, int) error {
	return nil
}
func (*Null) SymEigInto(_, _, _ kernel.Buf, _ int) error { return nil }
func (*Null) NonFinite(_, _ kernel.Buf, _ int) error     { return nil }
func (*Null) AdamStep(_, _, _, _ kernel.Buf, _ int, _ kernel.AdamScalars, _ kernel.Buf) error {
	return nil
}

var (
	_ kernel.AdamDevice    = (*Null)(nil)
	_ kernel.Float64Device = (*Null)(nil)
)

// NullGrapher is Null recording graphs (kernel.Grapher): Capture calls f
// and returns a graph whose Launch does nothing, as Null's work is
// nothing. Under it, a pass replayed from a recording (autograd.TowerGraphs)
// costs what its host side would next to an infinitely fast GPU: the check
// of the parameters, the images' copy into pinned memory, one launch and
// the download.
type NullGrapher struct{ Null }

// Capture implements kernel.Grapher.
func (*NullGrapher) Capture(f func() error) (kernel.Graph, error) {
	if err := f(); err != nil {
		return nil, err
	}
	return nullGraph{}, nil
}

type nullGraph struct{}

func (nullGraph) Launch() error { return nil }
func (nullGraph) Release()      {}
