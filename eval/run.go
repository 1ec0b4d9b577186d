package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/internal/dirlock"
	"github.com/subtta/subtta/report"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/tta"
)

// Files of a results folder.
const (
	ResultsFile  = "results.jsonl" // one report.Record per finished domain, appended
	BatchesFile  = "batches.jsonl" // one line per batch: the runner's record and the method
	RunFile      = "run.json"      // the configuration the stored results belong to
	MarkdownFile = "results.md"
	CSVFile      = "results.csv"
	JSONFile     = "results.json"
	PlotsDir     = "plots"
	stateDir     = "state"
)

// Options are the hooks of a run; all are optional.
type Options struct {
	// Model, if not nil, is the model Config.Model names (then only a name,
	// such as "default" for the built-in model); nil means loading it.
	Model *clip.Model
	// ModelID identifies Model's weights in the results folder's run.json
	// (a run is resumed only with the same); required with Model. Without
	// Model the checkpoint file's fingerprint is used.
	ModelID string
	// Tokenizer encodes the class prompts; nil means loading Config.Vocab.
	Tokenizer textenc.Tokenizer
	// Progress is called after every batch.
	Progress func(Progress)
	// AfterDomain is called once a domain's record is stored.
	AfterDomain func(report.Record)
	// Frost finds the frost overlays (frost1.png … frost5.jpg) when frost
	// is corrupted on the fly and Config.FrostDir is empty, for example by
	// downloading them.
	Frost func() (dir string, err error)
	// Log receives a line for each notable event (what is resumed, files
	// written); nil discards them.
	Log io.Writer
}

// Progress describes how far a run is.
type Progress struct {
	Method, Domain string
	// Done and Total count images over the whole run (those still to be
	// computed when it started).
	Done, Total int
}

// Summary is what a run did.
type Summary struct {
	Config  Config
	Records []report.Record // every stored domain, this run's and earlier ones, the latest record of each
	// Computed counts domains evaluated by this run, Resumed those found
	// finished in the results folder and not redone.
	Computed, Resumed int
	Files             []string // the tables and plots written
	Started, Finished time.Time
}

// batchLine is one line of batches.jsonl.
type batchLine struct {
	Method string `json:"method"`
	tta.BatchRecord
}

// runFile is the content of run.json.
type runFile struct {
	Identity identity `json:"identity"`
	Config   Config   `json:"config"`
}

type plannedDomain struct {
	name       string
	corruption string
	severity   int
}

// Run evaluates every method of cfg on every domain, appending each finished
// domain to Out/results.jsonl, and then writes the tables (Markdown, CSV,
// JSON) and, with cfg.Plot, the plots. Domains already in results.jsonl are
// not redone: a run that was interrupted (killed, or ctx cancelled) resumes
// where it stopped when called again with the same configuration.
func Run(ctx context.Context, cfg Config, opt Options) (*Summary, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sum := &Summary{Config: cfg, Started: time.Now()}
	logf := func(format string, a ...any) {
		if opt.Log != nil {
			fmt.Fprintf(opt.Log, format+"\n", a...)
		}
	}
	// The model and the data, checked before anything is written.
	model := opt.Model
	if model == nil {
		var copt clip.Options
		if copt.Config, err = cfg.architecture(); err != nil {
			return nil, err
		}
		if model, err = clip.Load(cfg.Model, copt); err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
	}
	tok := opt.Tokenizer
	if tok == nil {
		if cfg.Vocab == "" {
			return nil, errors.New("eval: no tokenizer: set Config.Vocab or Options.Tokenizer")
		}
		if tok, err = textenc.LoadBPETokenizer(cfg.Vocab); err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
	}
	src, err := openSource(cfg)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// The results folder.
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	// One writer per results folder: two runs would each compute and
	// append every domain, and share the state files' temporary names.
	lock, err := dirlock.Acquire(cfg.Out)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	defer lock.Unlock()
	resultsPath := filepath.Join(cfg.Out, ResultsFile)
	prior, err := report.ReadRecordsFile(resultsPath)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	id, err := runIdentity(cfg, opt, tok, src)
	if err != nil {
		return nil, err
	}
	if err := checkRunFile(cfg, id, len(prior) > 0); err != nil {
		return nil, err
	}

	src.frost = opt.Frost
	logf("data: %s", src.describe())
	var plan []plannedDomain
	if slices.Contains(cfg.Corruptions, Clean) {
		plan = append(plan, plannedDomain{Clean, Clean, 0})
	}
	for _, sev := range cfg.Severities {
		for _, c := range cfg.Corruptions {
			if c != Clean {
				plan = append(plan, plannedDomain{c + "/" + strconv.Itoa(sev), c, sev})
			}
		}
	}
	pre := data.NewCLIPPreprocessor(model.Config.Vision.ImageSize)
	domains := make([]*domain, len(plan))
	for i, p := range plan {
		ds, err := src.open(p.corruption, p.severity)
		if err != nil {
			return nil, err
		}
		defer ds.Close()
		if len(ds.Classes()) != len(src.classes) {
			return nil, fmt.Errorf("eval: %s: %d classes, expected %d", p.name, len(ds.Classes()), len(src.classes))
		}
		domains[i] = &domain{name: p.name, corruption: p.corruption, severity: p.severity, ds: ds,
			indices: streamOrder(ds.Len(), cfg), pre: pre, workers: cfg.Workers}
	}

	done := map[[2]string]bool{}
	for _, r := range prior {
		done[[2]string{r.Method, r.Domain}] = true
	}
	// What is left to compute, for the progress total.
	todo := make(map[string][]int, len(cfg.Methods)) // method → indices into domains
	total := 0
	for _, name := range cfg.Methods {
		for i, d := range domains {
			if !done[[2]string{name, d.name}] {
				todo[name] = append(todo[name], i)
				total += d.Len()
			}
		}
	}
	progress := Progress{Total: total}

	headCache := map[string]methodHeads{} // by templates: methods share heads
	warned := map[string]bool{}           // prompts too long for the context, reported once
	for _, name := range cfg.Methods {
		if len(todo[name]) == 0 {
			sum.Resumed += len(domains)
			logf("%s: all %d domains already in %s", name, len(domains), resultsPath)
			continue
		}
		p, err := tta.Lookup(cfg.Dataset, name)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		if cfg.BatchSize > 0 {
			p.BatchSize = cfg.BatchSize
		}
		key := fmt.Sprint(p.Method == "mint-official", p.PerTemplateHeads, p.Templates)
		h, ok := headCache[key]
		if !ok {
			classes := headClasses(p, src.classes)
			for _, tmpl := range p.Templates {
				for _, c := range classes {
					prompt := strings.ReplaceAll(tmpl, "{}", c)
					if n := len(tok.Encode(prompt)) + 2; n > model.Config.Text.ContextLength && !warned[prompt] {
						warned[prompt] = true
						logf("warning: prompt %q is %d tokens, more than the text context of %d: it is cut", prompt, n, model.Config.Text.ContextLength)
					}
				}
			}
			head, th, err := p.Heads(model, tok, classes)
			if err != nil {
				return nil, fmt.Errorf("eval: %s: head: %w", name, err)
			}
			h = methodHeads{head, th}
			headCache[key] = h
		}
		head := h.head
		method, err := p.New(model, head, h.templates...)
		if err != nil {
			return nil, fmt.Errorf("eval: %s: %w", name, err)
		}
		text, err := diagnosticSubspace(method, head, cfg.Dataset)
		if err != nil {
			// Only the geometric diagnostics need it (few classes, say).
			logf("%s: no subspace diagnostics: %v", name, err)
			text = nil
		}
		mr := &methodRun{cfg: cfg, preset: p, method: method, text: text, head: head, domains: domains,
			todo: todo[name], done: done, opt: opt, progress: &progress, ctx: ctx, sum: sum, logf: logf}
		err = mr.run()
		// Leave the model as it was loaded for the next method.
		if rerr := method.Reset(); err == nil && rerr != nil {
			err = fmt.Errorf("eval: %s: reset: %w", name, rerr)
		}
		if err != nil {
			return sum, err
		}
	}

	recs, err := report.ReadRecordsFile(resultsPath)
	if err != nil {
		return sum, fmt.Errorf("eval: %w", err)
	}
	sum.Records = report.Latest(recs) // a redone domain appears twice in the file
	sum.Finished = time.Now()
	files, err := writeTables(cfg, recs, sum)
	sum.Files = files
	if err != nil {
		return sum, err
	}
	for _, f := range files {
		logf("wrote %s", f)
	}
	return sum, nil
}

// methodHeads are a preset's zero-shot head and, for WATT, its
// single-template heads.
type methodHeads struct {
	head      *mat.Dense
	templates []mat.Matrix
}

// streamOrder is the order in which a domain of n images is streamed: Python's
// random.shuffle with the seed (the official protocol), cut to the limit.
func streamOrder(n int, cfg Config) []int {
	var order []int
	if cfg.NoShuffle {
		order = make([]int, n)
		for i := range order {
			order[i] = i
		}
	} else {
		order = tta.PythonShuffle(n, cfg.Seed)
	}
	if cfg.Limit > 0 && cfg.Limit < n {
		order = order[:cfg.Limit]
	}
	return order
}

// headClasses are the class names as the preset's templates expect them:
// the official MINT code replaces underscores by spaces, the others keep the
// raw names (spec §1.1, §2.2).
func headClasses(p tta.Preset, classes []string) []string {
	if p.Method != "mint-official" {
		return classes
	}
	out := make([]string, len(classes))
	for i, c := range classes {
		out[i] = strings.ReplaceAll(c, "_", " ")
	}
	return out
}

// diagnosticSubspace is the text subspace the diagnostics are measured
// against: SubTTA's own, or for other methods the one SubTTA-M's preset
// would build from the same head.
func diagnosticSubspace(m tta.Method, head *mat.Dense, dataset string) (*tta.TextSubspace, error) {
	if s, ok := m.(*tta.SubTTA); ok {
		return s.Text, nil
	}
	p, err := tta.Lookup(dataset, "subtta-m")
	if err != nil {
		return nil, err
	}
	return tta.NewTextSubspace(head, p.SubTTA.Subspace)
}

// checkRunFile refuses to resume into a folder made with another
// configuration, and records this run's configuration.
func checkRunFile(cfg Config, id identity, haveResults bool) error {
	path := filepath.Join(cfg.Out, RunFile)
	if b, err := os.ReadFile(path); err == nil && haveResults {
		var old runFile
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("eval: %s: %w", path, err)
		}
		if old.Identity != id {
			return fmt.Errorf("eval: %s holds results of another configuration (%s); use another --out or remove the folder",
				cfg.Out, identityDiff(old.Identity, id))
		}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("eval: %w", err)
	}
	b, err := json.MarshalIndent(runFile{Identity: id, Config: cfg}, "", "  ")
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// runIdentity fingerprints the run's inputs (see identity).
func runIdentity(cfg Config, opt Options, tok textenc.Tokenizer, src *source) (identity, error) {
	id := identity{Dataset: cfg.Dataset, Limit: cfg.Limit, BatchSize: cfg.BatchSize, Protocol: cfg.Protocol,
		NoShuffle: cfg.NoShuffle, Seed: cfg.Seed, CorruptSeed: cfg.CorruptSeed}
	var err error
	switch {
	case opt.ModelID != "":
		id.Model = opt.ModelID
	case opt.Model != nil:
		return id, errors.New("eval: Options.Model needs Options.ModelID, the model's fingerprint")
	default:
		if id.Model, err = fingerprint(cfg.Model, true); err != nil {
			return id, err
		}
	}
	if id.ModelConfig, err = fingerprint(cfg.ModelConfig, true); err != nil {
		return id, err
	}
	if cfg.Arch != "" {
		id.ModelConfig = "open_clip " + cfg.Arch
	}
	if cfg.Vocab != "" {
		if id.Tokenizer, err = fingerprint(cfg.Vocab, true); err != nil {
			return id, err
		}
	} else {
		id.Tokenizer = fmt.Sprintf("%T", tok)
	}
	if id.Data, err = fingerprint(cfg.Data, false); err != nil {
		return id, err
	}
	if id.Labels, err = fingerprint(cfg.Labels, true); err != nil {
		return id, err
	}
	if id.SubsetList, err = fingerprint(cfg.SubsetList, true); err != nil {
		return id, err
	}
	if src.kind == "clean" && slices.Contains(cfg.Corruptions, "frost") && cfg.FrostDir != "" {
		if id.Frost, err = frostFingerprint(cfg.FrostDir); err != nil {
			return id, err
		}
	}
	return id, nil
}

func identityDiff(a, b identity) string {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var ma, mb map[string]any
	json.Unmarshal(ja, &ma)
	json.Unmarshal(jb, &mb)
	var diffs []string
	for k, v := range ma {
		if fmt.Sprint(v) != fmt.Sprint(mb[k]) {
			diffs = append(diffs, fmt.Sprintf("%s was %v, now %v", k, v, mb[k]))
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "; ")
}

// writeFileAtomic writes path whole or not at all (internal/atomicfile).
func writeFileAtomic(path string, b []byte) error {
	if err := atomicfile.Write(path, b); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	return nil
}
