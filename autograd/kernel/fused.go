package kernel

import "fmt"

// Keep says what Device.BiasActivation writes besides the activation.
type Keep int

const (
	KeepNone  Keep = iota // nothing
	KeepInput             // the activation's input, x + bias
	KeepSlope             // the activation's derivative at x + bias
)

// checkFused checks the shapes of BiasActivation and BiasResidual: bufs
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
	if act != QuickGELUActivation && act != GELUActivation || keep < KeepNone || keep > KeepSlope {
		return fmt.Errorf("kernel: BiasActivation: activation %d, keep %d", act, keep)
	}
	n := rows * cols
	h := make([]float32, n) // the activation's input, apart from y and aux, which may be x
	addBias(h, hb(x)[:n], cols, bias)
	ys := hb(y)[:n]
	switch {
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

func (host) BiasResidual(y, x, bias, res Buf, rows, cols int) error {
	if err := checkFused("BiasResidual", rows, cols, bias, y, x, res); err != nil {
		return err
	}
	n := rows * cols
	ys, xs, rs := hb(y)[:n], hb(x)[:n], hb(res)[:n]
	if bias == nil {
		Add(ys, xs, rs)
		return nil
	}
	b := hb(bias)[:cols]
	for i := range ys {
		ys[i] = (xs[i] + b[i%cols]) + rs[i]
	}
	return nil
}
