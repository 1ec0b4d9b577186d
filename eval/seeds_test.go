package eval

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/report"
)

// TestCompareSeeds runs one small run at three seeds, and at another
// limit and corrupt seed: the seeds compare, the others are refused
// naming what differs; a shard's folder, a folder without run.json and
// one without results are refused too.
func TestCompareSeeds(t *testing.T) {
	root := t.TempDir()
	dir := func(name string) string { return filepath.Join(root, name) }
	for _, s := range []uint64{1, 2, 3} {
		cfg := smallRun(t, dir("seed-"+string(rune('0'+s))), "contrast")
		cfg.Seed = s
		mustRun(t, cfg)
	}
	cfg := smallRun(t, dir("other"), "contrast")
	cfg.Seed, cfg.Limit, cfg.CorruptSeed = 4, 8, 2
	mustRun(t, cfg)

	c, err := CompareSeeds([]string{dir("seed-1"), dir("seed-2"), dir("seed-3")})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Seeds) != 3 || c.Seeds[2] != 3 || c.Tables[0].Rows[0].Mean.Seeds != 3 {
		t.Errorf("%+v", c)
	}

	_, err = CompareSeeds([]string{dir("seed-1"), dir("other")})
	if !errors.Is(err, ErrNotSeeds) || !strings.Contains(err.Error(), "corrupt_seed differs (1 in "+dir("seed-1")+", 2 in "+dir("other")+"); limit differs (12 in ") {
		t.Errorf("another limit: %v", err)
	}
	_, err = CompareSeeds([]string{dir("seed-2"), dir("seed-1"), dir("seed-2")})
	if !errors.Is(err, ErrNotSeeds) || !strings.Contains(err.Error(), "both hold seed 2") {
		t.Errorf("a seed twice: %v", err)
	}

	shard := smallRun(t, dir("shard"), "contrast")
	sh, _ := ParseShard("0/2")
	shard.Shard = &sh
	mustRun(t, shard)
	os.MkdirAll(dir("empty"), 0o755)
	os.MkdirAll(dir("begun"), 0o755)
	b, _ := os.ReadFile(filepath.Join(dir("seed-1"), RunFile))
	os.WriteFile(filepath.Join(dir("begun"), RunFile), b, 0o644)
	for _, tc := range []struct{ dir, msg string }{
		{dir("shard"), "holds shard 0/2 of a run: join the shards with subtta eval merge first"},
		{dir("empty"), "is not a results folder (no run.json)"},
		{dir("begun"), "holds no results yet"},
	} {
		if _, err := CompareSeeds([]string{tc.dir}); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %q", tc.dir, err, tc.msg)
		}
	}
}

// TestWriteSeedReport writes the report's files; a report without plots
// written over one with removes the earlier report's plots (report.png,
// report-2.png), which would be taken for this report's, and leaves other
// files alone.
func TestWriteSeedReport(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, s := range []uint64{1, 2} {
		cfg := smallRun(t, filepath.Join(root, "seed-"+string(rune('0'+s))), "contrast")
		cfg.Seed = s
		mustRun(t, cfg)
		dirs = append(dirs, cfg.Out)
	}
	out := filepath.Join(root, "report")
	r, err := WriteSeedReport(out, dirs, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{SeedMarkdownFile, SeedCSVFile, SeedJSONFile, SeedPlotFile} {
		if i >= len(r.Files) || r.Files[i] != filepath.Join(out, name) {
			t.Errorf("files %q, want %s at %d", r.Files, name, i)
		}
	}
	if len(r.Removed) != 0 || r.Fixed != "" || len(r.Same) != 0 {
		t.Errorf("a fresh report: removed %q, fixed %q, same %q", r.Removed, r.Fixed, r.Same)
	}
	for _, name := range []string{"report-2.png", "report-10.png", "report-x.png", "report-02.png", "7.png", "notes.txt"} {
		os.WriteFile(filepath.Join(out, name), []byte("x"), 0o644)
	}
	r, err = WriteSeedReport(out, dirs, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Files) != 3 {
		t.Errorf("without plot: files %q", r.Files)
	}
	var removed []string
	for _, p := range r.Removed {
		removed = append(removed, filepath.Base(p))
	}
	slices.Sort(removed)
	if want := []string{"report-10.png", "report-2.png", SeedPlotFile}; !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for _, name := range []string{"report-x.png", "report-02.png", "7.png", "notes.txt", SeedMarkdownFile} {
		if !exists(filepath.Join(out, name)) {
			t.Errorf("%s was removed", name)
		}
	}
	for _, name := range []string{SeedPlotFile, "report-2.png", "report-10.png"} {
		if exists(filepath.Join(out, name)) {
			t.Errorf("the earlier report's %s is still there", name)
		}
	}
}

// TestCompareSeedsWithoutShuffle: the seeds of runs that stream every
// domain in file order and whose methods draw no random views are
// refused, as eval --seeds refuses to run them; SeedEffect says which
// methods the seeds leave the same.
func TestCompareSeedsWithoutShuffle(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, s := range []uint64{1, 2} {
		cfg := smallRun(t, filepath.Join(root, "seed-"+string(rune('0'+s))), "contrast")
		cfg.Seed, cfg.NoShuffle = s, true
		mustRun(t, cfg)
		dirs = append(dirs, cfg.Out)
	}
	_, err := CompareSeeds(dirs)
	if !errors.Is(err, ErrSeedsSame) || !strings.Contains(err.Error(), "the runs were made with --no-shuffle") ||
		!strings.Contains(err.Error(), "no method draws random views (source)") {
		t.Errorf("--no-shuffle seeds of source: %v", err)
	}
	if _, err := WriteSeedReport(filepath.Join(root, "report"), dirs, false); !errors.Is(err, ErrSeedsSame) || exists(filepath.Join(root, "report")) {
		t.Errorf("WriteSeedReport: %v", err)
	}
	for _, tc := range []struct {
		cfg         Config
		fixed       string
		views, same []string
	}{
		{Config{Dataset: "cifar10-c", Methods: []string{"source", "vte"}}, "", nil, nil},
		{Config{Dataset: "cifar10-c", Methods: []string{"source", "vte"}, NoShuffle: true}, "--no-shuffle", []string{"vte"}, []string{"source"}},
		{Config{Dataset: "cifar10-c", Methods: []string{"source", "tent"}, Order: "order.txt"}, "--order", nil, []string{"source", "tent"}},
		{Config{Dataset: "cifar10-c", Methods: []string{"source"}, Order: "order.txt", Protocol: "mixed"}, "", nil, nil},
		{Config{Dataset: "cifar10-c", Methods: []string{"source"}, Order: "order.txt", Protocol: "mixed", NoShuffle: true}, "--no-shuffle", nil, []string{"source"}},
	} {
		fixed, views, same := SeedEffect(tc.cfg)
		if fixed != tc.fixed || !slices.Equal(views, tc.views) || !slices.Equal(same, tc.same) {
			t.Errorf("%+v: %q %q %q, want %q %q %q", tc.cfg, fixed, views, same, tc.fixed, tc.views, tc.same)
		}
	}
}

// TestCompareSeedsOtherPlans: seeds whose runs were made with other
// methods or corruptions are refused as such (what one lacks is no
// unfinished run), while seeds of one plan of which one is unfinished are
// refused as unfinished.
func TestCompareSeedsOtherPlans(t *testing.T) {
	root := t.TempDir()
	dir := func(name string) string { return filepath.Join(root, name) }
	one := smallRun(t, dir("one"), "contrast")
	mustRun(t, one)
	methods := smallRun(t, dir("methods"), "contrast")
	methods.Seed, methods.Methods = 2, []string{"source", "tent"}
	mustRun(t, methods)
	corruptions := smallRun(t, dir("corruptions"), "contrast", "pixelate")
	corruptions.Seed = 3
	mustRun(t, corruptions)
	for _, tc := range []struct {
		dirs []string
		msg  string
	}{
		{[]string{dir("one"), dir("methods")}, "they were run with other methods (source in " + dir("one") + "; source, tent in " + dir("methods") + "), and seeds are compared on the same ones"},
		{[]string{dir("methods"), dir("one")}, "other methods (source, tent in " + dir("methods") + "; source in " + dir("one") + ")"},
		{[]string{dir("one"), dir("corruptions")}, "other corruptions (contrast in " + dir("one") + "; contrast, pixelate in " + dir("corruptions") + ")"},
	} {
		_, err := CompareSeeds(tc.dirs)
		if !errors.Is(err, ErrNotSeeds) || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "finish") {
			t.Errorf("%q: %v, want %q", tc.dirs, err, tc.msg)
		}
	}
	// One plan, one seed unfinished: the run is to be finished.
	unfinished := smallRun(t, dir("unfinished"), "contrast", "pixelate")
	unfinished.Seed = 4
	mustRun(t, unfinished)
	b, _ := os.ReadFile(filepath.Join(dir("unfinished"), ResultsFile))
	first, _, _ := strings.Cut(string(b), "\n")
	os.WriteFile(filepath.Join(dir("unfinished"), ResultsFile), []byte(first+"\n"), 0o644)
	if _, err := CompareSeeds([]string{dir("corruptions"), dir("unfinished")}); err == nil || !strings.Contains(err.Error(), "finish its run") {
		t.Errorf("an unfinished seed: %v", err)
	}
}

// TestReadFolderRefusesBadRecords: a results.jsonl with two records of
// one method and domain, one whose accuracy is not 100·correct/samples,
// one whose domain is not its corruption at its severity, one of more
// samples than the limit, or a damaged line is refused, naming the folder
// (or file and line), the method and the domain, with advice that fits report (whose --out is the
// report's, not the results folder's); a folder holding the seed-N
// folders of eval --seeds is refused with the advice to pass those.
func TestReadFolderRefusesBadRecords(t *testing.T) {
	root := t.TempDir()
	good := filepath.Join(root, "seeds", "seed-1")
	mustRun(t, smallRun(t, good, "contrast"))
	line, err := os.ReadFile(filepath.Join(good, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	// copyWith copies the folder with its results.jsonl replaced by results.
	copyWith := func(name string, results []byte) string {
		dir := filepath.Join(root, name)
		os.MkdirAll(dir, 0o755)
		for _, f := range []string{RunFile, BatchesFile} {
			b, _ := os.ReadFile(filepath.Join(good, f))
			os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		os.WriteFile(filepath.Join(dir, ResultsFile), results, 0o644)
		return dir
	}
	twice := copyWith("twice", append(append([]byte{}, line...), line...))
	acc := copyWith("accuracy", line)
	rewriteRecords(t, acc, func(r *report.Record) { r.Accuracy = 99 })
	damaged := copyWith("damaged", append([]byte("garbage{\n"), line...))
	other := copyWith("other-run", line)
	rewriteRecords(t, other, func(r *report.Record) { r.Run = "0123456789abcdef" })
	domain := copyWith("domain", line)
	rewriteRecords(t, domain, func(r *report.Record) { r.Domain = "contrast/4" })
	limit := copyWith("limit", line)
	rewriteRecords(t, limit, func(r *report.Record) { r.Samples, r.Correct, r.Accuracy = 400, 0, 0 })
	for _, tc := range []struct{ dir, msg string }{
		{other, ": line 1: the record of source on contrast/5 was computed by another configuration (run 0123456789abcdef; this run is "},
		{twice, twice + ": results.jsonl holds two records of source on contrast/5 (lines 1 and 2): delete the one that is not meant"},
		{acc, filepath.Join(acc, ResultsFile) + ": line 1: the record of source on contrast/5 does not add up (accuracy 99, but correct "},
		{domain, filepath.Join(domain, ResultsFile) + ": line 1: the record of source on contrast/4 is of contrast at severity 5, whose domain is contrast/5, not contrast/4"},
		{limit, filepath.Join(limit, ResultsFile) + ": line 1: the record of source on contrast/5 does not add up (400 samples, more than the run's limit of 12 images a domain)"},
		{damaged, "line 1: damaged record"},
		{filepath.Join(root, "seeds"), filepath.Join(root, "seeds") + " is not a results folder (no run.json) but holds the seed folders of eval --seeds: pass those (" +
			filepath.Join(root, "seeds", "seed-*") + ")"},
	} {
		_, err := ReadFolder(tc.dir)
		if err == nil || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "--out") {
			t.Errorf("%s: %v, want %q and no --out", tc.dir, err, tc.msg)
		}
	}
	if _, err := ReadFolder(good); err != nil {
		t.Error(err)
	}
}
