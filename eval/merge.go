package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/subtta/subtta/internal/dirlock"
	"github.com/subtta/subtta/report"
)

// Errors of Merge, for errors.Is.
var (
	// ErrShardMismatch: the shards are not parts of one run (identity,
	// configuration, build or shard count differ).
	ErrShardMismatch = errors.New("eval: the shards are not parts of one run")
	// ErrDuplicateUnit: two shards hold the same unit, or two folders are
	// the same shard.
	ErrDuplicateUnit = errors.New("eval: a unit is in more than one shard")
	// ErrMissingUnit: no shard holds some units of the run.
	ErrMissingUnit = errors.New("eval: units of the run are missing")
)

// shardFolder is one shard's results folder, as Merge reads it.
type shardFolder struct {
	dir     string
	run     runFile
	records []report.Record // the latest record of each unit
	batches [][]byte        // the lines of batches.jsonl
}

// Merge joins the results folders of the shards of one run (each run with
// Config.Shard, the same identity and build) into out, which it writes as
// one process running the whole configuration would have: run.json (the
// shards' configuration without the shard), results.jsonl with the records
// in run order, batches.jsonl, and the tables and, when the configuration
// asks for them, the plots. It refuses shards of different runs, identities,
// builds or shard counts, a unit held by two shards, a unit held by a shard
// the split does not give it to, and units that no shard holds, naming
// them. out must not hold a run yet, but for this merge's own: a merge that
// stopped before it was done (killed, out of disk) is finished by running
// it again. A merged folder resumes like any other.
func Merge(out string, shards []string, opt MergeOptions) (*Summary, error) {
	if len(shards) == 0 {
		return nil, errors.New("eval: merge: no shard folders given")
	}
	folders := make([]*shardFolder, len(shards))
	for i, dir := range shards {
		f, err := readShardFolder(dir)
		if err != nil {
			return nil, err
		}
		folders[i] = f
	}
	cfg, id, err := checkShards(folders)
	if err != nil {
		return nil, err
	}
	recs, err := mergeRecords(cfg, folders)
	if err != nil {
		return nil, err
	}
	cfg.Out = out
	return writeMerged(cfg, id, recs, folders, opt)
}

// MergeOptions are the options of Merge; all are optional.
type MergeOptions struct {
	// Plot writes the plots even when the run did not ask for them.
	Plot bool
	// Log receives a line per file written.
	Log io.Writer
}

// readShardFolder reads a shard's run.json, records and batch log,
// refusing a record that eval cannot have written or that does not add
// up (checkFields, checkCounts), as a run resuming the folder would.
func readShardFolder(dir string) (*shardFolder, error) {
	f := &shardFolder{dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, RunFile))
	if err != nil {
		return nil, fmt.Errorf("eval: merge: %s is not a results folder: %w", dir, err)
	}
	if err := json.Unmarshal(b, &f.run); err != nil {
		return nil, fmt.Errorf("eval: merge: %s: %w", filepath.Join(dir, RunFile), err)
	}
	if f.run.Config.Shard == nil {
		return nil, fmt.Errorf("%w: %s is a run of its own, not a shard (its %s names none)", ErrShardMismatch, dir, RunFile)
	}
	path := filepath.Join(dir, ResultsFile)
	recs, lines, err := readRecords(path, evalDamageAdvice)
	if err != nil {
		return nil, err
	}
	if err := checkFields(path, recs, lines, f.run.Config, evalLineAdvice); err != nil {
		return nil, err
	}
	if err := checkCounts(path, filepath.Join(dir, BatchesFile), recs, lines, f.run.Config.Limit, evalLineAdvice); err != nil {
		return nil, err
	}
	f.records = report.Latest(recs)
	b, err = os.ReadFile(filepath.Join(dir, BatchesFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("eval: merge: %w", err)
	}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasSuffix(line, []byte("\n")) && json.Valid(line) {
			f.batches = append(f.batches, line)
		}
	}
	return f, nil
}

// unitConfig is what of a configuration makes its units and their split.
func unitConfig(c Config) string {
	b, _ := json.Marshal(struct {
		Dataset, Protocol              string
		Methods, Corruptions           []string
		Severities                     []int
		Limit, BatchSize, Views, Count int
		NoShuffle                      bool
		Seed, CorruptSeed              uint64
	}{c.Dataset, c.Protocol, c.Methods, c.Corruptions, c.Severities, c.Limit, c.BatchSize, c.Views, c.Shard.Count,
		c.NoShuffle, c.Seed, c.CorruptSeed})
	return string(b)
}

// checkShards refuses shards that are not parts of one run: the same
// identity, the same methods, domains and shard count, each index once,
// every record computed by one build for this identity. It returns the
// run's configuration (the first shard's, without its shard) and identity.
func checkShards(folders []*shardFolder) (Config, identity, error) {
	first := folders[0]
	id := first.run.Identity
	cfg := first.run.Config
	byIndex := map[int]string{}
	build, buildAt := "", ""
	for _, f := range folders {
		sh := f.run.Config.Shard
		merged, diff := f.run.Identity.merge(id)
		if diff != "" {
			return cfg, id, fmt.Errorf("%w: %s and %s have other identities (%s)", ErrShardMismatch, first.dir, f.dir, diff)
		}
		id = merged
		if a, b := unitConfig(cfg), unitConfig(f.run.Config); a != b {
			return cfg, id, fmt.Errorf("%w: %s and %s split other configurations (%s against %s)", ErrShardMismatch, first.dir, f.dir, a, b)
		}
		if other, ok := byIndex[sh.Index]; ok {
			return cfg, id, fmt.Errorf("%w: %s and %s are both shard %s", ErrDuplicateUnit, other, f.dir, sh)
		}
		byIndex[sh.Index] = f.dir
		for _, r := range f.records {
			if build == "" {
				build, buildAt = r.Build, fmt.Sprintf("%s (%s)", f.dir, Unit{r.Method, r.Domain})
			}
			if r.Build != build {
				return cfg, id, fmt.Errorf("%w: %s was computed by build %q, %s by build %q", ErrShardMismatch,
					fmt.Sprintf("%s (%s)", f.dir, Unit{r.Method, r.Domain}), r.Build, buildAt, build)
			}
		}
	}
	for _, f := range folders {
		if _, err := checkRecords(filepath.Join(f.dir, ResultsFile), f.records, nil, id, true, evalLineAdvice); err != nil {
			return cfg, id, fmt.Errorf("%w: %w", ErrShardMismatch, err)
		}
	}
	cfg.Shard = nil
	return cfg, id, nil
}

// mergeRecords returns every unit's record in run order, or an error
// naming the units two shards hold, a shard holds that the split gives
// another, or no shard holds.
func mergeRecords(cfg Config, folders []*shardFolder) ([]report.Record, error) {
	full, err := cfg.planDefaults()
	if err != nil {
		return nil, err
	}
	count := folders[0].run.Config.Shard.Count
	parts, err := SplitShards(full, count)
	if err != nil {
		return nil, err
	}
	owner := map[Unit]int{}
	for i, p := range parts {
		for _, u := range p.Units {
			owner[u] = i
		}
	}
	got := map[Unit]report.Record{}
	from := map[Unit]string{}
	for _, f := range folders {
		for _, r := range f.records {
			u := Unit{r.Method, r.Domain}
			idx, ok := owner[u]
			if !ok {
				return nil, fmt.Errorf("%w: %s holds %s, which is not a unit of the run", ErrShardMismatch, f.dir, u)
			}
			if other, dup := from[u]; dup {
				return nil, fmt.Errorf("%w: %s is in %s and in %s", ErrDuplicateUnit, u, other, f.dir)
			}
			if sh := f.run.Config.Shard; idx != sh.Index {
				return nil, fmt.Errorf("%w: %s holds %s, which the split gives shard %d/%d, not its %s", ErrShardMismatch, f.dir, u, idx, count, sh)
			}
			got[u], from[u] = r, f.dir
		}
	}
	var out []report.Record
	var missing []string
	for _, u := range runUnits(full) {
		r, ok := got[u]
		if !ok {
			missing = append(missing, fmt.Sprintf("%s (shard %d/%d)", u, owner[u], count))
			continue
		}
		out = append(out, r)
	}
	if len(missing) > 0 {
		const show = 10
		n, more := len(missing), ""
		if n > show {
			more = fmt.Sprintf(" and %d more", n-show)
			missing = missing[:show]
		}
		return nil, fmt.Errorf("%w: %d of %d: %s%s", ErrMissingUnit, n, len(owner), strings.Join(missing, ", "), more)
	}
	return out, nil
}

// writeMerged writes the merged folder cfg.Out: batches.jsonl,
// results.jsonl and the tables first, run.json last, so that a folder
// with run.json holds a whole merge. A merge that stopped before run.json
// (killed, out of disk, a file it could not write) is completed by the
// same merge run again: the files it left are this merge's, and a folder
// that holds anything else (checkMergeTarget), or a folder where a file
// goes, is refused before anything is written.
func writeMerged(cfg Config, id identity, recs []report.Record, folders []*shardFolder, opt MergeOptions) (*Summary, error) {
	// The class names are the shards', where every shard that records them
	// records the same (they share the identity, so they read one data).
	var classes []string
	for _, f := range folders {
		switch {
		case f.run.Classes == nil:
		case classes == nil:
			classes = f.run.Classes
		case !slices.Equal(classes, f.run.Classes):
			return nil, fmt.Errorf("%w: %s and another shard record other class names", ErrShardMismatch, f.dir)
		}
	}
	rf := runFile{Identity: id, Config: cfg, Classes: classes}
	var results bytes.Buffer
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		results.Write(append(line, '\n'))
	}
	batches := mergeBatches(cfg, folders)
	tables := cfg
	tables.Plot = cfg.Plot || opt.Plot

	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("eval: merge: %w", err)
	}
	lock, err := dirlock.Acquire(cfg.Out)
	if err != nil {
		return nil, fmt.Errorf("eval: merge: %w", err)
	}
	defer lock.Unlock()
	again, err := checkMergeTarget(rf, results.Bytes(), batches, tables.Plot)
	if err != nil {
		return nil, err
	}
	if again != "" && opt.Log != nil {
		fmt.Fprintf(opt.Log, "%s: %s\n", cfg.Out, again)
	}
	if err := writeFileAtomic(filepath.Join(cfg.Out, BatchesFile), batches); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(cfg.Out, ResultsFile), results.Bytes()); err != nil {
		return nil, err
	}
	sum := &Summary{Config: cfg, Records: recs, Resumed: len(recs)}
	for _, r := range recs {
		start := r.Finished.Add(-time.Duration(r.Seconds * float64(time.Second)))
		if sum.Started.IsZero() || start.Before(sum.Started) {
			sum.Started = start
		}
		if r.Finished.After(sum.Finished) {
			sum.Finished = r.Finished
		}
	}
	files, err := writeTables(tables, recs, sum)
	if err != nil {
		return nil, fmt.Errorf("%w (the merge is not finished: %s is not written; run the same merge again to finish it)", err, RunFile)
	}
	// run.json last: a folder without it holds no finished merge.
	if err := writeRun(cfg.Out, rf); err != nil {
		return nil, err
	}
	sum.Files = files
	if log := opt.Log; log != nil {
		for _, f := range append([]string{filepath.Join(cfg.Out, BatchesFile), filepath.Join(cfg.Out, ResultsFile)}, append(files, filepath.Join(cfg.Out, RunFile))...) {
			fmt.Fprintf(log, "wrote %s\n", f)
		}
	}
	return sum, nil
}

// checkMergeTarget refuses to merge into a folder that holds anything a
// merge would overwrite other than what this merge writes, and a folder
// in the way of a file the merge writes (results.md made a folder), before
// anything is written. A folder that an earlier run of this merge left,
// finished (its run.json is rf, its results.jsonl and batches.jsonl are
// results and batches) or stopped before run.json (the files it has are
// these), is merged into again: the returned note says so, "" for a fresh
// folder.
func checkMergeTarget(rf runFile, results, batches []byte, plot bool) (again string, err error) {
	out := rf.Config.Out
	names := []string{RunFile, ResultsFile, BatchesFile, MarkdownFile, CSVFile, JSONFile}
	if plot {
		names = append(names, filepath.Join(PlotsDir, report.AccuracyPlot), filepath.Join(PlotsDir, report.PrincipalAnglesPlot),
			filepath.Join(PlotsDir, report.SemanticConcentrationPlot), filepath.Join(PlotsDir, report.ClassCosinePlot),
			filepath.Join(PlotsDir, report.LatencyPlot))
		if fi, err := os.Stat(filepath.Join(out, PlotsDir)); err == nil && !fi.IsDir() {
			return "", fmt.Errorf("eval: merge: %s is a file, where the merge writes the plots' folder: remove it, or merge into a new folder", filepath.Join(out, PlotsDir))
		}
	}
	for _, name := range names {
		if fi, err := os.Lstat(filepath.Join(out, name)); err == nil && fi.IsDir() {
			return "", fmt.Errorf("eval: merge: %s is a folder, where the merge writes a file: remove it, or merge into a new folder", filepath.Join(out, name))
		}
	}
	// The files a run resumes from must be this merge's, or absent.
	same := func(name string, want []byte) (have, equal bool, err error) {
		equal, err = fileHolds(filepath.Join(out, name), want)
		if errors.Is(err, os.ErrNotExist) {
			return false, false, nil
		}
		if err != nil {
			return false, false, fmt.Errorf("eval: merge: %w", err)
		}
		return true, equal, nil
	}
	haveRun := false
	if b, err := os.ReadFile(filepath.Join(out, RunFile)); err == nil {
		haveRun = true
		var old runFile
		if json.Unmarshal(b, &old) != nil || !sameMerge(old, rf) {
			return "", fmt.Errorf("eval: merge: %s holds a run already (%s, not this merge's): merge into a new folder", out, RunFile)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("eval: merge: %w", err)
	}
	found := 0
	for _, f := range []struct {
		name string
		want []byte
	}{{ResultsFile, results}, {BatchesFile, batches}} {
		have, equal, err := same(f.name, f.want)
		if err != nil {
			return "", err
		}
		if have && !equal {
			return "", fmt.Errorf("eval: merge: %s holds a %s other than the one this merge writes: merge into a new folder (or, if an earlier merge of other shards left it, remove it)",
				out, f.name)
		}
		if have {
			found++
		}
	}
	switch {
	case haveRun:
		return "merged before from these shards; writing it again", nil
	case found > 0:
		return fmt.Sprintf("finishing an earlier merge of these shards that stopped before %s", RunFile), nil
	}
	return "", nil
}

// fileHolds reports whether the file at path holds want, reading it a
// piece at a time (a batch log runs to gigabytes).
func fileHolds(path string, want []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() != int64(len(want)) {
		return false, err
	}
	buf := make([]byte, 1<<20)
	for len(want) > 0 {
		n, err := io.ReadFull(f, buf[:min(len(buf), len(want))])
		if !bytes.Equal(buf[:n], want[:n]) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		want = want[n:]
	}
	return true, nil
}

// sameMerge reports whether the run.json old of a merged folder is the
// run.json new of this merge, wherever its folder was named from.
func sameMerge(old, new runFile) bool {
	old.Config.Out, new.Config.Out = "", ""
	a, err1 := json.Marshal(old)
	b, err2 := json.Marshal(new)
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

// mergeBatches joins the shards' batch logs in run order: method by
// method, each method's lines by domain in stream order (a continual or
// mixed stream, in one shard, as written).
func mergeBatches(cfg Config, folders []*shardFolder) []byte {
	full, _ := cfg.planDefaults()
	domainAt := map[string]int{}
	for i, d := range planDomains(full) {
		domainAt[d.name] = i
	}
	type line struct {
		method, stream int
		b              []byte
	}
	var lines []line
	for _, f := range folders {
		for _, b := range f.batches {
			var id struct {
				Method string `json:"method"`
				Stream string `json:"stream"`
			}
			json.Unmarshal(b, &id)
			m := slices.Index(full.Methods, id.Method)
			if m < 0 {
				continue
			}
			s, ok := domainAt[id.Stream]
			if !ok {
				s = -1 // the mixed stream
			}
			lines = append(lines, line{m, s, b})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int {
		if a.method != b.method {
			return a.method - b.method
		}
		return a.stream - b.stream
	})
	var out bytes.Buffer
	for _, l := range lines {
		out.Write(l.b)
	}
	return out.Bytes()
}
