package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
)

// csvHeader names the columns CSV writes.
var csvHeader = []string{
	"method", "domain", "corruption", "severity", "samples", "correct",
	"accuracy", "seconds", "images_per_second", "steps", "skipped",
}

// CSV writes recs as one flat table in long format: a header line, then one
// row per record in the order given, duplicates included, with the scalar
// fields of the record. Floats are written in the shortest form that reads
// back exactly.
func CSV(w io.Writer, recs []Record) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	for _, r := range recs {
		cw.Write([]string{
			r.Method, r.Domain, r.Corruption,
			strconv.Itoa(r.Severity), strconv.Itoa(r.Samples), strconv.Itoa(r.Correct),
			formatFloat(r.Accuracy), formatFloat(r.Seconds), formatFloat(r.ImagesPerSecond),
			strconv.Itoa(r.Steps), strconv.Itoa(r.Skipped),
		})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("report: writing csv: %w", err)
	}
	return nil
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
