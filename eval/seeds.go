package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/subtta/subtta/report"
	"github.com/subtta/subtta/tta"
)

// Files WriteSeedReport writes into its folder.
const (
	SeedMarkdownFile = "report.md"
	SeedCSVFile      = "report.csv"
	SeedJSONFile     = "report.json"
	SeedPlotFile     = "report.png" // report-2.png … for a second table and on
)

// ErrNotSeeds: results folders compared as seeds of one run differ in
// more than the seed.
var ErrNotSeeds = errors.New("not seeds of one run")

// A Folder is a results folder read back: its run's configuration and
// identity (run.json) and its records (results.jsonl), the latest of
// each (method, domain).
type Folder struct {
	Dir     string
	Config  Config
	Records []report.Record
	id      identity
}

// ReadFolder reads the results folder dir, refusing one without run.json
// or results, the folder of a shard (merge the shards first), one whose
// records another configuration computed, one holding two records of one
// method and domain (which is meant is not for the reader to guess), and
// one whose record eval cannot have written (a field missing, a domain
// that is not its corruption at its severity: checkFields) or does not
// add up (accuracy not 100·correct/samples, more samples than the limit),
// as eval refuses them on resuming, naming the line. A folder holding the
// seed-N folders of eval --seeds is refused with the advice to pass those.
func ReadFolder(dir string) (*Folder, error) {
	b, err := os.ReadFile(filepath.Join(dir, RunFile))
	if errors.Is(err, os.ErrNotExist) {
		if seeds, _ := filepath.Glob(filepath.Join(dir, "seed-*", RunFile)); len(seeds) > 0 {
			return nil, fmt.Errorf("eval: %s is not a results folder (no %s) but holds the seed folders of eval --seeds: pass those (%s)",
				dir, RunFile, filepath.Join(dir, "seed-*"))
		}
		return nil, fmt.Errorf("eval: %s is not a results folder (no %s)", dir, RunFile)
	}
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	var rf runFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("eval: %s: %w", filepath.Join(dir, RunFile), err)
	}
	if rf.Config.Shard != nil {
		return nil, fmt.Errorf("eval: %s holds shard %s of a run: join the shards with subtta eval merge first", dir, rf.Config.Shard)
	}
	path := filepath.Join(dir, ResultsFile)
	recs, lines, err := readRecords(path, reportLineAdvice)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("eval: %s holds no results yet (%s)", dir, ResultsFile)
	}
	if err := checkFields(path, recs, lines, rf.Config, reportLineAdvice); err != nil {
		return nil, err
	}
	if _, err := checkRecords(path, recs, lines, rf.Identity, true, reportLineAdvice); err != nil {
		return nil, err
	}
	type key struct{ method, domain string }
	first := map[key]int{}
	for i, r := range recs {
		k := key{r.Method, r.Domain}
		if j, ok := first[k]; ok {
			return nil, fmt.Errorf("eval: %s: %s holds two records of %s on %s (lines %d and %d): delete the one that is not meant",
				dir, ResultsFile, r.Method, r.Domain, lines[j].line, lines[i].line)
		}
		first[k] = i
	}
	if err := checkCounts(path, filepath.Join(dir, BatchesFile), recs, lines, rf.Config.Limit, reportLineAdvice); err != nil {
		return nil, err
	}
	return &Folder{Dir: dir, Config: rf.Config, Records: report.Latest(recs), id: rf.Identity}, nil
}

// Seed is the shuffle seed of the folder's run.
func (f *Folder) Seed() uint64 { return f.id.Seed }

// CompareSeeds reads the results folders dirs (ReadFolder), the seeds of
// one run, and returns their table of mean ± standard deviation
// (report.CompareSeeds). Folders whose identity differs in anything but
// the seed are refused with ErrNotSeeds, naming what differs, as are two
// folders of one seed.
func CompareSeeds(dirs []string) (*report.Comparison, error) {
	if len(dirs) == 0 {
		return nil, errors.New("eval: no results folder given")
	}
	var folders []*Folder
	for _, d := range dirs {
		f, err := ReadFolder(d)
		if err != nil {
			return nil, err
		}
		folders = append(folders, f)
	}
	first := folders[0]
	runs := []report.SeedRun{{Seed: first.Seed(), Name: first.Dir, Records: first.Records}}
	for _, f := range folders[1:] {
		for _, g := range folders {
			if g == f {
				break
			}
			if g.Seed() == f.Seed() {
				return nil, fmt.Errorf("eval: %s and %s: %w: both hold seed %d", g.Dir, f.Dir, ErrNotSeeds, f.Seed())
			}
		}
		if diff := seedDiff(first, f); diff != "" {
			return nil, fmt.Errorf("eval: %s and %s are %w: %s", first.Dir, f.Dir, ErrNotSeeds, diff)
		}
		runs = append(runs, report.SeedRun{Seed: f.Seed(), Name: f.Dir, Records: f.Records})
	}
	return report.CompareSeeds(runs, tta.SourceName)
}

// seedDiff names the fields of the identities of a and b that differ,
// the seed aside, with their values: "" when none does.
func seedDiff(a, b *Folder) string {
	ia, ib := a.id, b.id
	ib.Seed = ia.Seed
	// Frost counts only where both runs made it (identity.merge).
	if ia.Frost == "" || ib.Frost == "" {
		ia.Frost, ib.Frost = "", ""
	}
	ja, _ := json.Marshal(ia)
	jb, _ := json.Marshal(ib)
	var ma, mb map[string]any
	json.Unmarshal(ja, &ma)
	json.Unmarshal(jb, &mb)
	var fields []string
	for k := range ma {
		if fmt.Sprint(ma[k]) != fmt.Sprint(mb[k]) {
			fields = append(fields, k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			fields = append(fields, k)
		}
	}
	slices.Sort(fields)
	var parts []string
	for _, k := range fields {
		parts = append(parts, fmt.Sprintf("%s differs (%v in %s, %v in %s)", k, show(ma[k]), a.Dir, show(mb[k]), b.Dir))
	}
	return strings.Join(parts, "; ")
}

// show is an identity field's value for a message: a string quoted, an
// absent field "none".
func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "none"
	case string:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}

// WriteSeedReport compares the results folders dirs as CompareSeeds does
// and writes the table into out: SeedMarkdownFile, SeedCSVFile,
// SeedJSONFile and, with plot, SeedPlotFile. It returns the comparison
// and the paths written.
func WriteSeedReport(out string, dirs []string, plot bool) (*report.Comparison, []string, error) {
	c, err := CompareSeeds(dirs)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return c, nil, fmt.Errorf("eval: %w", err)
	}
	var files []string
	write := func(name string, b []byte) error {
		path := filepath.Join(out, name)
		if err := writeFileAtomic(path, b); err != nil {
			return err
		}
		files = append(files, path)
		return nil
	}
	for _, f := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{SeedMarkdownFile, func(b *bytes.Buffer) error { return c.Markdown(b) }},
		{SeedCSVFile, func(b *bytes.Buffer) error { return c.CSV(b) }},
		{SeedJSONFile, func(b *bytes.Buffer) error { return c.JSON(b) }},
	} {
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			return c, files, err
		}
		if err := write(f.name, b.Bytes()); err != nil {
			return c, files, err
		}
	}
	if plot {
		pngs, err := c.Plots()
		if err != nil {
			return c, files, err
		}
		for i, png := range pngs {
			name := SeedPlotFile
			if i > 0 {
				name = fmt.Sprintf("%s-%d.png", strings.TrimSuffix(SeedPlotFile, ".png"), i+1)
			}
			if err := write(name, png); err != nil {
				return c, files, err
			}
		}
	}
	return c, files, nil
}
