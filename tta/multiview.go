package tta

import (
	"fmt"
	"time"

	"github.com/subtta/subtta/tta/feature"
	"gonum.org/v1/gonum/mat"
)

// viewCount is the view count of a multi-view method: Views, and the Step
// that refuses images without views.
type viewCount struct {
	name  string
	views int
	kind  ViewKind
}

// Views is the number of views per image, view 0 the base view.
func (c viewCount) Views() int { return c.views }

// ViewKind is how the views after the base view are made.
func (c viewCount) ViewKind() ViewKind { return c.kind }

// Step refuses: a multi-view method needs StepViews.
func (c viewCount) Step([]float32, int) (*Result, error) {
	return nil, fmt.Errorf("tta: %s: %w", c.name, ErrNeedsViews)
}

func newViewCount(name string, views int) (viewCount, error) {
	if views < 2 {
		return viewCount{}, fmt.Errorf("tta: %s: %d views per image, want at least 2 (the base view and a random one)", name, views)
	}
	return viewCount{name: name, views: views}, nil
}

// checkViews checks that views holds n images of v views each of the
// model's input size, and that v is the method's count.
func (c viewCount) checkViews(views []float32, n, v int) error {
	if v != c.views || n < 1 || len(views)%(n*v) != 0 {
		return fmt.Errorf("tta: %s: %d values for %d images × %d views (the method takes %d views)", c.name, len(views), n, v, c.views)
	}
	return nil
}

// rows returns rows [i·v, (i+1)·v) of f: image i's views.
func viewRows(f *mat.Dense, i, v int) *mat.Dense {
	_, d := f.Dims()
	return f.Slice(i*v, (i+1)*v, 0, d).(*mat.Dense)
}

// multiViewPreset fills in what every multi-view preset has: batch 1 (the
// official codes adapt to one image at a time), its view count, and the
// fewest views that keep at least one when the method keeps the int(V·ρ)
// most confident (ρ = 0: all views are used).
func multiViewPreset(p *Preset, views int, rho float64) {
	p.BatchSize, p.Views, p.MinViews = 1, views, minViews(rho)
}

// minViews is the fewest views (at least 2) of which a share rho keeps
// one; 2 when rho is 0 (no selection).
func minViews(rho float64) int {
	n := 2
	for rho > 0 {
		if k, err := feature.KeepCount(n, rho); err == nil && k >= 1 {
			break
		}
		n++
	}
	return n
}

// eachImage is the frame of a multi-view method's StepViews: it checks the
// views, encodes all n·v of them as one batch without a tape (timed as
// "encode"), and calls one with every image's view features (v×d,
// unnormalised, view 0 first) in order; one returns the image's logits and
// prediction. The result's features are the base views'.
func (b *base) eachImage(c viewCount, views []float32, n, v int, d *Diagnostics, one func(i int, fv *mat.Dense) ([]float64, int, error)) (*Result, error) {
	if err := c.checkViews(views, n, v); err != nil {
		return nil, err
	}
	t0 := time.Now()
	_, f, err := b.forward(views, n*v, false)
	if err != nil {
		return nil, err
	}
	d.since("encode", t0)
	classes, _ := b.text.Dims()
	logits := mat.NewDense(n, classes, nil)
	preds := make([]int, n)
	baseViews := mat.NewDense(n, b.model.EmbedDim(), nil)
	for i := range n {
		row, pred, err := one(i, viewRows(f, i, v))
		if err != nil {
			return nil, err
		}
		logits.SetRow(i, row)
		preds[i] = pred
		baseViews.SetRow(i, f.RawRowView(i*v))
	}
	return &Result{Logits: logits, Preds: preds, Features: baseViews, Diag: *d}, nil
}
