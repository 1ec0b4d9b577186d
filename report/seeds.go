package report

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/stat"
)

// ErrSeedCells: the runs of a comparison do not hold the same cells.
var ErrSeedCells = errors.New("report: the seeds' results differ in what they hold")

// SeedRun is the records of one seed of a run, from the folder Name.
type SeedRun struct {
	Seed    uint64
	Name    string
	Records []Record
}

// Spread is a number over seeds: the mean of Values (one per seed, in
// the Comparison's seed order), their sample standard deviation (n−1 in
// the denominator; 0 for one seed) and their number.
type Spread struct {
	Mean   float64   `json:"mean"`
	Std    float64   `json:"std"`
	Seeds  int       `json:"seeds"`
	Values []float64 `json:"values"`
}

func newSpread(values []float64) Spread {
	s := Spread{Seeds: len(values), Values: values}
	if len(values) == 1 {
		s.Mean = values[0]
	} else {
		s.Mean, s.Std = stat.MeanStdDev(values, nil)
	}
	return s
}

// format writes s as "mean ± std" with two decimals, sign with a sign;
// one seed has no spread.
func (s Spread) format(sign bool) string {
	f := "%.2f"
	if sign {
		f = "%+.2f"
	}
	if s.Seeds < 2 {
		return fmt.Sprintf(f, s.Mean)
	}
	return fmt.Sprintf(f+" ± %.2f", s.Mean, s.Std)
}

// SeedColumn is a domain column of a SeedTable: a corruption's name, or
// another domain's.
type SeedColumn struct {
	Domain string `json:"domain"`
	Label  string `json:"label"`
	Group  string `json:"group,omitempty"`
}

// SeedRow is a method's row: a Spread per column (nil where no seed has
// the cell), of the mean over the columns the method has (Complete when
// it has them all), and of the difference of that mean to the baseline's,
// seed by seed (nil without a source row).
type SeedRow struct {
	Method   string    `json:"method"`
	Cells    []*Spread `json:"cells"`
	Mean     Spread    `json:"mean"`
	Complete bool      `json:"complete"`
	VsSource *Spread   `json:"vs_source,omitempty"`
}

// SeedTable is the paper's table of one severity, over seeds.
type SeedTable struct {
	Title    string       `json:"title,omitempty"`
	Severity int          `json:"severity"` // 0 for domains that are not corruptions
	Columns  []SeedColumn `json:"columns"`
	Rows     []SeedRow    `json:"rows"`
}

// Comparison is the paper's tables with mean ± standard deviation over
// the seeds of one run (CompareSeeds).
type Comparison struct {
	// Baseline is the method the others are measured against (the frozen
	// model, tta.SourceName), as CompareSeeds was given it.
	Baseline string      `json:"baseline"`
	Seeds    []uint64    `json:"seeds"`
	Folders  []string    `json:"folders"`
	Tables   []SeedTable `json:"tables"`
}

// CompareSeeds arranges the records of runs, the seeds of one run, as the
// paper's tables (see Markdown) with each cell the Spread of its
// accuracies over the seeds; a row's mean is the Spread of its per-seed
// means. Runs are taken in the order given, a later record of the same
// (method, domain) replacing an earlier one. Every run must hold the same
// (method, domain) cells: a seed missing one (an unfinished run) is
// refused, naming it, with ErrSeedCells. Each method's mean is also
// measured against baseline's, seed by seed, where a table has its row.
func CompareSeeds(runs []SeedRun, baseline string) (*Comparison, error) {
	if len(runs) == 0 {
		return nil, errors.New("report: no runs to compare")
	}
	c := &Comparison{Baseline: baseline}
	per := make([][]*table, len(runs))
	for i, r := range runs {
		c.Seeds = append(c.Seeds, r.Seed)
		c.Folders = append(c.Folders, r.Name)
		per[i] = tables(r.Records)
	}
	if err := sameCells(runs, per); err != nil {
		return nil, err
	}
	for ti, t := range per[0] {
		st := SeedTable{Title: t.title, Severity: t.severity}
		for _, col := range t.columns {
			st.Columns = append(st.Columns, SeedColumn{Domain: strings.TrimPrefix(col.key, "\x00"), Label: col.label, Group: col.group})
		}
		means := map[string][]float64{} // method → per-seed mean
		for _, m := range t.methods {
			row := SeedRow{Method: m, Complete: true}
			for _, col := range t.columns {
				var vals []float64
				for i := range runs {
					if a, ok := per[i][ti].cells[m][col.key]; ok {
						vals = append(vals, a)
					}
				}
				if len(vals) == 0 {
					row.Cells = append(row.Cells, nil)
					row.Complete = false
					continue
				}
				s := newSpread(vals)
				row.Cells = append(row.Cells, &s)
			}
			for i := range runs {
				mean, _, _ := per[i][ti].mean(m)
				means[m] = append(means[m], mean)
			}
			row.Mean = newSpread(means[m])
			st.Rows = append(st.Rows, row)
		}
		if src, ok := means[c.Baseline]; ok {
			for j := range st.Rows {
				d := make([]float64, len(runs))
				for i := range d {
					d[i] = means[st.Rows[j].Method][i] - src[i]
				}
				s := newSpread(d)
				st.Rows[j].VsSource = &s
			}
		}
		c.Tables = append(c.Tables, st)
	}
	return c, nil
}

// sameCells refuses runs whose tables differ from the first run's.
func sameCells(runs []SeedRun, per [][]*table) error {
	cells := func(ts []*table) map[string]bool {
		out := map[string]bool{}
		for _, t := range ts {
			for m, row := range t.cells {
				for k := range row {
					out[m+" on "+strings.TrimPrefix(k, "\x00")+sevSuffix(t)] = true
				}
			}
		}
		return out
	}
	first := cells(per[0])
	for i := 1; i < len(runs); i++ {
		other := cells(per[i])
		for _, k := range slices.Sorted(mapKeys(first)) {
			if !other[k] {
				return fmt.Errorf("%w: %s (seed %d) lacks %s, which %s (seed %d) has: finish its run, or leave it out",
					ErrSeedCells, runs[i].Name, runs[i].Seed, k, runs[0].Name, runs[0].Seed)
			}
		}
		for _, k := range slices.Sorted(mapKeys(other)) {
			if !first[k] {
				return fmt.Errorf("%w: %s (seed %d) has %s, which %s (seed %d) lacks: finish its run, or leave it out",
					ErrSeedCells, runs[i].Name, runs[i].Seed, k, runs[0].Name, runs[0].Seed)
			}
		}
	}
	return nil
}

func sevSuffix(t *table) string {
	if t.severity == 0 {
		return ""
	}
	return fmt.Sprintf(" at severity %d", t.severity)
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// hasSource reports whether a table of c has a baseline row.
func (c *Comparison) hasSource() bool {
	for _, t := range c.Tables {
		for _, r := range t.Rows {
			if r.VsSource != nil {
				return true
			}
		}
	}
	return false
}

// seedList is c's seeds as "1, 2, 3".
func (c *Comparison) seedList() string {
	s := make([]string, len(c.Seeds))
	for i, x := range c.Seeds {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ", ")
}

// Markdown writes c's tables as Markdown writes a run's: methods as rows,
// the domains as columns, then the Mean, each cell "mean ± std" over the
// seeds; a Seeds column counts them and, when a source row is present, a
// last column "Δ Source" gives the difference of the row's mean to
// source's, mean ± std over the seeds' differences. A note under the
// tables names the seeds and the statistic.
func (c *Comparison) Markdown(w io.Writer) error {
	var b strings.Builder
	vs := c.hasSource()
	for i, t := range c.Tables {
		if i > 0 {
			b.WriteString("\n")
		}
		if t.Title != "" {
			fmt.Fprintf(&b, "### %s\n\n", t.Title)
		}
		header := []string{"Method", "Seeds"}
		group := ""
		for _, col := range t.Columns {
			label := col.Label
			if col.Group != group && col.Group != "" {
				label = col.Group + ": " + label
			}
			group = col.Group
			header = append(header, label)
		}
		header = append(header, "Mean")
		if vs {
			header = append(header, "Δ Source")
		}
		rows := [][]string{header}
		incomplete := false
		for _, r := range t.Rows {
			row := []string{r.Method, strconv.Itoa(r.Mean.Seeds)}
			for _, s := range r.Cells {
				if s == nil {
					row = append(row, missingCell)
				} else {
					row = append(row, s.format(false))
				}
			}
			mean := r.Mean.format(false)
			if !r.Complete {
				mean += "*"
				incomplete = true
			}
			row = append(row, mean)
			if vs {
				if r.VsSource == nil || r.Method == c.Baseline {
					row = append(row, missingCell)
				} else {
					row = append(row, r.VsSource.format(true))
				}
			}
			rows = append(rows, row)
		}
		writeRows(&b, rows)
		if incomplete {
			fmt.Fprintf(&b, "\nMeans marked with * average only the columns present for the method (%s marks a missing cell).\n", missingCell)
		}
	}
	fmt.Fprintf(&b, "\nAccuracy (%%): mean ± sample standard deviation (n−1) over %s (%s); a row's Mean is over its per-seed means",
		Seeds(len(c.Seeds)), c.seedList())
	if vs {
		b.WriteString(", Δ Source over its per-seed differences to source's")
	}
	b.WriteString(".\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("report: writing markdown: %w", err)
	}
	return nil
}

// writeRows writes rows[0] as the header and the rest as rows of a
// Markdown table, each column padded to its widest cell (3 at least),
// "|" escaped, the first column left-aligned and the others right-aligned.
func writeRows(w io.Writer, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for j, s := range row {
			row[j] = strings.ReplaceAll(s, "|", `\|`)
			width[j] = max(width[j], len([]rune(row[j])), 3)
		}
	}
	writeRow(w, rows[0], width)
	var sep strings.Builder
	for j, n := range width {
		if j == 0 {
			sep.WriteString("|:" + strings.Repeat("-", n+1))
		} else {
			sep.WriteString("|" + strings.Repeat("-", n+1) + ":")
		}
	}
	sep.WriteString("|\n")
	io.WriteString(w, sep.String())
	for _, row := range rows[1:] {
		writeRow(w, row, width)
	}
}

// CSV writes c in long format: one row per table cell, mean and
// difference to source, with its severity (0 for other domains), method,
// column (a domain, "mean" or "vs_source"), mean, standard deviation,
// number of seeds, then the value of each seed under "seed_N".
func (c *Comparison) CSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	header := []string{"severity", "method", "column", "mean", "std", "seeds"}
	for _, s := range c.Seeds {
		header = append(header, "seed_"+strconv.FormatUint(s, 10))
	}
	cw.Write(header)
	line := func(sev int, method, col string, s Spread) {
		row := []string{strconv.Itoa(sev), method, col, formatFloat(s.Mean), formatFloat(s.Std), strconv.Itoa(s.Seeds)}
		for _, v := range s.Values {
			row = append(row, formatFloat(v))
		}
		cw.Write(row)
	}
	for _, t := range c.Tables {
		for _, r := range t.Rows {
			for j, s := range r.Cells {
				if s != nil {
					line(t.Severity, r.Method, t.Columns[j].Domain, *s)
				}
			}
			line(t.Severity, r.Method, "mean", r.Mean)
			if r.VsSource != nil {
				line(t.Severity, r.Method, "vs_source", *r.VsSource)
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("report: writing csv: %w", err)
	}
	return nil
}

// JSON writes c as indented JSON followed by a newline.
func (c *Comparison) JSON(w io.Writer) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("report: comparison: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("report: writing comparison: %w", err)
	}
	return nil
}

// Seeds is "1 seed" or "N seeds".
func Seeds(n int) string {
	if n == 1 {
		return "1 seed"
	}
	return fmt.Sprintf("%d seeds", n)
}
