package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// missingCell marks a (method, domain) without a record.
const missingCell = "–"

// Markdown writes the accuracies of recs as the paper's tables in GitHub
// Flavored Markdown, padded so that they also read well as plain text.
//
// Methods are rows, in the order they first appear in recs. Columns are
// the corruptions that occur, in the benchmark's order; the first column
// of each group is labelled with its group ("Noise: Gauss."). Domains that
// are not corruptions follow in first-appearance order, then the Mean:
// the mean accuracy over the columns the method has. A mean over fewer
// than all columns is marked with a trailing "*" and explained below the
// table. Accuracies are percentages with two decimals; a missing cell is
// "–". When recs hold several severities there is one table per severity,
// each under a "### Severity k" heading, and domains that are not
// corruptions get a last table of their own. A later record of the same
// (method, domain) replaces an earlier one.
func Markdown(w io.Writer, recs []Record) error {
	bw := bufio.NewWriter(w)
	for i, t := range tables(recs) {
		if i > 0 {
			bw.WriteString("\n")
		}
		if t.title != "" {
			fmt.Fprintf(bw, "### %s\n\n", t.title)
		}
		writeTable(bw, t)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: writing markdown: %w", err)
	}
	return nil
}

func writeTable(w io.Writer, t *table) {
	header := []string{"Method"}
	group := ""
	for _, c := range t.columns {
		label := c.label
		if c.group != group && c.group != "" {
			label = c.group + ": " + label
		}
		group = c.group
		header = append(header, label)
	}
	header = append(header, "Mean")

	rows := [][]string{header}
	incomplete := false
	for _, m := range t.methods {
		row := []string{m}
		for _, c := range t.columns {
			if a, ok := t.cells[m][c.key]; ok {
				row = append(row, fmt.Sprintf("%.2f", a))
			} else {
				row = append(row, missingCell)
			}
		}
		mean, _, complete := t.mean(m)
		cell := fmt.Sprintf("%.2f", mean)
		if !complete {
			cell += "*"
			incomplete = true
		}
		rows = append(rows, append(row, cell))
	}

	writeRows(w, rows)
	if incomplete {
		fmt.Fprintf(w, "\nMeans marked with * average only the columns present for the method (%s marks a missing cell).\n", missingCell)
	}
}

// writeRow writes one table row, the first cell left-aligned and the others
// right-aligned to width.
func writeRow(w io.Writer, row []string, width []int) {
	var b strings.Builder
	b.WriteString("|")
	for j, s := range row {
		pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(s))
		b.WriteString(" ")
		if j == 0 {
			b.WriteString(s + pad)
		} else {
			b.WriteString(pad + s)
		}
		b.WriteString(" |")
	}
	b.WriteString("\n")
	io.WriteString(w, b.String())
}
