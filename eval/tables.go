package eval

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/subtta/subtta/report"
)

// writeTables writes the Markdown table, the CSV and the JSON summary of all
// records and, with cfg.Plot, the plots; it returns the paths written.
func writeTables(cfg Config, recs []report.Record, sum *Summary) ([]string, error) {
	var files []string
	write := func(name string, fill func(*bytes.Buffer) error) error {
		var b bytes.Buffer
		if err := fill(&b); err != nil {
			return fmt.Errorf("eval: %s: %w", name, err)
		}
		path := filepath.Join(cfg.Out, name)
		if err := writeFileAtomic(path, b.Bytes()); err != nil {
			return err
		}
		files = append(files, path)
		return nil
	}
	if err := write(MarkdownFile, func(b *bytes.Buffer) error {
		if err := report.Markdown(b, recs); err != nil {
			return err
		}
		if len(report.Diagnostics(recs)) == 0 {
			return nil
		}
		b.WriteString("\n")
		return report.DiagnosticsMarkdown(b, recs)
	}); err != nil {
		return files, err
	}
	if err := write(CSVFile, func(b *bytes.Buffer) error { return report.CSV(b, recs) }); err != nil {
		return files, err
	}
	s := report.NewSummary(cfg, recs)
	s.Started, s.Finished = sum.Started, sum.Finished
	s.Command = sum.command
	env := report.CurrentEnvironment()
	s.Environment = &env
	if err := write(JSONFile, func(b *bytes.Buffer) error { return report.WriteJSON(b, s) }); err != nil {
		return files, err
	}
	if cfg.Plot {
		plots, err := report.Plots(filepath.Join(cfg.Out, PlotsDir), recs)
		files = append(files, plots...)
		if err != nil {
			return files, fmt.Errorf("eval: plots: %w", err)
		}
	}
	return files, nil
}
