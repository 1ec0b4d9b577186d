package eval

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// ErrSeedsSame: the seeds compared cannot differ: their runs stream every
// domain in one order (--no-shuffle, --order) and no method draws random
// views, as eval --seeds refuses to run them.
var ErrSeedsSame = errors.New("every seed's results are the same")

// A Folder is a results folder read back: its run's configuration and
// identity (run.json) and its records (results.jsonl), the latest of
// each (method, domain).
type Folder struct {
	Dir     string
	Config  Config
	Records []report.Record
	// Unnamed counts the records that carry no run identity (written by
	// a build before records did), taken as the folder's because its
	// run.json vouches for them, as eval takes them on resuming.
	Unnamed int
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
	unnamed, err := checkRecords(path, recs, lines, rf.Identity, true, reportLineAdvice)
	if err != nil {
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
	return &Folder{Dir: dir, Config: rf.Config, Records: report.Latest(recs), Unnamed: unnamed, id: rf.Identity}, nil
}

// Seed is the shuffle seed of the folder's run.
func (f *Folder) Seed() uint64 { return f.id.Seed }

// CompareSeeds reads the results folders dirs (ReadFolder), the seeds of
// one run, and returns their table of mean ± standard deviation
// (report.CompareSeeds). Folders whose identity differs in anything but
// the seed are refused with ErrNotSeeds, naming what differs, as are two
// folders of one seed and folders whose runs were made with other methods
// or domains (what a seed lacks then is no unfinished run). Seeds of runs
// that stream every domain in one order (--no-shuffle, --order) and whose
// methods draw no random views are refused with ErrSeedsSame, as eval
// --seeds refuses to run them: every seed's results are the same.
func CompareSeeds(dirs []string) (*report.Comparison, error) {
	c, _, err := compareSeeds(dirs)
	return c, err
}

// compareSeeds is CompareSeeds, which also returns the folders read.
func compareSeeds(dirs []string) (*report.Comparison, []*Folder, error) {
	if len(dirs) == 0 {
		return nil, nil, errors.New("eval: no results folder given")
	}
	var folders []*Folder
	for _, d := range dirs {
		f, err := ReadFolder(d)
		if err != nil {
			return nil, nil, err
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
				return nil, nil, fmt.Errorf("eval: %s and %s: %w: both hold seed %d", g.Dir, f.Dir, ErrNotSeeds, f.Seed())
			}
		}
		if diff := seedDiff(first, f); diff != "" {
			return nil, nil, fmt.Errorf("eval: %s and %s are %w: %s", first.Dir, f.Dir, ErrNotSeeds, diff)
		}
		if !sameUnits(first, f) {
			if diff := planDiff(first, f); diff != "" {
				return nil, nil, fmt.Errorf("eval: %s (seed %d) and %s (seed %d) are %w: they were run with %s, and seeds are compared on the same ones: give their runs the same --methods, --corruptions and --severities (eval into a seed's folder with more of them computes what it lacks)",
					first.Dir, first.Seed(), f.Dir, f.Seed(), ErrNotSeeds, diff)
			}
		}
		runs = append(runs, report.SeedRun{Seed: f.Seed(), Name: f.Dir, Records: f.Records})
	}
	if fixed, views, same := SeedEffect(first.Config); fixed != "" && len(views) == 0 {
		names := make([]string, len(folders))
		for i, f := range folders {
			names[i] = f.Dir
		}
		return nil, nil, fmt.Errorf("eval: %s: %w: the runs were made with %s, so every seed streamed the same order, and no method draws random views (%s): compare the seeds of a run without %s",
			strings.Join(names, ", "), ErrSeedsSame, fixed, strings.Join(same, ", "), fixed)
	}
	c, err := report.CompareSeeds(runs, tta.SourceName)
	return c, folders, err
}

// SeedEffect says what the seed changes in a run of cfg, whose methods it
// takes as given (a run.json's configuration names them). The seed shuffles
// each stream and draws the random views of multi-view methods; fixed is
// what keeps every stream in one order ("--no-shuffle" or "--order"; the
// mixed protocol's pool, which --order permutes, is still shuffled unless
// --no-shuffle), "" when the seed shuffles the streams. With fixed, views
// are the methods whose random views the seed draws and same those whose
// results it leaves the same; eval --seeds and report refuse seeds where
// views is empty.
func SeedEffect(cfg Config) (fixed string, views, same []string) {
	switch {
	case cfg.NoShuffle:
		fixed = "--no-shuffle"
	case cfg.Order != "" && cfg.Protocol != "mixed":
		fixed = "--order"
	default:
		return "", nil, nil
	}
	for _, m := range cfg.Methods {
		p, err := tta.Lookup(cmp.Or(cfg.Dataset, "cifar10-c"), m)
		if err == nil && p.Views > 0 {
			views = append(views, m)
		} else {
			same = append(same, m)
		}
	}
	return fixed, views, same
}

// sameUnits reports whether a and b hold records of the same (method,
// domain) units.
func sameUnits(a, b *Folder) bool {
	units := func(f *Folder) []Unit {
		var u []Unit
		for _, r := range f.Records {
			u = append(u, Unit{r.Method, r.Domain})
		}
		slices.SortFunc(u, func(x, y Unit) int { return cmp.Or(cmp.Compare(x.Method, y.Method), cmp.Compare(x.Domain, y.Domain)) })
		return slices.Compact(u)
	}
	return slices.Equal(units(a), units(b))
}

// planDiff says how the methods, corruptions and severities that b's run
// was made with differ from a's ("other methods (source in A; source, tent
// in B)"), "" when they are the same. Methods compare as sets, as do the
// domains where each domain starts afresh; in a continual or mixed stream
// their order counts too.
func planDiff(a, b *Folder) string {
	ca, err1 := a.Config.planDefaults()
	cb, err2 := b.Config.planDefaults()
	if err1 != nil || err2 != nil {
		return "" // report.CompareSeeds names the cells that differ
	}
	proto, _ := protocol(ca.Protocol)
	ordered := !perDomain(proto)
	var parts []string
	differ := func(what string, x, y []string, inOrder bool) {
		sx, sy := slices.Clone(x), slices.Clone(y)
		if !inOrder {
			slices.Sort(sx)
			slices.Sort(sy)
		}
		if !slices.Equal(sx, sy) {
			parts = append(parts, fmt.Sprintf("other %s (%s in %s; %s in %s)", what, strings.Join(x, ", "), a.Dir, strings.Join(y, ", "), b.Dir))
		}
	}
	severities := func(c Config) []string {
		var s []string
		for _, v := range c.Severities {
			s = append(s, fmt.Sprint(v))
		}
		return s
	}
	differ("methods", ca.Methods, cb.Methods, false)
	differ("corruptions", ca.Corruptions, cb.Corruptions, ordered)
	differ("severities", severities(ca), severities(cb), ordered)
	return strings.Join(parts, " and ")
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

// A SeedReport is what WriteSeedReport compared and wrote.
type SeedReport struct {
	*report.Comparison
	// Files are the paths written.
	Files []string
	// Removed are the plots of an earlier report in the folder that this
	// report has not (SeedPlotFile without plot, report-N.png beyond its
	// tables): they would be taken for this report's.
	Removed []string
	// Fixed, when the seeds' runs stream every domain in one order, says
	// how ("--no-shuffle", "--order"), and Same names the methods whose
	// results the seeds then leave the same (SeedEffect): their spread is
	// zero by construction.
	Fixed string
	Same  []string
	// Unnamed are the folders holding records without a run identity,
	// with their counts (Folder.Unnamed), for the caller to say so.
	Unnamed map[string]int
}

// WriteSeedReport compares the results folders dirs as CompareSeeds does
// and writes the table into out: SeedMarkdownFile, SeedCSVFile,
// SeedJSONFile and, with plot, SeedPlotFile (report-2.png … for further
// tables). Plots of an earlier report that this one does not draw are
// removed, so that the folder holds this report alone.
func WriteSeedReport(out string, dirs []string, plot bool) (*SeedReport, error) {
	c, folders, err := compareSeeds(dirs)
	if err != nil {
		return nil, err
	}
	r := &SeedReport{Comparison: c}
	for _, f := range folders {
		if f.Unnamed > 0 {
			if r.Unnamed == nil {
				r.Unnamed = map[string]int{}
			}
			r.Unnamed[f.Dir] = f.Unnamed
		}
	}
	if fixed, _, same := SeedEffect(folders[0].Config); len(same) > 0 {
		r.Fixed, r.Same = fixed, same
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return r, fmt.Errorf("eval: %w", err)
	}
	written := map[string]bool{}
	write := func(name string, b []byte) error {
		path := filepath.Join(out, name)
		if err := writeFileAtomic(path, b); err != nil {
			return err
		}
		r.Files = append(r.Files, path)
		written[name] = true
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
			return r, err
		}
		if err := write(f.name, b.Bytes()); err != nil {
			return r, err
		}
	}
	if plot {
		pngs, err := c.Plots()
		if err != nil {
			return r, err
		}
		for i, png := range pngs {
			if err := write(seedPlotName(i), png); err != nil {
				return r, err
			}
		}
	}
	// An earlier report's plots, which this one does not replace.
	entries, err := os.ReadDir(out)
	if err != nil {
		return r, fmt.Errorf("eval: %w", err)
	}
	for _, e := range entries {
		if !isSeedPlot(e.Name()) || written[e.Name()] || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(out, e.Name())
		if err := os.Remove(path); err != nil {
			return r, fmt.Errorf("eval: the earlier report's plot: %w", err)
		}
		r.Removed = append(r.Removed, path)
	}
	return r, nil
}

// seedPlotName is the name of the plot of the report's table i (from 0).
func seedPlotName(i int) string {
	if i == 0 {
		return SeedPlotFile
	}
	return fmt.Sprintf("%s-%d.png", strings.TrimSuffix(SeedPlotFile, ".png"), i+1)
}

// isSeedPlot reports whether name is one WriteSeedReport gives a plot:
// report.png, report-2.png, ….
func isSeedPlot(name string) bool {
	if name == SeedPlotFile {
		return true
	}
	n, ok := strings.CutPrefix(name, strings.TrimSuffix(SeedPlotFile, ".png")+"-")
	if !ok {
		return false
	}
	if n, ok = strings.CutSuffix(n, ".png"); !ok {
		return false
	}
	i, err := strconv.Atoi(n)
	return err == nil && i >= 2 && strconv.Itoa(i) == n
}
