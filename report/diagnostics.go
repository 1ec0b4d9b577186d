package report

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// MethodDiagnostics are a method's diagnostics over its domains: the
// cosine summary weighted by images, and the mean seconds per batch of
// each phase weighted by batches (see Record.BatchSeconds).
type MethodDiagnostics struct {
	Method       string             `json:"method"`
	Cosines      *CosineSummary     `json:"cosines,omitempty"`
	BatchSeconds map[string]float64 `json:"batch_seconds,omitempty"`
}

// Diagnostics gathers the diagnostics of recs by method, in
// first-appearance order; methods without any are left out. A later record
// of the same (method, domain) replaces an earlier one.
func Diagnostics(recs []Record) []MethodDiagnostics {
	recs = Latest(recs)
	var out []MethodDiagnostics
	type acc struct {
		cos          CosineSummary
		secs         map[string]float64
		batches      int
		hasCos, hasT bool
	}
	var order []string
	accs := map[string]*acc{}
	for _, r := range recs {
		a := accs[r.Method]
		if a == nil {
			a = &acc{secs: map[string]float64{}}
			accs[r.Method] = a
			order = append(order, r.Method)
		}
		if c := r.Cosines; c != nil && c.Correct+c.Wrong > 0 {
			a.hasCos = true
			a.cos.add(c.Sums())
		}
		if r.Batches > 0 && len(r.BatchSeconds) > 0 {
			a.hasT = true
			a.batches += r.Batches
			for k, v := range r.BatchSeconds {
				a.secs[k] += v * float64(r.Batches)
			}
		}
	}
	for _, m := range order {
		a := accs[m]
		if !a.hasCos && !a.hasT {
			continue
		}
		d := MethodDiagnostics{Method: m}
		if a.hasCos {
			d.Cosines = a.cos.Means()
		}
		if a.hasT {
			d.BatchSeconds = map[string]float64{}
			for k, v := range a.secs {
				d.BatchSeconds[k] = v / float64(a.batches)
			}
		}
		out = append(out, d)
	}
	return out
}

// DiagnosticsMarkdown writes the diagnostics of recs (Diagnostics) as a
// Markdown table under a "### Diagnostics" heading: per method the mean
// cosine of the prediction features to the predicted class's text feature
// and to the ground-truth class's, the former for correct and the latter
// two for wrong predictions, and the mean seconds per batch of the
// subspace step (t_Sub, "align") and the adaptation step (t_TTA, "adapt").
// It writes nothing when no record has diagnostics.
func DiagnosticsMarkdown(w io.Writer, recs []Record) error {
	ds := Diagnostics(recs)
	if len(ds) == 0 {
		return nil
	}
	rows := [][]string{{"Method", "cos pred", "cos true", "correct: cos pred", "wrong: cos pred", "wrong: cos true", "t_Sub (s/batch)", "t_TTA (s/batch)", "batch (s)"}}
	cell := func(ok bool, v float64, f string) string {
		if !ok {
			return missingCell
		}
		return fmt.Sprintf(f, v)
	}
	for _, d := range ds {
		c := d.Cosines
		row := []string{d.Method,
			cell(c != nil, val(c, func(c *CosineSummary) float64 { return c.Predicted }), "%.4f"),
			cell(c != nil, val(c, func(c *CosineSummary) float64 { return c.True }), "%.4f"),
			cell(c != nil && c.Correct > 0, val(c, func(c *CosineSummary) float64 { return c.CorrectPredicted }), "%.4f"),
			cell(c != nil && c.Wrong > 0, val(c, func(c *CosineSummary) float64 { return c.WrongPredicted }), "%.4f"),
			cell(c != nil && c.Wrong > 0, val(c, func(c *CosineSummary) float64 { return c.WrongTrue }), "%.4f"),
		}
		sub, okSub := d.BatchSeconds["align"]
		tta, okTTA := d.BatchSeconds["adapt"]
		var total float64
		for _, k := range slices.Sorted(maps.Keys(d.BatchSeconds)) {
			total += d.BatchSeconds[k]
		}
		row = append(row, cell(okSub, sub, "%.3f"), cell(okTTA, tta, "%.3f"), cell(len(d.BatchSeconds) > 0, total, "%.3f"))
		rows = append(rows, row)
	}
	bw := bufio.NewWriter(w)
	fmt.Fprint(bw, "### Diagnostics\n\n")
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for j, s := range row {
			width[j] = max(width[j], utf8.RuneCountInString(s), 3)
		}
	}
	writeRow(bw, rows[0], width)
	sep := ""
	for j, n := range width {
		if j == 0 {
			sep += "|:" + strings.Repeat("-", n+1)
		} else {
			sep += "|" + strings.Repeat("-", n+1) + ":"
		}
	}
	fmt.Fprint(bw, sep+"|\n")
	for _, row := range rows[1:] {
		writeRow(bw, row, width)
	}
	fmt.Fprint(bw, "\ncos pred and cos true: mean cosine of the prediction features to the text feature of the predicted and of the ground-truth class; t_Sub and t_TTA: mean seconds per batch of the subspace alignment and of the adaptation step; batch: of every phase the method times.\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: writing diagnostics: %w", err)
	}
	return nil
}

func val(c *CosineSummary, f func(*CosineSummary) float64) float64 {
	if c == nil {
		return 0
	}
	return f(c)
}
