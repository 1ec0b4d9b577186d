package report

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// TrainingPoint is one epoch of a training run, for TrainingPlot.
type TrainingPoint struct {
	Epoch    int
	TrainAcc float64 // fractions in [0, 1]
	TestAcc  float64 // NaN or 0 with HasTest unset when not measured
	HasTest  bool
}

// TrainingPlot draws the training and test accuracy per epoch as lines and
// returns the PNG.
func TrainingPlot(points []TrainingPoint) ([]byte, error) {
	if len(points) == 0 {
		return nil, fmt.Errorf("report: no epochs to plot")
	}
	p := newPlot("Accuracy per epoch", "epoch", "accuracy (%)")
	p.Y.Min, p.Y.Max = 0, 100
	legend := plot.NewLegend()
	var train, test plotter.XYs
	for _, pt := range points {
		train = append(train, plotter.XY{X: float64(pt.Epoch), Y: 100 * pt.TrainAcc})
		if pt.HasTest {
			test = append(test, plotter.XY{X: float64(pt.Epoch), Y: 100 * pt.TestAcc})
		}
	}
	for i, s := range []struct {
		name string
		xys  plotter.XYs
	}{{"training (augmented, one caption per class)", train}, {"test, zero-shot (18 templates)", test}} {
		if len(s.xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = seriesColor(i), seriesColor(i)
		p.Add(l, pts)
		legend.Add(s.name, l, pts)
	}
	return render(p, legend, 16*vg.Centimeter, 10*vg.Centimeter, nil)
}
