package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiagnostics: cosines are averaged over images, times over batches,
// across a method's domains; the Markdown table and the plots show them.
func TestDiagnostics(t *testing.T) {
	recs := []Record{
		{Method: "subtta-m", Domain: "a", Corruption: "fog", Severity: 5, Samples: 4, Accuracy: 50, Batches: 1,
			Cosines:      &CosineSummary{Correct: 2, Wrong: 2, Predicted: 0.3, True: 0.2, CorrectPredicted: 0.4, WrongPredicted: 0.2, WrongTrue: 0.0},
			BatchSeconds: map[string]float64{"align": 0.2, "adapt": 0.1}, PredictedClassCosine: []float64{0.3}, TrueClassCosine: []float64{0.2}},
		{Method: "subtta-m", Domain: "b", Corruption: "snow", Severity: 5, Samples: 2, Accuracy: 100, Batches: 3,
			Cosines:      &CosineSummary{Correct: 2, Predicted: 0.6, True: 0.6, CorrectPredicted: 0.6},
			BatchSeconds: map[string]float64{"align": 0.4, "adapt": 0.1}, PredictedClassCosine: []float64{0.6}, TrueClassCosine: []float64{0.6}},
		{Method: "source", Domain: "a", Corruption: "fog", Severity: 5, Samples: 4, Accuracy: 25},
	}
	ds := Diagnostics(recs)
	if len(ds) != 1 || ds[0].Method != "subtta-m" {
		t.Fatalf("diagnostics %+v", ds)
	}
	c := ds[0].Cosines
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	if c.Correct != 4 || c.Wrong != 2 || !near(c.Predicted, (0.3*4+0.6*2)/6) || !near(c.True, (0.2*4+0.6*2)/6) ||
		!near(c.CorrectPredicted, (0.4*2+0.6*2)/4) || !near(c.WrongPredicted, 0.2) || !near(c.WrongTrue, 0) {
		t.Errorf("cosines %+v", c)
	}
	if s := ds[0].BatchSeconds; !near(s["align"], (0.2+0.4*3)/4) || !near(s["adapt"], 0.1) {
		t.Errorf("batch seconds %v", s)
	}
	var b strings.Builder
	if err := DiagnosticsMarkdown(&b, recs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### Diagnostics", "| subtta-m", "0.4000", "0.350", "t_Sub"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "| source") {
		t.Errorf("a method without diagnostics has a row:\n%s", b.String())
	}
	dir := t.TempDir()
	if _, err := Plots(dir, recs); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{ClassCosinePlot, LatencyPlot} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if s := NewSummary(nil, recs); len(s.Diagnostics) != 1 || s.Records[0].TrueClassCosine != nil {
		t.Errorf("summary: %d diagnostics, record keeps its per-batch cosines", len(s.Diagnostics))
	}
}
