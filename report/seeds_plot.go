package report

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plots draws, per table of c, each method's mean accuracy over the seeds
// as a bar with error bars of ± one standard deviation, and returns the
// PNGs in table order.
func (c *Comparison) Plots() ([][]byte, error) {
	var out [][]byte
	for _, t := range c.Tables {
		png, err := c.meanPlot(t)
		if err != nil {
			return out, fmt.Errorf("report: plot: %w", err)
		}
		out = append(out, png)
	}
	return out, nil
}

// errorPoints are the tops of the bars and their error bars.
type errorPoints struct {
	plotter.XYs
	plotter.YErrors
}

func (c *Comparison) meanPlot(t SeedTable) ([]byte, error) {
	title := fmt.Sprintf("Mean accuracy over %s (± std)", Seeds(len(c.Seeds)))
	if t.Title != "" {
		title += ", " + strings.ToLower(t.Title)
	}
	p := newPlot(title, "", "accuracy (%)")
	names := make([]string, len(t.Rows))
	vals := make(plotter.Values, len(t.Rows))
	pts := errorPoints{make(plotter.XYs, len(t.Rows)), make(plotter.YErrors, len(t.Rows))}
	top := 0.0
	for i, r := range t.Rows {
		names[i] = r.Method
		vals[i] = r.Mean.Mean
		pts.XYs[i] = plotter.XY{X: float64(i), Y: r.Mean.Mean}
		pts.YErrors[i].Low, pts.YErrors[i].High = r.Mean.Std, r.Mean.Std
		top = max(top, r.Mean.Mean+r.Mean.Std)
	}
	bars, err := plotter.NewBarChart(vals, 0.6*vg.Centimeter)
	if err != nil {
		return nil, err
	}
	bars.Color = seriesColor(0)
	bars.LineStyle.Width = 0
	p.Add(bars)
	eb, err := plotter.NewYErrorBars(pts)
	if err != nil {
		return nil, err
	}
	eb.LineStyle.Width = vg.Points(1.2)
	eb.CapWidth = 0.3 * vg.Centimeter
	p.Add(eb)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YTop
	p.Y.Min, p.Y.Max = 0, math.Min(100, math.Ceil(top/10)*10+10)
	width := max(12*vg.Centimeter, 4*vg.Centimeter+vg.Length(len(names))*1.5*vg.Centimeter)
	return render(p, plot.NewLegend(), width, 10*vg.Centimeter, nil)
}
