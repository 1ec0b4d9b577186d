package report

import (
	"bytes"
	"encoding/csv"
	"errors"
	"image/png"
	"math"
	"strings"
	"testing"
)

// seedRuns are three seeds of two methods on two corruptions, numbers
// chosen so that the spreads are easy by hand.
func seedRuns() []SeedRun {
	run := func(seed uint64, sg, sc, tg, tc float64) SeedRun {
		return SeedRun{Seed: seed, Name: "seed-" + string(rune('0'+seed)), Records: []Record{
			rec("source", "gaussian_noise", 5, sg), rec("source", "contrast", 5, sc),
			rec("tent", "gaussian_noise", 5, tg), rec("tent", "contrast", 5, tc),
		}}
	}
	return []SeedRun{
		run(1, 10, 20, 12, 24),
		run(2, 12, 22, 15, 25),
		run(3, 14, 30, 18, 35),
	}
}

func TestCompareSeeds(t *testing.T) {
	c, err := CompareSeeds(seedRuns(), "source")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tables) != 1 || len(c.Tables[0].Rows) != 2 {
		t.Fatalf("%+v", c)
	}
	// By hand: source's Gaussian noise 10, 12, 14: mean 12, std
	// sqrt((4+0+4)/2) = 2. Source's means 15, 17, 22: mean 18, std
	// sqrt((9+1+16)/2) = sqrt(13). Tent's means 18, 20, 26.5: mean 21.5,
	// std sqrt((12.25+2.25+25)/2) = sqrt(19.75). Differences 3, 3, 4.5:
	// mean 3.5, std sqrt((0.25+0.25+1)/2) = sqrt(0.75).
	src, tent := c.Tables[0].Rows[0], c.Tables[0].Rows[1]
	for _, tc := range []struct {
		name       string
		got        Spread
		mean, std  float64
		wantValues []float64
	}{
		{"source gaussian_noise", *src.Cells[0], 12, 2, []float64{10, 12, 14}},
		{"source mean", src.Mean, 18, math.Sqrt(13), []float64{15, 17, 22}},
		{"tent mean", tent.Mean, 21.5, math.Sqrt(19.75), []float64{18, 20, 26.5}},
		{"tent vs source", *tent.VsSource, 3.5, math.Sqrt(0.75), []float64{3, 3, 4.5}},
		{"source vs source", *src.VsSource, 0, 0, []float64{0, 0, 0}},
	} {
		// 1e-12: sums of a few numbers below 100.
		if math.Abs(tc.got.Mean-tc.mean) > 1e-12 || math.Abs(tc.got.Std-tc.std) > 1e-12 || tc.got.Seeds != 3 {
			t.Errorf("%s: %+v, want mean %v, std %v over 3 seeds", tc.name, tc.got, tc.mean, tc.std)
		}
	}
	if c.Tables[0].Columns[0].Domain != "gaussian_noise" || c.Tables[0].Columns[1].Label != "Contr." {
		t.Errorf("columns %+v", c.Tables[0].Columns)
	}

	var md bytes.Buffer
	if err := c.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	want := `| Method | Seeds | Noise: Gauss. | Digital: Contr. |         Mean |     Δ Source |
|:-------|------:|--------------:|----------------:|-------------:|-------------:|
| source |     3 |  12.00 ± 2.00 |    24.00 ± 5.29 | 18.00 ± 3.61 |            – |
| tent   |     3 |  15.00 ± 3.00 |    28.00 ± 6.08 | 21.50 ± 4.44 | +3.50 ± 0.87 |

Accuracy (%): mean ± sample standard deviation (n−1) over 3 seeds (1, 2, 3); a row's Mean is over its per-seed means, Δ Source over its per-seed differences to source's.
`
	if md.String() != want {
		t.Errorf("Markdown:\n%s\nwant\n%s", md.String(), want)
	}

	var b bytes.Buffer
	if err := c.CSV(&b); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows[0], ","); got != "severity,method,column,mean,std,seeds,seed_1,seed_2,seed_3" {
		t.Errorf("CSV header %s", got)
	}
	if got := strings.Join(rows[len(rows)-1], ","); got != "5,tent,vs_source,3.5,0.8660254037844386,3,3,3,4.5" {
		t.Errorf("CSV last row %s", got)
	}
	if len(rows) != 1+2*4 {
		t.Errorf("%d CSV rows", len(rows))
	}

	pngs, err := c.Plots()
	if err != nil || len(pngs) != 1 {
		t.Fatalf("%d plots, %v", len(pngs), err)
	}
	if _, err := png.Decode(bytes.NewReader(pngs[0])); err != nil {
		t.Error(err)
	}
}

// One seed has no spread; without source there is no Δ column.
func TestCompareOneSeed(t *testing.T) {
	runs := seedRuns()[:1]
	for i := range runs[0].Records {
		runs[0].Records[i].Method = strings.Replace(runs[0].Records[i].Method, "source", "zero", 1)
	}
	c, err := CompareSeeds(runs, "source")
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	c.Markdown(&md)
	if !strings.Contains(md.String(), "| zero   |     1 |         10.00 |           20.00 | 15.00 |\n") || strings.Contains(md.String(), "Δ") {
		t.Errorf("Markdown:\n%s", md.String())
	}
}

// A seed that lacks a cell, or has one more, is refused naming it.
func TestCompareSeedsCells(t *testing.T) {
	runs := seedRuns()
	runs[2].Records = runs[2].Records[:3]
	_, err := CompareSeeds(runs, "source")
	if !errors.Is(err, ErrSeedCells) || !strings.Contains(err.Error(), "seed-3 (seed 3) lacks tent on contrast at severity 5") {
		t.Errorf("error %v", err)
	}
	runs = seedRuns()
	runs[1].Records = append(runs[1].Records, rec("tent", "fog", 5, 1))
	_, err = CompareSeeds(runs, "source")
	if !errors.Is(err, ErrSeedCells) || !strings.Contains(err.Error(), "seed-2 (seed 2) has tent on fog at severity 5") {
		t.Errorf("error %v", err)
	}
	if _, err := CompareSeeds(nil, "source"); err == nil {
		t.Error("no runs: no error")
	}
}
