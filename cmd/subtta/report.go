package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/report"
)

// reportOptions are the flags of report.
type reportOptions struct {
	out  string
	plot bool

	stdout, stderr io.Writer
}

// newReportCmd is `subtta report DIR...`: the seeds of one run compared.
func newReportCmd(stdout, stderr io.Writer) *cobra.Command {
	const summary = "the seeds of one eval run compared: mean ± std per cell, difference to source"
	o := &reportOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "report DIR...",
		Short: summary,
		Long: summary + "\n\n" +
			"Reads the results folders of the seeds of one run (eval --seed N, or eval --seeds 1,2,3) and prints the paper's\n" +
			"table with mean ± sample standard deviation over the seeds per cell and per mean, the number of seeds and the\n" +
			"difference to source; writes it into --out as report.md, report.csv and report.json (and report.png, --plot).\n" +
			"Refuses folders whose runs differ in anything but the seed (model, data, limit, ...), naming it, runs made\n" +
			"with other methods or corruptions, seeds of --no-shuffle (or --order) runs whose methods draw no random views\n" +
			"(every seed's results are the same, as eval --seeds refuses), and a results.jsonl with two records of one\n" +
			"method and domain or one that does not add up. Give the seed folders (OUT/seed-*), not the OUT of eval\n" +
			"--seeds. An earlier report's plots in --out that this report does not draw are removed.",
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(args) },
	}
	f := c.Flags()
	f.StringVar(&o.out, "out", "subtta-report", "folder the report is written into")
	f.BoolVar(&o.plot, "plot", false, "also draw report.png: each method's mean accuracy with error bars of ± one standard deviation")
	return c
}

// run compares the results folders dirs.
func (o *reportOptions) run(dirs []string) error {
	if len(dirs) == 0 {
		return usagef("want at least one results folder")
	}
	return writeReport(o.out, dirs, o.plot, false, o.stdout, o.stderr)
}

// writeReport compares the results folders dirs (eval.WriteSeedReport),
// writes the report into out and prints its table, with a warning where
// the seeds leave some methods' results the same (unless warned: the caller
// said so already, as eval --seeds does before its runs) and a line per
// plot of an earlier report removed from out.
func writeReport(out string, dirs []string, plot, warned bool, stdout, stderr io.Writer) error {
	r, err := eval.WriteSeedReport(out, dirs, plot)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Op == "mkdir" {
		return fmt.Errorf("--out: %w", pe) // the report folder
	}
	if err != nil {
		// "subtta report: eval: …" says where the code is, not the user.
		return errors.New(strings.TrimPrefix(err.Error(), "eval: "))
	}
	var b bytes.Buffer
	if err := r.Markdown(&b); err != nil {
		return err
	}
	stdout.Write(b.Bytes())
	if len(r.Same) > 0 && !warned {
		fmt.Fprintf(stderr, "warning: the runs were made with %s: the seeds streamed every domain in the same order, so the results of %s are the same for every seed (± 0 by construction)\n",
			r.Fixed, strings.Join(r.Same, ", "))
	}
	for _, dir := range slices.Sorted(maps.Keys(r.Unnamed)) {
		fmt.Fprintf(stderr, "warning: %s: %d records carry no run identity (written by an earlier build): taken as this folder's because its %s vouches for them, as eval takes them\n",
			dir, r.Unnamed[dir], eval.RunFile)
	}
	for _, p := range r.Removed {
		fmt.Fprintf(stderr, "removed %s: an earlier report's plot, which this report does not draw\n", p)
	}
	fmt.Fprintf(stderr, "%s compared; report in %s (%d files)\n", report.Seeds(len(r.Seeds)), out, len(r.Files))
	return nil
}
