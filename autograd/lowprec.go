package autograd

import (
	"fmt"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// lowWeight is a linear layer's weight in reduced precision, for the passes
// that record no gradient.
type lowWeight struct {
	prec kernel.Precision
	i8   *kernel.Int8Weight
	bf   *kernel.BF16Weight
	src  *float32 // the weight's first value when converted: a new Weight matrix drops the copy
}

// SetPrecision makes the layer's products run in prec (kernel.Int8 or
// kernel.BF16) in every pass that records no gradient: a frozen forward
// pass, such as inference, a method that trains nothing, or the views of a
// multi-view method. A pass that records gradients (adaptation, training)
// still runs in float32, and so does any pass while a device is set. The
// weight is quantised (or rounded) now, once; name names it in the error
// returned when it holds NaN or ±Inf. kernel.FP32 drops the copy. An error
// wrapping kernel.ErrPrecisionUnsupported is returned when the CPU has no
// kernel for prec. Do not call it while the layer is in use; after writing
// into the weight, call it again.
func (p *LinearParams) SetPrecision(prec kernel.Precision, name string) error {
	if prec == kernel.FP32 {
		p.low = nil
		return nil
	}
	if err := kernel.CheckPrecision(prec); err != nil {
		return err
	}
	if !is32("SetPrecision", p.Weight) { // float64 models are reference runs
		return fmt.Errorf("autograd: %s: reduced precision needs a float32 weight", name)
	}
	w := values[float32](p.Weight)
	if len(w) == 0 {
		return fmt.Errorf("autograd: %s: empty weight", name)
	}
	l := &lowWeight{prec: prec, src: &w[0]}
	var err error
	switch prec {
	case kernel.Int8:
		l.i8, err = kernel.QuantizeInt8(name, w, p.Out(), p.In())
	case kernel.BF16:
		l.bf, err = kernel.PackBF16(name, w, p.Out(), p.In())
	default:
		return fmt.Errorf("autograd: %s: %w %v", name, kernel.ErrPrecision, prec)
	}
	if err != nil {
		return err
	}
	p.low = l
	return nil
}

// Precision is the precision of the layer's passes without gradients.
func (p *LinearParams) Precision() kernel.Precision {
	if p.low == nil {
		return kernel.FP32
	}
	return p.low.prec
}

// linearLow computes y = x·Wᵀ + b for x [rows, in] (leading dimension ld)
// in the layer's reduced precision and reports true, or does nothing and
// reports false when the layer has none, its weight is trainable or was
// replaced, or a device is set.
func linearLow(p *LinearParams, rows int, x []float32, ld int, y []float32) bool {
	l, bias := p.lowNow()
	if l == nil {
		return false
	}
	if l.i8 != nil {
		kernel.GemmInt8(rows, x, ld, l.i8, bias, y, p.Out())
	} else {
		kernel.GemmBF16(rows, x, ld, l.bf, bias, y, p.Out())
	}
	return true
}

// lowNow returns the layer's reduced-precision weight and its bias when a
// pass without gradient would use it now, else nil: none set, the weight
// trainable (adaptation's and training's passes are fp32 by design) or
// replaced since, or a device set. The last is not a way for a model to
// run in fp32 unawares: clip.Model refuses to set a reduced precision, and
// to run a pass in one, while a device is set (clip.ErrPrecisionOnDevice).
func (p *LinearParams) lowNow() (*lowWeight, []float32) {
	l := p.low
	if l == nil || p.Weight.RequiresGrad() || CurrentDevice() != nil {
		return nil, nil
	}
	w := values[float32](p.Weight)
	if len(w) == 0 || &w[0] != l.src {
		return nil, nil
	}
	var bias []float32
	if p.Bias != nil {
		bias = values[float32](p.Bias)
	}
	return l, bias
}

// mlpLowBF16 computes y = proj(act(fc(x))) for x [rows, fc.In()] into y
// [rows, proj.Out()] and reports true when both layers run in bf16 now
// (lowNow): the activation (GELU, or QuickGELU) runs on fc's products as
// they leave the kernel and its result goes to proj rounded to bf16
// (kernel.GemmBF16Act), without the [rows, fc.Out()] float32 hidden layer,
// and with its bits. Otherwise it does nothing and reports false.
func mlpLowBF16(fc, proj *LinearParams, gelu bool, rows int, x, y []float32) bool {
	lf, bf := fc.lowNow()
	lp, bp := proj.lowNow()
	if lf == nil || lp == nil || lf.bf == nil || lp.bf == nil || rows == 0 {
		return false
	}
	act := kernel.QuickGELUActivation
	if gelu {
		act = kernel.GELUActivation
	}
	hidden := kernel.GemmBF16Act(rows, x, fc.In(), lf.bf, bf, act)
	kernel.GemmBF16Rows(hidden, lp.bf, bp, y, proj.Out())
	return true
}

// LowPrecisionBlocks returns copies of blocks whose linear layers run in
// prec (LinearParams.SetPrecision), sharing the weights, biases and
// LayerNorms of the originals, which stay float32: a tower keeps both and
// runs the copies in its passes that record no gradient at all, so that a
// pass that records some (adaptation, training) stays float32 throughout,
// its frozen blocks included. params name the weights in errors.
func LowPrecisionBlocks(blocks []*BlockParams, params []Named, prec kernel.Precision) ([]*BlockParams, error) {
	names := map[smat.Matrix]string{}
	for _, n := range params {
		names[n.Value] = n.Name
	}
	out := make([]*BlockParams, len(blocks))
	for i, b := range blocks {
		c := *b
		for _, l := range []**LinearParams{&c.QKV, &c.Out, &c.FC, &c.Proj} {
			low, err := (*l).LowPrecisionCopy(prec, names[(*l).Weight])
			if err != nil {
				return nil, err
			}
			*l = low
		}
		out[i] = &c
	}
	return out, nil
}

// LowPrecisionCopy returns a layer that shares p's weight and bias and runs
// in prec (SetPrecision) where p runs in float32.
func (p *LinearParams) LowPrecisionCopy(prec kernel.Precision, name string) (*LinearParams, error) {
	// The copy keeps p's packed float32 weight (kept packs are shared under
	// their lock): a pass that packs before it knows it runs in prec (the
	// patch projection) then reads the kept pack instead of packing again.
	c := &LinearParams{Weight: p.Weight, Bias: p.Bias, packs: p.packs}
	if err := c.SetPrecision(prec, name); err != nil {
		return nil, err
	}
	return c, nil
}

// Frozen reports whether a pass over params with inputs records no gradient:
// none of them requires one.
func Frozen(params []Named, inputs ...smat.Tensor) bool {
	for _, t := range inputs {
		if t != nil && t.RequiresGrad() {
			return false
		}
	}
	for _, n := range params {
		if n.Value.RequiresGrad() {
			return false
		}
	}
	return true
}
