package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/subtta/subtta/eval"
)

// runReport is `subtta report DIR...`: the seeds of one run compared.
func runReport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("report", "DIR...\n\nReads the results folders of the seeds of one run (eval --seed N, or eval --seeds 1,2,3) and prints the paper's\n"+
		"table with mean ± sample standard deviation over the seeds per cell and per mean, the number of seeds and the\n"+
		"difference to source; writes it into --out as report.md, report.csv and report.json (and report.png, --plot).\n"+
		"Refuses folders whose runs differ in anything but the seed (model, data, limit, ...), naming it.\n", stderr)
	out := fs.String("out", "subtta-report", "folder the report is written into")
	plot := fs.Bool("plot", false, "also draw report.png: each method's mean accuracy with error bars of ± one standard deviation")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("want at least one results folder")
	}
	return writeReport(*out, fs.Args(), *plot, stdout, stderr)
}

// writeReport compares the results folders dirs (eval.WriteSeedReport),
// writes the report into out and prints its table.
func writeReport(out string, dirs []string, plot bool, stdout, stderr io.Writer) error {
	c, files, err := eval.WriteSeedReport(out, dirs, plot)
	if err != nil {
		// "subtta report: eval: …" says where the code is, not the user.
		return errors.New(strings.TrimPrefix(err.Error(), "eval: "))
	}
	var b bytes.Buffer
	if err := c.Markdown(&b); err != nil {
		return err
	}
	stdout.Write(b.Bytes())
	fmt.Fprintf(stderr, "%d seeds compared; report in %s (%d files)\n", len(c.Seeds), out, len(files))
	return nil
}
