package kernel

import "fmt"

// Keep says what Device.BiasActivation writes besides the activation.
type Keep int

const (
	KeepNone  Keep = iota // nothing
	KeepInput             // the activation's input, x + bias
	KeepSlope             // the activation's derivative at x + bias
	// MulSlope multiplies aux, the gradient of the activation's output,
	// by the derivative at x + bias: backward's step through the
	// activation, in the pass that recomputes the activation (for
	// c_proj's weight gradient) from the kept input.
	MulSlope
)

// checkFused checks the shapes of the fused operations: bufs
// hold rows·cols values each and bias, unless nil, cols.
func checkFused(what string, rows, cols int, bias Buf, bufs ...Buf) error {
	if rows < 0 || cols < 0 {
		return fmt.Errorf("kernel: %s: %d×%d", what, rows, cols)
	}
	for _, b := range bufs {
		if b.Len() < rows*cols {
			return fmt.Errorf("kernel: %s: a buffer of %d values for %d×%d", what, b.Len(), rows, cols)
		}
	}
	if bias != nil && bias.Len() < cols {
		return fmt.Errorf("kernel: %s: a bias of %d values for %d columns", what, bias.Len(), cols)
	}
	return nil
}

// addBias sets h = x + bias (each row of cols values; bias nil: h = x).
func addBias(h, x []float32, cols int, bias Buf) {
	if bias == nil {
		copy(h, x)
		return
	}
	b := hb(bias)[:cols]
	for r := 0; r < len(h); r += cols {
		Add(h[r:r+cols], x[r:r+cols], b)
	}
}

func (host) BiasActivation(y, aux, x Buf, rows, cols int, bias Buf, act Activation, keep Keep) error {
	bufs := []Buf{y, x}
	if keep != KeepNone {
		bufs = append(bufs, aux)
	}
	if err := checkFused("BiasActivation", rows, cols, bias, bufs...); err != nil {
		return err
	}
	if act != QuickGELUActivation && act != GELUActivation || keep < KeepNone || keep > MulSlope {
		return fmt.Errorf("kernel: BiasActivation: activation %d, keep %d", act, keep)
	}
	n := rows * cols
	h := make([]float32, n) // the activation's input, apart from y and aux, which may be x
	addBias(h, hb(x)[:n], cols, bias)
	ys := hb(y)[:n]
	switch {
	case keep == MulSlope:
		s := make([]float32, n)
		if act == QuickGELUActivation {
			QuickGELUSlope(ys, s, h)
		} else {
			GELU(ys, h)
			GELUSlope(s, h)
		}
		Mul(hb(aux)[:n], hb(aux)[:n], s)
	case keep == KeepSlope && act == QuickGELUActivation:
		QuickGELUSlope(ys, hb(aux)[:n], h)
	case keep == KeepSlope:
		GELU(ys, h)
		GELUSlope(hb(aux)[:n], h)
	case act == QuickGELUActivation:
		QuickGELU(ys, h)
	default:
		GELU(ys, h)
	}
	if keep == KeepInput {
		copy(hb(aux)[:n], h)
	}
	return nil
}

func (host) SplitHeadsBias(y, x, bias Buf, batch, tokens, groups, heads, headDim int) error {
	if err := checkHeads("SplitHeadsBias", y.Len(), x.Len(), batch, tokens, groups, heads, headDim); err != nil {
		return err
	}
	row := groups * heads * headDim
	if bias != nil && bias.Len() < row {
		return fmt.Errorf("kernel: SplitHeadsBias: a bias of %d values for rows of %d", bias.Len(), row)
	}
	ys, xs := hb(y), hb(x)
	eachHeadRow(batch, tokens, groups, heads, headDim, func(split, merged int) {
		if bias == nil {
			copy(ys[split:split+headDim], xs[merged:merged+headDim])
			return
		}
		col := merged % row
		Add(ys[split:split+headDim], xs[merged:merged+headDim], hb(bias)[col:col+headDim])
	})
	return nil
}

func (host) LayerNormResidual(y, x Buf, rows, cols int, gamma, beta Buf, eps float64, mean, rstd, res, bias Buf) error {
	if res == nil {
		return fmt.Errorf("kernel: LayerNormResidual: no residual buffer")
	}
	if err := checkFused("LayerNormResidual", rows, cols, bias, y, x, res); err != nil {
		return err
	}
	if err := Host.LayerNorm(y, x, rows, cols, gamma, beta, eps, mean, rstd); err != nil {
		return err
	}
	n := rows * cols
	addBias(hb(res)[:n], hb(x)[:n], cols, bias)
	return nil
}

func (host) LayerNormBackwardResidual(dx, dgamma, dbeta, dy, x, res Buf, rows, cols int, gamma, mean, rstd Buf) error {
	if dx == nil || res == nil {
		return fmt.Errorf("kernel: LayerNormBackwardResidual: dx and res must be set")
	}
	if err := checkFused("LayerNormBackwardResidual", rows, cols, nil, dx, dy, x, res); err != nil {
		return err
	}
	n := rows * cols
	r := hb(res)[:n]
	if n > 0 && &r[0] == &hb(dx)[0] { // dx is about to be overwritten
		r = append([]float32(nil), r...)
	}
	if err := Host.LayerNormBackward(dx, dgamma, dbeta, dy, x, rows, cols, gamma, mean, rstd); err != nil {
		return err
	}
	Add(hb(dx)[:n], hb(dx)[:n], r)
	return nil
}
