package report

import (
	"bytes"
	"fmt"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/internal/atomicfile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// File names of the figures Plots writes.
const (
	AccuracyPlot              = "accuracy.png"
	PrincipalAnglesPlot       = "principal_angles.png"
	SemanticConcentrationPlot = "semantic_concentration.png"
	ClassCosinePlot           = "class_cosines.png"
	LatencyPlot               = "latency.png"
)

// Plots draws figures of recs as PNG files in dir, creating dir if needed,
// and returns the paths written:
//
//   - AccuracyPlot: the accuracy on every domain as grouped bars, one
//     series per method (per method and severity when there are several);
//   - PrincipalAnglesPlot: per method, the histogram of the principal
//     angles in degrees between the visual and the textual subspaces,
//     arccos of every cosine of every batch and domain;
//   - SemanticConcentrationPlot: per method, the histogram of the
//     per-batch semantic concentration;
//   - ClassCosinePlot: per method, the histograms of the per-batch mean
//     cosine to the predicted class's text feature and to the ground-truth
//     class's;
//   - LatencyPlot: per method, the mean seconds per batch of each phase it
//     times (t_Sub is "align", t_TTA "adapt") as grouped bars.
//
// Histograms share their bins across methods and show the fraction of the
// method's values per bin, so that methods with different numbers of
// batches compare; they are drawn as overlaid step outlines. Methods
// without diagnostics are left out of a histogram, and a figure with no
// data at all is not written. A later record of the same (method, domain)
// replaces an earlier one. The output depends only on recs.
func Plots(dir string, recs []Record) ([]string, error) {
	recs = Latest(recs)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: plots: %w", err)
	}
	var paths []string
	save := func(name string, png []byte) error {
		path := filepath.Join(dir, name)
		if err := atomicfile.Write(path, png); err != nil {
			return fmt.Errorf("report: plots: %w", err)
		}
		paths = append(paths, path)
		return nil
	}

	if png, err := accuracyPlot(recs); err != nil {
		return paths, fmt.Errorf("report: %s: %w", AccuracyPlot, err)
	} else if png != nil {
		if err := save(AccuracyPlot, png); err != nil {
			return paths, err
		}
	}

	angles := perMethod(recs, func(r Record) []float64 {
		var deg []float64
		for _, batch := range r.PrincipalCosines {
			for _, c := range batch {
				// Clamped: rounding can put a cosine just above 1.
				deg = append(deg, math.Acos(math.Max(-1, math.Min(1, c)))*180/math.Pi)
			}
		}
		return deg
	})
	if png, err := histogramPlot(angles, histogramStyle{
		title:  "Principal angles between the visual and textual subspaces",
		xLabel: "principal angle (degrees)",
		yLabel: "fraction of angles",
		bins:   45,
		lo:     0, hi: 90,
		whole: true,
	}); err != nil {
		return paths, fmt.Errorf("report: %s: %w", PrincipalAnglesPlot, err)
	} else if png != nil {
		if err := save(PrincipalAnglesPlot, png); err != nil {
			return paths, err
		}
	}

	conc := perMethod(recs, func(r Record) []float64 { return r.SemanticConcentration })
	if png, err := histogramPlot(conc, histogramStyle{
		title:  "Semantic concentration per batch",
		xLabel: "semantic concentration ||f P_T||^2 / ||f||^2",
		yLabel: "fraction of batches",
		bins:   30,
		lo:     0, hi: 1,
	}); err != nil {
		return paths, fmt.Errorf("report: %s: %w", SemanticConcentrationPlot, err)
	} else if png != nil {
		if err := save(SemanticConcentrationPlot, png); err != nil {
			return paths, err
		}
	}

	var cos []series
	for _, s := range perMethod(recs, func(r Record) []float64 { return r.PredictedClassCosine }) {
		cos = append(cos, series{name: s.name + ", predicted class", values: s.values})
	}
	for _, s := range perMethod(recs, func(r Record) []float64 { return r.TrueClassCosine }) {
		cos = append(cos, series{name: s.name + ", true class", values: s.values})
	}
	if png, err := histogramPlot(cos, histogramStyle{
		title:  "Cosine of the image features to a class's text feature, per batch",
		xLabel: "cos(f, t)",
		yLabel: "fraction of batches",
		bins:   40,
		lo:     -1, hi: 1,
	}); err != nil {
		return paths, fmt.Errorf("report: %s: %w", ClassCosinePlot, err)
	} else if png != nil {
		if err := save(ClassCosinePlot, png); err != nil {
			return paths, err
		}
	}
	if png, err := latencyPlot(Diagnostics(recs)); err != nil {
		return paths, fmt.Errorf("report: %s: %w", LatencyPlot, err)
	} else if png != nil {
		if err := save(LatencyPlot, png); err != nil {
			return paths, err
		}
	}
	return paths, nil
}

// series is the values of one method, for a histogram.
type series struct {
	name   string
	values []float64
}

// perMethod gathers values(r) over recs by method, in first-appearance
// order, leaving out non-finite values and methods without any.
func perMethod(recs []Record, values func(Record) []float64) []series {
	var out []series
	at := make(map[string]int)
	for _, r := range recs {
		i, ok := at[r.Method]
		if !ok {
			i = len(out)
			at[r.Method] = i
			out = append(out, series{name: r.Method})
		}
		for _, v := range values(r) {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				out[i].values = append(out[i].values, v)
			}
		}
	}
	kept := out[:0]
	for _, s := range out {
		if len(s.values) > 0 {
			kept = append(kept, s)
		}
	}
	return kept
}

// palette is Tableau 10: distinct colours that survive grey-scale
// printing reasonably; series beyond it repeat colours with dashes.
var palette = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff},
	{0x76, 0xb7, 0xb2, 0xff}, {0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff},
	{0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff}, {0x9c, 0x75, 0x5f, 0xff},
	{0xba, 0xb0, 0xac, 0xff},
}

func seriesColor(i int) color.Color { return palette[i%len(palette)] }

func seriesDashes(i int) []vg.Length { return plotutil.Dashes(i / len(palette)) }

// histogramStyle describes a histogram figure. The bins cover [lo, hi],
// narrowed to the data (to whole units when whole is set) so that values
// crowded in a corner still show their shape.
type histogramStyle struct {
	title, xLabel, yLabel string
	bins                  int
	lo, hi                float64
	whole                 bool
}

// histogramPlot draws the overlaid step histograms of ss and returns the
// PNG, or nil when ss is empty.
func histogramPlot(ss []series, st histogramStyle) ([]byte, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, v := range s.values {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if st.whole {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = math.Max(lo, st.lo), math.Min(hi, st.hi)
	span := (st.hi - st.lo) / 100
	if st.whole {
		span = max(span, 1)
	}
	if hi-lo < span {
		// All values (nearly) equal: give the bins a width that shows,
		// inside [st.lo, st.hi].
		lo = min(max((lo+hi-span)/2, st.lo), st.hi-span)
		hi = lo + span
	}
	width := (hi - lo) / float64(st.bins)

	p := newPlot(st.title, st.xLabel, st.yLabel)
	p.Y.Min = 0
	legend := plot.NewLegend()
	for i, s := range ss {
		counts := make([]float64, st.bins)
		for _, v := range s.values {
			b := int((v - lo) / width)
			counts[min(max(b, 0), st.bins-1)]++
		}
		// The step outline: up the left edge of each bin, across its top.
		pts := plotter.XYs{{X: lo, Y: 0}}
		for b, c := range counts {
			f := c / float64(len(s.values))
			x0 := lo + float64(b)*width
			pts = append(pts, plotter.XY{X: x0, Y: f}, plotter.XY{X: x0 + width, Y: f})
		}
		pts = append(pts, plotter.XY{X: hi, Y: 0})
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.LineStyle = draw.LineStyle{Color: seriesColor(i), Width: vg.Points(1.5), Dashes: seriesDashes(i)}
		p.Add(l)
		legend.Add(fmt.Sprintf("%s (%d)", s.name, len(s.values)), l)
	}
	return render(p, legend, 18*vg.Centimeter, 11*vg.Centimeter, nil)
}

// accuracyPlot draws the accuracies as grouped bars and returns the PNG,
// or nil when there are no records.
func accuracyPlot(recs []Record) ([]byte, error) {
	ts := tables(recs)
	if len(ts) == 0 {
		return nil, nil
	}
	// The x axis: the union of the tables' columns, the corruptions in the
	// benchmark's order, then the other columns in table order.
	var cols, extra []column
	colAt := make(map[string]int)
	for _, t := range ts {
		for _, c := range t.columns {
			if _, ok := colAt[c.key]; !ok {
				colAt[c.key] = -1
				if c.group == "" {
					extra = append(extra, c)
				}
			}
		}
	}
	for _, name := range corrupt.Names() {
		if _, ok := colAt[name]; ok {
			cols = append(cols, column{key: name, label: name})
		}
	}
	cols = append(cols, extra...)
	for i, c := range cols {
		colAt[c.key] = i
	}
	type bar struct {
		series int
		col    int
		acc    float64
	}
	var names []string
	var bars []bar
	for _, t := range ts {
		for _, m := range t.methods {
			name := m
			if len(ts) > 1 {
				name = fmt.Sprintf("%s, %s", m, strings.ToLower(t.title))
			}
			for _, c := range t.columns {
				if a, ok := t.cells[m][c.key]; ok {
					bars = append(bars, bar{len(names), colAt[c.key], a})
				}
			}
			names = append(names, name)
		}
	}

	p := newPlot("Accuracy per domain", "", "accuracy (%)")
	labels := make([]string, len(cols))
	for i, c := range cols {
		labels[i] = c.label
	}
	p.NominalX(labels...)
	p.X.Min, p.X.Max = -0.5, float64(len(cols))-0.5
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YTop
	p.Y.Min, p.Y.Max = 0, 100

	charts := make([]*plotter.BarChart, len(bars))
	legend := plot.NewLegend()
	thumbs := make([]*plotter.BarChart, len(names))
	for i, b := range bars {
		c, err := plotter.NewBarChart(plotter.Values{b.acc}, 1) // width set in layout
		if err != nil {
			return nil, err
		}
		c.XMin = float64(b.col)
		c.Color = seriesColor(b.series)
		c.LineStyle.Width = 0
		charts[i] = c
		p.Add(c)
		if thumbs[b.series] == nil {
			thumbs[b.series] = c
		}
	}
	for i, n := range names {
		legend.Add(n, thumbs[i])
	}
	// Bars fill 80% of a column's width, which is known only once the
	// plot is laid out on its canvas.
	layout := func(dc draw.Canvas) {
		unit := dc.Size().X / vg.Length(len(cols))
		w := 0.8 * unit / vg.Length(len(names))
		for i, c := range charts {
			c.Width = w
			c.Offset = (vg.Length(bars[i].series) - vg.Length(len(names)-1)/2) * w
		}
	}
	width := max(18*vg.Centimeter, 4*vg.Centimeter+vg.Length(len(cols))*max(1.2*vg.Centimeter, vg.Length(len(names))*0.25*vg.Centimeter))
	return render(p, legend, width, 12*vg.Centimeter, layout)
}

func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	g := plotter.NewGrid()
	g.Vertical.Color = nil
	p.Add(g)
	return p
}

// render draws p with legend to its right on a w×h canvas and returns the
// PNG. layout, when not nil, is called with p's data canvas before p is
// drawn.
func render(p *plot.Plot, legend plot.Legend, w, h vg.Length, layout func(draw.Canvas)) ([]byte, error) {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(120))
	dc := draw.New(img)
	pad := 0.3 * vg.Centimeter
	legend.Top, legend.Left = true, true
	lw := legend.Rectangle(dc).Size().X
	area := draw.Crop(dc, pad, -(lw + 3*pad), pad, -pad)
	if layout != nil {
		layout(p.DataCanvas(area))
	}
	p.Draw(area)
	legend.Draw(draw.Crop(dc, w-lw-2*pad, -pad, pad, -2*pad))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// latencyPlot draws each method's mean seconds per batch of each phase
// as grouped bars, or returns nil when no method times any.
func latencyPlot(ds []MethodDiagnostics) ([]byte, error) {
	var methods []string
	phaseSet := map[string]bool{}
	for _, d := range ds {
		if len(d.BatchSeconds) == 0 {
			continue
		}
		methods = append(methods, d.Method)
		for k := range d.BatchSeconds {
			phaseSet[k] = true
		}
	}
	if len(methods) == 0 {
		return nil, nil
	}
	phases := slices.Sorted(maps.Keys(phaseSet))
	p := newPlot("Time per batch by phase (t_Sub: align, t_TTA: adapt)", "", "seconds per batch")
	p.NominalX(methods...)
	p.Y.Min = 0
	legend := plot.NewLegend()
	width := vg.Points(48 / float64(len(phases)))
	for i, ph := range phases {
		vals := make(plotter.Values, 0, len(methods))
		for _, d := range ds {
			if len(d.BatchSeconds) > 0 {
				vals = append(vals, d.BatchSeconds[ph])
			}
		}
		c, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		c.Color = seriesColor(i)
		c.LineStyle.Width = 0
		c.Offset = width * vg.Length(float64(i)-float64(len(phases)-1)/2)
		p.Add(c)
		legend.Add(ph, c)
	}
	return render(p, legend, 18*vg.Centimeter, 11*vg.Centimeter, nil)
}
