package report_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/subtta/subtta/report"
)

func Example() {
	dir, err := os.MkdirTemp("", "report-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	results := filepath.Join(dir, "results.jsonl")

	// An eval run appends a record as each domain finishes.
	for _, r := range []report.Record{
		{Method: "source", Domain: "gaussian_noise/5", Corruption: "gaussian_noise", Severity: 5, Samples: 200, Correct: 70, Accuracy: 35},
		{Method: "source", Domain: "fog/5", Corruption: "fog", Severity: 5, Samples: 200, Correct: 130, Accuracy: 65},
		{Method: "tent", Domain: "gaussian_noise/5", Corruption: "gaussian_noise", Severity: 5, Samples: 200, Correct: 81, Accuracy: 40.5},
	} {
		if err := report.AppendRecord(results, r); err != nil {
			log.Fatal(err)
		}
	}

	// A resumed run, or the report, reads them back.
	recs, err := report.ReadRecordsFile(results)
	if err != nil {
		log.Fatal(err)
	}
	if err := report.Markdown(os.Stdout, recs); err != nil {
		log.Fatal(err)
	}
	var csv strings.Builder
	if err := report.CSV(&csv, recs); err != nil {
		log.Fatal(err)
	}
	fmt.Print("\n", csv.String())
	s := report.NewSummary(map[string]any{"model": "ViT-B/16"}, recs)
	for _, m := range s.Methods {
		fmt.Printf("%s: %.2f%% over %d domains\n", m.Method, m.MeanAccuracy, m.Domains)
	}

	// Output:
	// | Method | Noise: Gauss. | Weather: Fog |   Mean |
	// |:-------|--------------:|-------------:|-------:|
	// | source |         35.00 |        65.00 |  50.00 |
	// | tent   |         40.50 |            – | 40.50* |
	//
	// Means marked with * average only the columns present for the method (– marks a missing cell).
	//
	// method,domain,corruption,severity,samples,correct,accuracy,seconds,images_per_second,steps,skipped
	// source,gaussian_noise/5,gaussian_noise,5,200,70,35,0,0,0,0
	// source,fog/5,fog,5,200,130,65,0,0,0,0
	// tent,gaussian_noise/5,gaussian_noise,5,200,81,40.5,0,0,0,0
	// source: 50.00% over 2 domains
	// tent: 40.50% over 1 domains
}
