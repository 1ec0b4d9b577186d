package eval

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/internal/dirlock"
	"github.com/subtta/subtta/report"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/online"
)

// Files of a results folder.
const (
	ResultsFile  = "results.jsonl" // one report.Record per finished domain, appended (a domain computed again replaces its record)
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
	// DevicePrecision names the arithmetic of a device's products when it
	// is not float32 (the GPU's tf32, bf16 or fp16, "" otherwise): part of
	// the run's identity, since another arithmetic is another model.
	DevicePrecision string
	// Tokenizer encodes the class prompts; nil means loading Config.Vocab.
	Tokenizer textenc.Tokenizer
	// Progress is called after every batch.
	Progress func(Progress)
	// AfterDomain is called once a domain's record is stored.
	AfterDomain func(report.Record)
	// Frost finds the frost overlays (frost1.png … frost5.jpg) when frost
	// is corrupted on the fly and Config.FrostDir is empty (the command
	// line writes out the ones the binary embeds).
	Frost func() (dir string, err error)
	// Log receives a line for each notable event (what is resumed, files
	// written); nil discards them.
	Log io.Writer
	// CheckpointEvery is the least time between two checkpoints of a domain
	// in progress (the method's state after its latest batch, in Out/state),
	// from which an interrupted run continues mid-domain; 0 means
	// DefaultCheckpointEvery, a negative value none. A run being cancelled
	// checkpoints at once. The continual and mixed protocols checkpoint
	// their one stream.
	CheckpointEvery time.Duration
	// DiagnosticWorkers is how many goroutines compute the batches'
	// diagnostics while the method steps on the next batches
	// (online.RunnerConfig.DiagnosticWorkers): 0 means
	// online.DefaultDiagnosticWorkers, a negative count none (each batch's
	// diagnostics between its step and the next). The results do not
	// depend on it.
	DiagnosticWorkers int
	// Command, if given, is the command line and config file the run was
	// started with, stated in results.json.
	Command *report.Command

	// runID is the identity of the run, set by Run once the results folder
	// is checked, that its records carry (identity.digest).
	runID *identity
}

// Progress describes how far a run is.
type Progress struct {
	Method, Domain string
	// Done and Total count images over the whole run: those computed so
	// far, and those to be computed (less what checkpoints of unfinished
	// domains restore, once they are read).
	Done, Total int
	// MethodDone and MethodTotal count the images of Method alone, in this
	// run: methods differ in speed many times over, so that a time left is
	// estimated per method. MethodsLeft counts the methods after Method
	// that have images to compute.
	MethodDone, MethodTotal, MethodsLeft int

	planned    map[string]int // images to compute per method, as planned (planRemaining)
	order      []string       // the methods, in run order
	methodFrom int            // Done when Method started
}

// advance records n more images of method on domain; Total already holds
// what checkpoints of method restored.
func (p *Progress) advance(method, domain string, n int) {
	if method != p.Method {
		p.methodFrom = p.Done
	}
	p.Method, p.Domain = method, domain
	p.Done += n
	later, left := 0, 0
	if i := slices.Index(p.order, method); i >= 0 {
		for _, m := range p.order[i+1:] {
			if p.planned[m] > 0 {
				later += p.planned[m]
				left++
			}
		}
	}
	p.MethodDone = p.Done - p.methodFrom
	p.MethodTotal = p.Total - p.methodFrom - later
	p.MethodsLeft = left
}

// Summary is what a run did.
type Summary struct {
	Config  Config
	Records []report.Record // every stored domain, this run's and earlier ones, the latest record of each
	// Computed counts domains evaluated by this run, Resumed those found
	// finished in the results folder and not redone.
	Computed, Resumed int
	// Continued counts batches of unfinished domains taken from their
	// checkpoints rather than computed again.
	Continued         int
	Files             []string // the tables and plots written
	Started, Finished time.Time

	command *report.Command // Options.Command, for results.json
}

// batchLine is one line of batches.jsonl.
type batchLine struct {
	Method string `json:"method"`
	online.BatchRecord
}

// runFile is the content of run.json.
type runFile struct {
	Identity identity `json:"identity"`
	Config   Config   `json:"config"`
	// Classes are the run's class names in label order (those kept, with
	// Config.Classes or ClassNames): what the data's labels were read as.
	// They are no part of the identity; a merged folder has its shards'.
	Classes []string `json:"classes,omitempty"`
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
	e := &evaluation{ctx: ctx, cfg: cfg, opt: opt, sum: &Summary{Config: cfg, Started: time.Now(), command: opt.Command}}
	for _, w := range cfg.overridden() {
		e.logf("%s", w)
	}
	// The model and the data are checked before anything is written.
	if err := e.openInputs(); err != nil {
		return nil, err
	}
	defer e.src.Close()
	if err := e.checkClassCount(); err != nil {
		return nil, err
	}
	created := missingDirs(cfg.Out)
	if err := e.lockResults(); err != nil {
		return nil, err
	}
	defer e.lock.Unlock()
	if err := e.readResults(); err != nil {
		return nil, e.abandon(created, err)
	}
	if err := e.openDomains(); err != nil {
		return nil, e.abandon(created, err)
	}
	defer closeDomains(e.domains)
	if err := e.checkStreams(); err != nil {
		return nil, err
	}
	if e.mine, err = shardUnits(cfg); err != nil {
		return nil, err
	}
	if cfg.Shard != nil {
		e.logf("shard %s: %d of the run's %d units", cfg.Shard, len(e.mine), len(cfg.Methods)*len(e.domains))
		if len(e.mine) == 0 {
			// Not an error: a batch system's array may have more tasks
			// than the run has units (ShardFromEnv).
			e.logf("warning: shard %s has nothing to do: all %d units of the run go to other shards", cfg.Shard, len(cfg.Methods)*len(e.domains))
		}
	}
	e.planRemaining()
	for _, name := range cfg.Methods {
		if err := e.runMethod(name); err != nil {
			return e.sum, err
		}
	}
	return e.sum, e.writeReports()
}

// evaluation is the state of one Run, shared by its steps.
type evaluation struct {
	ctx context.Context
	cfg Config
	opt Options
	sum *Summary

	// The inputs (openInputs).
	model *clip.Model
	pre   *data.Preprocessor
	tok   textenc.Tokenizer
	src   *source
	order *sampleOrder // Config.Order's stream order, nil for the shuffle

	// The results folder (lockResults, readResults).
	lock        *dirlock.Lock
	resultsPath string
	prior       []report.Record // the records stored before this run
	priorLines  []recordLine    // where each of prior is in the results file

	// The domains, in stream order, and what is left of them (planRemaining).
	domains  []*domain
	done     map[[2]string]bool // (method, domain) pairs stored in the results
	todo     map[string][]int   // method → indices into domains still to compute
	mine     map[Unit]bool      // the units of this shard; nil: all (shardUnits)
	progress Progress

	heads  map[string]tta.Heads // by templates: methods share heads
	warned map[string]bool      // prompts too long for the context, reported once
}

func (e *evaluation) logf(format string, a ...any) {
	if e.opt.Log != nil {
		fmt.Fprintf(e.opt.Log, format+"\n", a...)
	}
}

// checkClassCount refuses, before any method runs, a method that cannot
// adapt with the run's classes (tta.Preset.MinClasses: SubTTA's text
// subspace leaves out the first principal direction, so it needs three),
// which would otherwise fail at its first batch after the methods before
// it had run.
func (e *evaluation) checkClassCount() error {
	for _, name := range e.cfg.Methods {
		p, err := e.cfg.preset(name)
		if err != nil {
			return err
		}
		if n, why := p.MinClasses(); len(e.src.classes) < n {
			if why != "" {
				why = ": " + why
			}
			return fmt.Errorf("%w: %s needs at least %d classes%s; the run has %d (%s)", ErrTooFewClasses, name, n, why,
				len(e.src.classes), strings.Join(e.src.classes, ", "))
		}
	}
	return nil
}

// ErrTooFewClasses: a method of the run cannot adapt with so few classes
// (checkClassCount).
var ErrTooFewClasses = errors.New("eval: too few classes")

// openInputs loads the model (unless Options gives one) with clip.Create,
// takes its preprocessor and tokenizer (unless Options gives one; see
// clip.Spec.Vocab), and opens the data source.
func (e *evaluation) openInputs() error {
	cfg := e.cfg
	var err error
	e.model = e.opt.Model
	if e.model == nil {
		b, err := clip.Create(cfg.spec())
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		e.model = b.Model
	}
	if e.model.Precision() != cfg.Precision {
		if err := e.model.SetPrecision(cfg.Precision); err != nil {
			return fmt.Errorf("eval: Config.Precision %v: %w", cfg.Precision, err)
		}
	}
	if e.pre, err = e.model.Preprocessor(); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	e.tok = e.opt.Tokenizer
	if e.tok == nil {
		if e.tok, err = cfg.spec().Tokenizer(e.model); err != nil {
			return fmt.Errorf("eval: %w", err)
		}
	}
	if e.order, err = cfg.readOrder(); err != nil {
		return err
	}
	if err := checkDataLayout(cfg); err != nil {
		return err
	}
	if e.src, err = openSourceFor(cfg, e.model.Classes); err != nil {
		return err
	}
	for _, check := range []func(Config, *source) error{checkCleanClasses, checkImageNetCTree} {
		if err := check(cfg, e.src); err != nil {
			e.src.Close()
			return err
		}
	}
	if err := e.src.restrictClasses(cfg); err != nil {
		e.src.Close()
		return err
	}
	return nil
}

// lockResults creates the results folder and takes its lock: two runs in
// one folder would each compute and append every domain, and share the
// state files' temporary names.
func (e *evaluation) lockResults() error {
	if err := os.MkdirAll(e.cfg.Out, 0o755); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	lock, err := dirlock.Acquire(e.cfg.Out)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	e.lock = lock
	return nil
}

// missingDirs lists dir and those of its parents that do not exist, the
// deepest first: what creating dir creates.
func missingDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); !exists(d); d = filepath.Dir(d) {
		out = append(out, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	return out
}

// abandon undoes what a run refused before computing anything wrote into
// a results folder it created (the folders in created): the lock file,
// run.json and the fingerprint cache, then the folders if they are empty.
// A folder that existed before the run is left as it is. It returns err.
func (e *evaluation) abandon(created []string, err error) error {
	if len(created) == 0 {
		return err
	}
	e.lock.Unlock()
	for _, name := range []string{dirlock.FileName, RunFile, fingerprintCacheFile} {
		os.Remove(filepath.Join(e.cfg.Out, name))
	}
	for _, d := range created {
		if os.Remove(d) != nil {
			break // not empty: something else is in it
		}
	}
	return err
}

// readResults reads the records already stored in the results folder, and
// refuses a folder made with another configuration (compareRunFile) or
// records of another run (checkRecords).
func (e *evaluation) readResults() error {
	e.resultsPath = filepath.Join(e.cfg.Out, ResultsFile)
	var err error
	if e.prior, e.priorLines, err = readRecords(e.resultsPath, evalDamageAdvice); err != nil {
		return err
	}
	if err := checkFields(e.resultsPath, e.prior, e.priorLines, e.cfg, evalLineAdvice); err != nil {
		return err
	}
	if err := e.resolveFrost(); err != nil {
		return err
	}
	cache := loadHashCache(filepath.Join(e.cfg.Out, fingerprintCacheFile))
	id, err := runIdentity(e.cfg, e.opt, e.tok, e.src, cache)
	if err != nil {
		return err
	}
	old, err := readRunFile(e.cfg.Out)
	if err != nil {
		return err
	}
	vouched := old.exists // run.json vouches for what the folder holds, once checked
	states, err := os.ReadDir(filepath.Join(e.cfg.Out, stateDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Unread, saved checkpoints would look absent: the checks below
		// would take the folder for a fresh one.
		return fmt.Errorf("eval: the saved states of %s: %w", e.cfg.Out, err)
	}
	haveResults := len(e.prior) > 0 || len(states) > 0
	if id, err = compareRunFile(e.cfg, id, old, haveResults, e.logf); err != nil {
		return err
	}
	if err := checkShardFolder(e.cfg, old, haveResults); err != nil {
		return err
	}
	unnamed, err := checkRecords(e.resultsPath, e.prior, e.priorLines, id, vouched, evalLineAdvice)
	if err != nil {
		return err
	}
	if unnamed > 0 {
		// run.json, which matches this run, vouches for them: the folder
		// was made by an earlier build of this configuration.
		e.logf("warning: %s: %d records carry no run identity (written by an earlier build): taken as this run's because %s, which says what made the folder, is this run's",
			e.resultsPath, unnamed, filepath.Join(e.cfg.Out, RunFile))
	}
	if err := checkCounts(e.resultsPath, filepath.Join(e.cfg.Out, BatchesFile), e.prior, e.priorLines, e.cfg.Limit, evalLineAdvice); err != nil {
		return err
	}
	if err := writeRun(e.cfg.Out, runFile{Identity: id, Config: e.cfg, Classes: e.src.classes}); err != nil {
		return err
	}
	if err := cache.save(); err != nil {
		e.logf("warning: %v (the next run hashes the data again)", err)
	}
	if !vouched && len(states) > 0 {
		// Nothing vouches for checkpoints made before run.json went missing.
		e.logf("no %s: the checkpoints in %s cannot be checked against this run; removing them", RunFile, filepath.Join(e.cfg.Out, stateDir))
		if err := os.RemoveAll(filepath.Join(e.cfg.Out, stateDir)); err != nil {
			return fmt.Errorf("eval: %w", err)
		}
	}
	e.opt.runID = &id
	return nil
}

// Advice for a record of a results file that is damaged or does not add
// up: eval computes the domain again once its line is gone, and its --out
// may name a fresh folder; report only reads the folder (its --out is the
// report's), so the line is computed again by eval on that folder.
const (
	evalLineAdvice   = "delete its line to compute it again, or use another --out"
	evalDamageAdvice = "delete that line (the domain it held is then computed again), or use another --out"
	reportLineAdvice = "delete its line, then run the eval that wrote the folder once more to compute it"
)

// readRecords reads a results file, and where each record is in it; a
// damaged line is an error that says how to recover (advice:
// evalDamageAdvice or reportLineAdvice).
func readRecords(path, advice string) ([]report.Record, []recordLine, error) {
	recs, err := report.ReadRecordsFile(path)
	if errors.Is(err, report.ErrDamagedLine) {
		return nil, nil, fmt.Errorf("eval: %w; %s", err, advice)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("eval: %w", err)
	}
	lines, err := recordLines(path)
	if err != nil {
		return nil, nil, err
	}
	if len(lines) != len(recs) {
		return nil, nil, fmt.Errorf("eval: %s changed while it was read (%d records, then %d): read it again once nothing writes it", path, len(recs), len(lines))
	}
	return recs, lines, nil
}

// recordLine is where a record of a results file is: its line, and the
// fields the line gives (a field left out reads as 0 or "").
type recordLine struct {
	line   int
	fields map[string]bool
}

// recordLines returns, for each record of the results file at path in
// the order report.ReadRecordsFile reads them, its line and fields: the
// lines that are not blank, but for a last line cut short that does not
// parse (a killed run's, which report.ReadRecordsFile drops).
func recordLines(path string) ([]recordLine, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f) // a line may exceed any fixed token limit
	var out []recordLine
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("eval: %s: line %d: %w", path, line, err)
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			var rec report.Record
			var fields map[string]json.RawMessage
			if json.Unmarshal(t, &rec) == nil && json.Unmarshal(t, &fields) == nil {
				rl := recordLine{line: line, fields: map[string]bool{}}
				for k := range fields {
					rl.fields[k] = true
				}
				out = append(out, rl)
			}
		}
		if err == io.EOF {
			return out, nil
		}
	}
}

// at names the line of record i of the results file path, for messages.
func at(path string, lines []recordLine, i int) string {
	if i < len(lines) {
		return fmt.Sprintf("%s: line %d", path, lines[i].line)
	}
	return path
}

// resolveFrost finds the frost overlays (Options.Frost) when this run makes
// frost on the fly and Config.FrostDir names none, so that the overlays
// used are part of the run's identity.
func (e *evaluation) resolveFrost() error {
	if e.src.kind != "clean" || !slices.Contains(e.cfg.Corruptions, "frost") || e.cfg.FrostDir != "" || e.opt.Frost == nil {
		return nil
	}
	dir, err := e.opt.Frost()
	if err != nil {
		return fmt.Errorf("eval: frost overlays: %w", err)
	}
	e.cfg.FrostDir, e.src.cfg.FrostDir = dir, dir
	return nil
}

// A plannedDomain is one domain of the run before it is opened.
type plannedDomain struct {
	name       string
	corruption string
	severity   int
	down       bool // on the way down of the gradual protocol
}

// planDomains lists the run's domains in stream order: the clean images
// first when asked for, then every corruption at each severity in turn.
func planDomains(cfg Config) []plannedDomain {
	var plan []plannedDomain
	if slices.Contains(cfg.Corruptions, Clean) {
		plan = append(plan, plannedDomain{name: Clean, corruption: Clean})
	}
	if isVariant(cfg.Dataset) {
		return []plannedDomain{{name: cfg.Dataset, corruption: cfg.Dataset}}
	}
	if cfg.Protocol == online.Gradual {
		for _, c := range cfg.Corruptions {
			if c == Clean {
				continue
			}
			for i, sev := range online.GradualSeverities {
				p := plannedDomain{name: c + "/" + strconv.Itoa(sev), corruption: c, severity: sev}
				if i > slices.Index(online.GradualSeverities, 5) {
					p.name, p.down = p.name+"↓", true
				}
				plan = append(plan, p)
			}
		}
		return plan
	}
	for _, sev := range cfg.Severities {
		for _, c := range cfg.Corruptions {
			if c != Clean {
				plan = append(plan, plannedDomain{name: c + "/" + strconv.Itoa(sev), corruption: c, severity: sev})
			}
		}
	}
	return plan
}

// openDomains opens every domain of the run, each streamed in the order of
// streamOrder and preprocessed for the model. On error, those already open
// are closed.
func (e *evaluation) openDomains() error {
	e.src.frost = e.opt.Frost
	e.logf("data: %s; %s", e.src.describe(), describeClasses(e.cfg, e.src, e.model.Classes))
	pre := e.pre
	plan := planDomains(e.cfg)
	domains := make([]*domain, 0, len(plan))
	for _, p := range plan {
		ds, err := e.src.open(p.corruption, p.severity)
		if err != nil {
			closeDomains(domains)
			return err
		}
		ds = e.src.subset(ds)
		domains = append(domains, &domain{name: p.name, corruption: p.corruption, severity: p.severity, down: p.down, ds: ds,
			pre: pre, workers: e.cfg.Workers})
		if len(ds.Classes()) != len(e.src.classes) {
			closeDomains(domains)
			return fmt.Errorf("eval: %s: %d classes, expected %d", p.name, len(ds.Classes()), len(e.src.classes))
		}
	}
	e.domains = domains
	return nil
}

// closeDomains closes the domains' datasets, the last opened first.
func closeDomains(domains []*domain) {
	for _, d := range slices.Backward(domains) {
		d.ds.Close()
	}
}

// planRemaining finds, for every method, the domains not yet in the
// results, and counts their images for the progress total.
func (e *evaluation) planRemaining() {
	e.done = map[[2]string]bool{}
	for _, r := range e.prior {
		e.done[[2]string{r.Method, r.Domain}] = true
	}
	e.todo = make(map[string][]int, len(e.cfg.Methods))
	total := 0
	planned := map[string]int{}
	for _, name := range e.cfg.Methods {
		for i, d := range e.domains {
			if e.mine != nil && !e.mine[Unit{name, d.name}] {
				continue
			}
			if !e.done[[2]string{name, d.name}] {
				e.todo[name] = append(e.todo[name], i)
				total += online.Limited(d.Len(), e.cfg.Limit)
				planned[name] += online.Limited(d.Len(), e.cfg.Limit)
			}
		}
	}
	e.progress = Progress{Total: total, planned: planned, order: e.cfg.Methods}
}

// runMethod evaluates one method on the domains it has left, and then
// resets the model to its loaded state for the next method.
func (e *evaluation) runMethod(name string) error {
	units := methodUnits(e.mine, name, e.domains)
	if units == 0 {
		e.logf("%s: not in shard %s", name, e.cfg.Shard)
		return nil
	}
	if len(e.todo[name]) == 0 {
		e.sum.Resumed += units
		e.logf("%s: all %d domains already in %s", name, units, e.resultsPath)
		return nil
	}
	p, err := e.cfg.preset(name)
	if err != nil {
		return err
	}
	h, err := e.methodHeads(name, p)
	if err != nil {
		return err
	}
	head := h.Head
	method, err := p.New(e.model, h)
	if err != nil {
		return fmt.Errorf("eval: %s: %w", name, err)
	}
	if err := checkCarried(e.cfg, p, method); err != nil {
		return err
	}
	text, err := online.DiagnosticSubspace(method, head, e.cfg.Dataset)
	if err != nil {
		// Only the geometric diagnostics need it (few classes, say).
		e.logf("%s: no subspace diagnostics: %v", name, err)
		text = nil
	}
	mr := &methodRun{cfg: e.cfg, preset: p, order: e.order, method: method, text: text, head: head, domains: e.domains, build: report.CurrentEnvironment().Build,
		todo: e.todo[name], units: units, done: e.done, opt: e.opt, progress: &e.progress, ctx: e.ctx, sum: e.sum, logf: e.logf}
	err = mr.run()
	// Leave the model as it was loaded for the next method.
	if rerr := method.Reset(); err == nil && rerr != nil {
		err = fmt.Errorf("eval: %s: reset: %w", name, rerr)
	}
	return err
}

// methodHeads returns the zero-shot heads of preset p (method name), built
// once for all methods that share them, and warns of prompts longer than
// the text context.
func (e *evaluation) methodHeads(name string, p tta.Preset) (tta.Heads, error) {
	key := p.HeadKey()
	if h, ok := e.heads[key]; ok {
		return h, nil
	}
	if e.heads == nil {
		e.heads, e.warned = map[string]tta.Heads{}, map[string]bool{}
	}
	classes := p.ClassNames(e.src.classes)
	ctxLen := e.model.Config.Text.ContextLength
	for _, tmpl := range p.Templates {
		for _, c := range classes {
			prompt := strings.ReplaceAll(tmpl, "{}", c)
			if n := len(e.tok.Encode(prompt)) + 2; n > ctxLen && !e.warned[prompt] {
				e.warned[prompt] = true
				e.logf("warning: prompt %q is %d tokens, more than the text context of %d: it is cut", prompt, n, ctxLen)
			}
		}
	}
	h, err := p.Heads(e.model, e.tok, e.src.classes)
	if err != nil {
		return tta.Heads{}, fmt.Errorf("eval: %s: head: %w", name, err)
	}
	e.heads[key] = h
	return h, nil
}

// writeReports reads back every stored record and writes the tables and
// plots of the latest record of each domain.
func (e *evaluation) writeReports() error {
	recs, err := report.ReadRecordsFile(e.resultsPath)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	e.sum.Records = report.Latest(recs) // a folder of an earlier build may hold a redone domain twice
	e.sum.Finished = time.Now()
	files, err := writeTables(e.cfg, recs, e.sum)
	e.sum.Files = files
	if err != nil {
		return err
	}
	for _, f := range files {
		e.logf("wrote %s", f)
	}
	return nil
}

// compareRunFile refuses to resume into a folder whose run.json names
// another identity, when the folder holds results or checkpoints. It
// returns id completed with what this run did not use from the folder's
// identity (see identity.merge).
//
// A run.json of a build that identified a data folder by its files' names
// and sizes, or a data file over maxHashedBytes by its ends, is accepted
// when those still match and nothing else differs (logf says so): the
// folder then records the data by content. It is the one case where a
// change of contents before this run could go unseen.
func compareRunFile(cfg Config, id identity, stored storedRunFile, haveResults bool, logf func(string, ...any)) (identity, error) {
	path := filepath.Join(cfg.Out, RunFile)
	if !stored.exists || !haveResults {
		return id, nil
	}
	if stored.parseErr != nil {
		return id, fmt.Errorf("eval: %s: %w", path, stored.parseErr)
	}
	old := stored.runFile
	merged, diff := id.merge(old.Identity)
	if diff != "" && old.Identity.Data != id.Data {
		if legacy, err := legacyDataFingerprint(cfg.Data); err == nil && legacy == old.Identity.Data {
			upgraded := old.Identity
			upgraded.Data = id.Data
			if m, d := id.merge(upgraded); d == "" {
				if logf != nil {
					logf("%s: the data was identified by an earlier build as %q, which still matches; it is now identified by content as %q",
						path, legacy, id.Data)
				}
				merged, diff = m, d
			}
		}
	}
	if diff != "" {
		return id, fmt.Errorf("eval: %s holds results of another configuration (%s); use another --out or remove the folder",
			cfg.Out, diff)
	}
	return merged, nil
}

// storedRunFile is a results folder's run.json as readRunFile found it.
type storedRunFile struct {
	exists   bool
	runFile  runFile
	parseErr error // what is wrong with a run.json that does not parse
}

// readRunFile reads the folder's run.json once for the checks of a
// resumed run (compareRunFile, checkShardFolder). A missing file is no
// error; one that does not parse is an error only where the folder's
// results depend on it (compareRunFile).
func readRunFile(out string) (storedRunFile, error) {
	b, err := os.ReadFile(filepath.Join(out, RunFile))
	if errors.Is(err, os.ErrNotExist) {
		return storedRunFile{}, nil
	}
	if err != nil {
		return storedRunFile{}, fmt.Errorf("eval: %w", err)
	}
	st := storedRunFile{exists: true}
	st.parseErr = json.Unmarshal(b, &st.runFile)
	return st, nil
}

// writeRunFile records the run's identity and configuration in run.json.
func writeRunFile(cfg Config, id identity) error {
	return writeRun(cfg.Out, runFile{Identity: id, Config: cfg})
}

// writeRun writes rf as the run.json of the results folder out.
func writeRun(out string, rf runFile) error {
	b, err := json.MarshalIndent(rf, "", "  ")
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	return writeFileAtomic(filepath.Join(out, RunFile), append(b, '\n'))
}

// checkRecords refuses records made by another run: each record that
// names its run must name id's digest for its domain (identity.digest);
// records that name none (written by a build before records did) are
// trusted only when the folder's run.json vouched for them, and their
// count is returned, for the caller to say so. advice says what to do
// about a record of another run (evalLineAdvice, reportLineAdvice); lines
// are where the records are (readRecords).
func checkRecords(path string, recs []report.Record, lines []recordLine, id identity, vouched bool, advice string) (unnamed int, err error) {
	for i, r := range recs {
		if r.Run == "" {
			unnamed++
			continue
		}
		if want := id.digest(r.Corruption); r.Run != want {
			return unnamed, fmt.Errorf("eval: %s: the record of %s on %s was computed by another configuration (run %s; this run is %s): %s",
				at(path, lines, i), r.Method, r.Domain, r.Run, want, advice)
		}
	}
	if unnamed > 0 && !vouched {
		return unnamed, fmt.Errorf("eval: %s: %d records carry no run identity (written by an earlier build) and %s is missing, so nothing shows they belong to this configuration: restore %s, delete %s to compute them again, or use another --out",
			path, unnamed, RunFile, RunFile, path)
	}
	return unnamed, nil
}

// recordFields are the fields every build has written in every record
// (report.Record's that are never left out): a line without one was not
// written by eval, and what it lacks would be read as 0 or "".
var recordFields = []string{"method", "domain", "corruption", "severity", "samples", "correct", "accuracy"}

// checkFields refuses a record that eval cannot have written for a run
// of cfg (its dataset and protocol): one that lacks a field of
// recordFields or names no method or domain, one whose corruption is not
// one of the dataset's, and one whose domain is not the one its
// corruption and severity make (planDomains), which would be shown, and
// resumed, as another domain's result. advice says how to recover
// (evalLineAdvice, reportLineAdvice); lines are where the records are.
func checkFields(path string, recs []report.Record, lines []recordLine, cfg Config, advice string) error {
	for i, r := range recs {
		var missing []string
		for _, f := range recordFields {
			if i < len(lines) && !lines[i].fields[f] {
				missing = append(missing, f)
			}
		}
		what := fmt.Sprintf("the record of %s on %s", r.Method, r.Domain)
		bad := ""
		switch {
		case len(missing) > 0:
			bad = "lacks the field " + missing[len(missing)-1]
			if n := len(missing); n > 1 {
				bad = "lacks the fields " + strings.Join(missing[:n-1], ", ") + " and " + missing[n-1]
			}
			if r.Method == "" || r.Domain == "" {
				what = "the record"
			}
		case r.Method == "" || r.Domain == "":
			what, bad = "the record", fmt.Sprintf("names no method or no domain (method %q, domain %q)", r.Method, r.Domain)
		default:
			bad = domainMismatch(r, cfg)
		}
		if bad != "" {
			return fmt.Errorf("eval: %s: %s %s: %s", at(path, lines, i), what, bad, advice)
		}
	}
	return nil
}

// domainMismatch says how record r's corruption, severity and domain
// differ from those of a domain of a run of cfg (planDomains): "" when
// they are one of them.
func domainMismatch(r report.Record, cfg Config) string {
	c, sev := r.Corruption, r.Severity
	want := ""
	switch {
	case isVariant(cfg.Dataset):
		if c != cfg.Dataset || sev != 0 {
			return fmt.Sprintf("gives corruption %q at severity %d: %s has one domain, %s, of no corruption or severity", c, sev, cfg.Dataset, cfg.Dataset)
		}
		want = cfg.Dataset
	case c == Clean:
		if sev != 0 {
			return fmt.Sprintf("gives severity %d for the clean images, which have none", sev)
		}
		want = Clean
	case c == "" && cfg.Protocol == online.Gradual:
		// The way down of the gradual protocol: "fog/4↓", of no
		// corruption or severity (methodRun.record).
		name, s, ok := strings.Cut(strings.TrimSuffix(r.Domain, "↓"), "/")
		down := online.GradualSeverities[slices.Index(online.GradualSeverities, 5)+1:]
		if n, err := strconv.Atoi(s); ok && err == nil && strings.HasSuffix(r.Domain, "↓") && slices.Contains(down, n) && sev == 0 {
			if _, err := corrupt.Lookup(name); err == nil {
				return ""
			}
		}
		return fmt.Sprintf("gives no corruption and severity %d, which only a domain of the gradual protocol's way down has (such as fog/4↓, of severity 0)", sev)
	default:
		if _, err := corrupt.Lookup(c); err != nil {
			return fmt.Sprintf("gives corruption %q, which is none of %s's", c, cfg.Dataset)
		}
		if sev < 1 || sev > 5 {
			return fmt.Sprintf("gives %s at severity %d, which is not in 1…5", c, sev)
		}
		want = c + "/" + strconv.Itoa(sev)
	}
	if r.Domain != want {
		return fmt.Sprintf("is of %s, whose domain is %s, not %s", describeDomain(c, sev), want, r.Domain)
	}
	return ""
}

// describeDomain names a corruption at a severity, for messages.
func describeDomain(corruption string, severity int) string {
	if severity == 0 {
		return corruption
	}
	return fmt.Sprintf("%s at severity %d", corruption, severity)
}

// checkCounts refuses a record whose counts disagree (a line edited by
// hand, or damaged in a way JSON does not show): correct must lie within
// samples, samples within limit (the run's --limit, when positive),
// accuracy must be 100·correct/samples (to 1e-9 percent: both are
// written from the same integers), and where batches.jsonl holds the
// domain's batches for the method exactly once (their sizes adding up to
// samples), their correct counts must add up to correct. advice says how
// to recover (evalLineAdvice, reportLineAdvice); lines are where the
// records are (readRecords).
func checkCounts(path, batchesPath string, recs []report.Record, lines []recordLine, limit int, advice string) error {
	type key struct{ method, stream string }
	var sums map[key][2]int // size, correct
	for i, r := range recs {
		bad := ""
		switch {
		case r.Samples < 0 || r.Correct < 0 || r.Correct > r.Samples:
			bad = fmt.Sprintf("correct %d of %d samples", r.Correct, r.Samples)
		case limit > 0 && r.Samples > limit:
			bad = fmt.Sprintf("%d samples, more than the run's limit of %d images a domain", r.Samples, limit)
		case r.Samples > 0 && math.Abs(r.Accuracy-100*float64(r.Correct)/float64(r.Samples)) > 1e-9:
			bad = fmt.Sprintf("accuracy %v, but correct %d of %d samples is %v", r.Accuracy, r.Correct, r.Samples, 100*float64(r.Correct)/float64(r.Samples))
		case r.Samples == 0 && r.Accuracy != 0:
			bad = fmt.Sprintf("accuracy %v of no samples", r.Accuracy)
		}
		if bad == "" {
			if sums == nil {
				sums = map[key][2]int{}
				if f, err := os.Open(batchesPath); err == nil {
					dec := json.NewDecoder(f)
					for {
						var b batchLine
						if dec.Decode(&b) != nil {
							break
						}
						k := key{b.Method, b.Stream}
						sums[k] = [2]int{sums[k][0] + b.Size, sums[k][1] + b.Correct}
					}
					f.Close()
				}
			}
			if c, ok := sums[key{r.Method, r.Domain}]; ok && c[0] == r.Samples && c[1] != r.Correct {
				bad = fmt.Sprintf("correct %d, but its batches in %s add up to %d", r.Correct, filepath.Base(batchesPath), c[1])
			}
		}
		if bad != "" {
			return fmt.Errorf("eval: %s: the record of %s on %s does not add up (%s): %s",
				at(path, lines, i), r.Method, r.Domain, bad, advice)
		}
	}
	return nil
}

// checkStreams refuses a stored record of a domain of this run whose
// samples are not the images the run streams of that domain (its length,
// cut to the limit): every finished domain counts each of them once.
func (e *evaluation) checkStreams() error {
	byName := map[string]*domain{}
	for _, d := range e.domains {
		byName[d.name] = d
	}
	for i, r := range e.prior {
		d, ok := byName[r.Domain]
		if !ok {
			continue // a domain of another run into the folder
		}
		if want := online.Limited(d.Len(), e.cfg.Limit); r.Samples != want {
			limit := ""
			if e.cfg.Limit > 0 {
				limit = fmt.Sprintf(", cut to the limit of %d", e.cfg.Limit)
			}
			return fmt.Errorf("eval: %s: the record of %s on %s does not add up (%d samples, but the stream of %s has %d images%s): %s",
				at(e.resultsPath, e.priorLines, i), r.Method, r.Domain, r.Samples, d.name, want, limit, evalLineAdvice)
		}
	}
	return nil
}

// runIdentity fingerprints the run's inputs (see identity); the data's
// files are hashed through cache.
func runIdentity(cfg Config, opt Options, tok textenc.Tokenizer, src *source, cache *hashCache) (identity, error) {
	id := identity{Dataset: cfg.Dataset, Limit: cfg.Limit, BatchSize: cfg.BatchSize, Views: cfg.Views, Protocol: cfg.Protocol,
		NoShuffle: cfg.NoShuffle, Seed: cfg.Seed, CorruptSeed: cfg.CorruptSeed}
	choice, err := kernel.Select(cfg.Precision)
	if err != nil {
		return id, fmt.Errorf("eval: Config.Precision: %w", err)
	}
	id.Precision = choice.ID()
	id.DevicePrecision = opt.DevicePrecision
	switch {
	case opt.ModelID != "":
		id.Model = opt.ModelID
	case opt.Model != nil:
		return id, errors.New("eval: Options.Model needs Options.ModelID, the model's fingerprint")
	default:
		if id.Model, err = fingerprint(cfg.Model, nil); err != nil {
			return id, err
		}
	}
	if id.ModelConfig, err = fingerprint(cfg.ModelConfig, nil); err != nil {
		return id, err
	}
	if cfg.Arch != "" {
		id.ModelConfig = "open_clip " + cfg.Arch
	}
	if cfg.Vocab != "" {
		if id.Tokenizer, err = fingerprint(cfg.Vocab, nil); err != nil {
			return id, err
		}
	} else {
		id.Tokenizer = fmt.Sprintf("%T", tok)
	}
	if id.Data, err = fingerprint(cfg.Data, cache); err != nil {
		return id, err
	}
	if id.Labels, err = fingerprint(cfg.Labels, nil); err != nil {
		return id, err
	}
	if id.SubsetList, err = fingerprint(cfg.SubsetList, nil); err != nil {
		return id, err
	}
	opts, err := cfg.resolvedOptions()
	if err != nil {
		return id, err
	}
	id.Options = optionsIdentity(opts)
	templates, err := cfg.resolveTemplates()
	if err != nil {
		return id, err
	}
	id.Templates = templatesIdentity(templates)
	if id.Order, err = fingerprint(cfg.Order, nil); err != nil {
		return id, err
	}
	if src.allClasses != nil {
		id.Classes = classesIdentity(src.classes, len(src.allClasses))
	}
	if src.kind == "clean" && slices.Contains(cfg.Corruptions, "frost") && src.cfg.FrostDir != "" {
		if id.Frost, err = frostFingerprint(src.cfg.FrostDir); err != nil {
			return id, err
		}
	}
	return id, nil
}

// identityDiff says how identity b (this run's) differs from a (the
// folder's), field by field ("limit was 8, now 4"; a field empty or left
// out in one is "none"), for the refusal of a folder made with another.
func identityDiff(a, b identity) string {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var ma, mb map[string]any
	json.Unmarshal(ja, &ma)
	json.Unmarshal(jb, &mb)
	// Every key of either: a field left out when empty (omitempty) may be
	// set in one only. An input not given (labels, a subset list) is "",
	// which reads as none too.
	show := func(m map[string]any, k string) string {
		if v, ok := m[k]; ok && v != "" {
			return fmt.Sprint(v)
		}
		return "none"
	}
	var diffs []string
	for k := range ma {
		if show(ma, k) != show(mb, k) {
			diffs = append(diffs, fmt.Sprintf("%s was %v, now %v", k, show(ma, k), show(mb, k)))
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s was none, now %v", k, show(mb, k)))
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
