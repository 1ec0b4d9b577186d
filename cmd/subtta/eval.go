package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/tta"
)

// With no --data, eval runs the built-in model and images: these methods,
// on this many images of each of the 15 corruptions, take about four
// minutes on two cores.
var builtinMethods = []string{"source", "tent", "subtta-m"}

const builtinLimit = 1000

// evalCmdOptions are the flags of eval.
type evalCmdOptions struct {
	flags     *evalFlags
	precision precisionFlag
	device    deviceOptions

	stdout, stderr io.Writer
}

// newEvalCmd is `subtta eval`.
func newEvalCmd(stdout, stderr io.Writer) *cobra.Command {
	const summary = "test-time adaptation over a corrupted benchmark: the paper's table, CSV, JSON, plots"
	o := &evalCmdOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "eval",
		Short: summary,
		Long: summary + "\n\nWith no flags: the built-in model on the embedded CIFAR-10 test images, corrupted on the fly,\nfor " +
			strings.Join(builtinMethods, ", ") + " on " + strconv.Itoa(builtinLimit) + " images per corruption (about four minutes on two cores).",
		Args: cobra.ArbitraryArgs, // run refuses them, naming the first
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				// eval takes no arguments, but has subcommands: a
				// misspelt one (merg) is named.
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					return usagef("unexpected argument %q: did you mean subtta eval %s? (eval's inputs are flags)", args[0], strings.Join(s, " or "))
				}
			}
			return o.run(cmd.Context(), args)
		},
	}
	fs := c.Flags()
	f := newEvalFlags(fs)
	f.cf = configFlags(fs, stdout)
	f.stderr = stderr
	// results.json's config names, where they are not the flags'.
	f.cf.opt.Aliases = map[string]string{"method-options": "set", "frost-dir": "frost", "subset-list": "subset"}
	f.cf.own = eval.WrittenConfig
	o.flags = f
	o.precision = addPrecisionFlag(fs)
	addDeviceFlags(fs, &o.device)
	c.RegisterFlagCompletionFunc("methods", completeList(tta.Methods))
	c.RegisterFlagCompletionFunc("corruptions", completeList(func() []string { return append([]string{"all", "clean"}, corrupt.Names()...) }))
	c.RegisterFlagCompletionFunc("dataset", completeChoices(append(slices.Clone(tta.PresetDatasets), "imagenet-r", "imagenet-a", "imagenet-k")...))
	c.RegisterFlagCompletionFunc("protocol", completeChoices(eval.Protocols...))
	return c
}

// run runs the evaluation; args are the positional arguments (none).
func (o *evalCmdOptions) run(ctx context.Context, args []string) error {
	f, fs, stdout, stderr := o.flags, o.flags.fs, o.stdout, o.stderr
	prec, g, err := o.precision.choose(o.device.name)
	if err != nil {
		return err
	}
	release, err := o.device.use(g, stderr)
	if err != nil {
		return err
	}
	defer release()
	if len(args) > 0 {
		return usagef("unexpected argument %q (all inputs are flags)", args[0])
	}
	if *f.diagWorkers < -1 {
		return usagef("--diag-workers %d: want -1 (none), 0 (the default) or a count", *f.diagWorkers)
	}
	if *f.studies.wnids {
		return printWNIDs(stdout, *f.dataset)
	}
	if fs.Changed("options") {
		if strings.TrimSpace(*f.studies.list) == "" {
			return usagef("--options %q: give a method, whose options it lists (%s)", *f.studies.list, strings.Join(tta.Methods(), ", "))
		}
		return printOptions(stdout, cmp.Or(*f.dataset, "cifar10-c"), *f.protocol, *f.studies.list)
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	seeds, err := f.seedList(cfg, stderr)
	if err != nil {
		return err
	}
	if fs.Changed("precision") || cfg.Precision == kernel.FP32 {
		cfg.Precision = prec.Precision // a config file's, unless --precision is given
	}
	if cfg.Data == "" {
		if err := useBuiltinData(&cfg, fs.Changed("limit")); err != nil {
			return err
		}
	}
	if err := cfg.Check(); err != nil {
		// A value no run takes (--methods sourc, --severities 6, --set
		// tent.lr=-1): bad usage, as the values refused above, before the
		// model is loaded.
		return usagef("%v", err)
	}
	opt, err := evalOptions(cfg, stderr)
	if err != nil {
		return err
	}
	opt.DiagnosticWorkers = *f.diagWorkers
	opt.Command = f.cf.command("eval", commandLine(ctx))
	opt.DevicePrecision = devicePrecisionID()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if seeds != nil {
		return evalSeeds(ctx, cfg, opt, seeds, *f.quiet, stdout, stderr)
	}
	sum, err := evalOnce(ctx, cfg, opt, *f.quiet, stderr)
	if err != nil {
		return err
	}
	md, err := os.ReadFile(filepath.Join(sum.Config.Out, eval.MarkdownFile))
	if err != nil {
		return err
	}
	stdout.Write(md)
	fmt.Fprintln(stderr, computed(sum))
	return nil
}

// evalOnce runs cfg with a progress bar on stderr (none when quiet).
func evalOnce(ctx context.Context, cfg eval.Config, opt eval.Options, quiet bool, stderr io.Writer) (*eval.Summary, error) {
	var bar *progressBar
	opt.Log = lineWriter{stderr, &bar}
	if !quiet {
		opt.Progress = progressTo(stderr, &bar)
	}
	sum, err := eval.Run(ctx, cfg, opt)
	if bar != nil {
		bar.Done()
	}
	if errors.Is(err, context.Canceled) {
		// As finish writes an error: eval's own prefix once.
		fmt.Fprintf(stderr, "subtta eval: %s\n", strings.TrimPrefix(err.Error(), "eval: "))
		return nil, errInterrupted // exit status 130
	}
	if errors.Is(err, eval.ErrShardFolder) || errors.Is(err, eval.ErrTooFewClasses) {
		// --out names another shard's folder: another --out or --shard is
		// meant; or --methods and --classes (or the data's classes) do
		// not go together.
		return nil, usagef("%s", strings.TrimPrefix(err.Error(), "eval: "))
	}
	return sum, err
}

// computed says what a run computed and where its results are.
func computed(sum *eval.Summary) string {
	cont := ""
	if sum.Continued > 0 {
		cont = fmt.Sprintf(" (%d batches of them from checkpoints)", sum.Continued)
	}
	return fmt.Sprintf("%d domains computed%s, %d taken from earlier runs; results in %s", sum.Computed, cont, sum.Resumed, sum.Config.Out)
}

// seedDir is the folder of seed s of an eval --seeds run into out.
func seedDir(out string, s uint64) string {
	return filepath.Join(out, "seed-"+strconv.FormatUint(s, 10))
}

// evalSeeds runs cfg once per seed, each into its folder (seedDir) of
// cfg.Out, and then writes and prints their report (subtta report) in
// cfg.Out.
func evalSeeds(ctx context.Context, cfg eval.Config, opt eval.Options, seeds []uint64, quiet bool, stdout, stderr io.Writer) error {
	out := cmp.Or(cfg.Out, "subtta-results")
	var dirs []string
	for _, s := range seeds {
		c := cfg
		c.Seed, c.Out = s, seedDir(out, s)
		sum, err := evalOnce(ctx, c, opt, quiet, stderr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "seed %d: %s\n", s, computed(sum))
		dirs = append(dirs, c.Out)
	}
	return writeReport(out, dirs, cfg.Plot, true, stdout, stderr) // seedMatters warned
}

// seedList is the seeds of --seeds, nil without it; cfg is the run's
// configuration, which must give no other seed nor shard, and in which
// the seed must change something (seedMatters; a warning on stderr when
// it changes only some methods' results).
func (f *evalFlags) seedList(cfg eval.Config, stderr io.Writer) ([]uint64, error) {
	given := map[string]bool{}
	f.fs.Visit(func(fl *pflag.Flag) { given[fl.Name] = true })
	if !given["seeds"] {
		return nil, nil
	}
	switch {
	case given["seed"] || (f.cf != nil && f.cf.isOwn):
		return nil, usagef("--seeds gives the seeds: leave out --seed (and a results folder's --config, which names one)")
	case cfg.Shard != nil:
		return nil, usagef("--seeds runs every seed here: shard the run of one seed (--seed N --shard I/N) instead")
	}
	if err := seedMatters(cfg, stderr); err != nil {
		return nil, err
	}
	var seeds []uint64
	if len(splitList(*f.seeds)) == 0 {
		return nil, usagef("--seeds %q: no seed", *f.seeds)
	}
	entries, err := listFlag(*f.seeds, "seed")
	if err != nil {
		return nil, usagef("--seeds %v", err)
	}
	for _, x := range entries {
		s, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return nil, usagef("--seeds %q: %q is not a seed (a non-negative integer)", *f.seeds, x)
		}
		if slices.Contains(seeds, s) {
			return nil, usagef("--seeds %q: seed %d given twice", *f.seeds, s)
		}
		seeds = append(seeds, s)
	}
	return seeds, nil
}

// seedMatters refuses --seeds where the seed changes nothing, and warns
// on stderr where it changes the results of some methods only. The seed
// shuffles each stream, and draws the random views of multi-view methods
// (tta.MultiView; eval's domains seed them with it); with --no-shuffle or
// --order the shuffle goes, but for the mixed protocol's pool, which
// --order permutes and the seed still shuffles unless --no-shuffle.
func seedMatters(cfg eval.Config, stderr io.Writer) error {
	if len(cfg.Methods) == 0 {
		cfg.Methods = eval.DefaultMethods
		if cfg.Data == "" {
			cfg.Methods = builtinMethods
		}
	}
	for _, m := range cfg.Methods {
		if _, err := tta.Lookup(cmp.Or(cfg.Dataset, "cifar10-c"), m); err != nil {
			return nil // eval.Run names the method
		}
	}
	why, views, single := eval.SeedEffect(cfg) // the rule report applies too
	switch {
	case why == "":
	case len(views) == 0:
		return usagef("--seeds with %s: the seeds would all stream the same order, and no method draws random views (%s), so every seed's results would be the same; leave out %s or --seeds",
			why, strings.Join(single, ", "), why)
	case len(single) > 0:
		fmt.Fprintf(stderr, "warning: --seeds with %s: the seeds draw only the random views of %s; the results of %s are the same for every seed\n",
			why, strings.Join(views, ", "), strings.Join(single, ", "))
	}
	return nil
}

// evalFlags are eval's flags; config turns those given into an eval.Config.
type evalFlags struct {
	fs                                                *pflag.FlagSet
	cf                                                *configFile // --config and --print-config; nil without
	stderr                                            io.Writer   // for warnings; nil: none
	model, modelConfig, arch, vocab, seeds            *string
	dataset, data, labels, subset                     *string
	methods, corruptions, severities, protocol, frost *string
	out, shard                                        *string
	limit, batchSize, views, workers, shardCount      *int
	diagWorkers                                       *int
	seed, corruptSeed                                 *uint64
	noShuffle, plot, quiet, shardFromEnv              *bool
	studies                                           *studyFlags
}

func newEvalFlags(fs *pflag.FlagSet) *evalFlags {
	return &evalFlags{
		fs:           fs,
		model:        fs.String("model", "", modelFlagHelp),
		modelConfig:  fs.String("model-config", "", modelConfigHelp),
		arch:         fs.String("arch", "", archHelp),
		vocab:        fs.String("vocab", "", "CLIP vocabulary (see subtta tokenize -h)"),
		dataset:      fs.String("dataset", "", "benchmark: "+strings.Join(tta.PresetDatasets, ", ")+"; required with --data (which would not tell CIFAR-10-C from CIFAR-100-C), cifar10-c without (the built-in images); or imagenet-r, imagenet-a, imagenet-k (ImageNet-Sketch): one domain each, folders of wnids, ImageNet-C's presets"),
		data:         fs.String("data", "", "the -C files (CIFAR-C .npy folder, ImageNet-C folders), or a clean test set to corrupt on the fly (CIFAR binaries, image folder, .tar/.tar.gz); default: the built-in 2,000 CIFAR-10 test images"),
		labels:       fs.String("labels", "", "folder of class-name files (cifar10_classes.txt, cifar100_classes.txt, imagenet_classes_openai.txt)"),
		subset:       fs.String("subset", "", "--dataset imagenet-c: list of <wnid>/<file> to keep (robustbench's 5,000 images)"),
		methods:      fs.String("methods", "", "comma-separated methods (default source,subtta-m; on the built-in images "+strings.Join(builtinMethods, ",")+"): "+strings.Join(tta.Methods(), ", ")),
		corruptions:  fs.String("corruptions", "", "comma-separated corruptions; all stands for the 15 (the default); clean adds the uncorrupted images"),
		severities:   fs.String("severities", "", "comma-separated severities 1–5 (default 5)"),
		limit:        fs.Int("limit", 0, fmt.Sprintf("keep the first N images of every domain's stream (0: all; on the built-in images %d unless given)", builtinLimit)),
		batchSize:    fs.Int("batch-size", 0, "batch size for every method (0: each preset's)"),
		views:        fs.Int("views", 0, "views per image of every multi-view method (vte, zero, tpt, memo, dmn, sts; 0: the paper's)"),
		protocol:     fs.String("protocol", "", "reset (default; reset before every corruption), continual, mixed, episodic (batch size 1, the weights reset before every image) or gradual (each corruption at severities 1…5…1, no reset)"),
		noShuffle:    fs.Bool("no-shuffle", false, "stream every domain in file order instead of the official seeded shuffle"),
		seed:         fs.Uint64("seed", 1, "shuffle seed (Python's random.seed; the official protocol uses 1)"),
		seeds:        fs.String("seeds", "", "run each of these comma-separated shuffle seeds into OUT/seed-N, then write their table of mean ± std\n(subtta report) into OUT; each seed's folder resumes as a run does. With --no-shuffle or --order the seeds\ndraw only multi-view methods' random views: refused when no method has any"),
		corruptSeed:  fs.Uint64("corrupt-seed", 1, "seed of on-the-fly corruptions"),
		frost:        fs.String("frost", "", "folder with frost1.png … frost5.jpg (default: $SUBTTA_FROST, else the built-in ones)"),
		out:          fs.String("out", "", "results folder (default subtta-results); an interrupted run resumes there"),
		plot:         fs.Bool("plot", false, "write PNG plots of accuracy and diagnostics into OUT/plots"),
		workers:      fs.Int("workers", 0, "image decoding goroutines (0: GOMAXPROCS)"),
		diagWorkers:  fs.Int("diag-workers", 0, "goroutines computing each batch's diagnostics while the method steps on the next batches\n(0: half of GOMAXPROCS, 1 to 8; -1: none, each batch's between its step and the next); the results are the same"),
		quiet:        fs.Bool("quiet", false, "no progress bar"),
		shard:        fs.String("shard", "", "compute only shard `I/N` of the run (I from 0 to N-1) into --out; subtta eval merge joins the shards' folders"),
		shardFromEnv: fs.Bool("shard-from-env", false, "without --shard, take the shard from $SLURM_ARRAY_TASK_ID and $SLURM_ARRAY_TASK_COUNT (or _MIN and _MAX) of a Slurm array,\nor from $JOB_COMPLETION_INDEX of a Kubernetes Indexed Job with --shard-count"),
		shardCount:   fs.Int("shard-count", 0, "the number of shards, with --shard-from-env: required for $JOB_COMPLETION_INDEX, checked against a Slurm array's size"),
		studies:      newStudyFlags(fs),
	}
}

// config is the flags given, on top of the results folder's file that
// --config named, if it did (run.json, results.json: eval.ReadConfig; a
// file of flags is read into the flags before the command runs, by
// readConfigFile), and the defaults that depend on no file: the built-in
// model, cifar10-c.
func (f *evalFlags) config() (eval.Config, error) {
	var cfg eval.Config
	if f.cf != nil && f.cf.isOwn {
		c, err := eval.ReadConfig(f.cf.path)
		if err != nil {
			return cfg, err
		}
		cfg = c
	} else {
		cfg.Seed, cfg.CorruptSeed = *f.seed, *f.corruptSeed // the defaults
	}
	var flagErr error
	f.fs.Visit(func(fl *pflag.Flag) {
		var err error
		switch fl.Name {
		case "model":
			cfg.Model = *f.model
		case "model-config":
			cfg.ModelConfig = *f.modelConfig
		case "arch":
			cfg.Arch = *f.arch
		case "vocab":
			cfg.Vocab = *f.vocab
		case "dataset":
			if cfg.Dataset = *f.dataset; cfg.Dataset == "" {
				err = fmt.Errorf(`"": give a dataset (%s), or leave the flag out for cifar10-c on the built-in images`, strings.Join(tta.PresetDatasets, ", "))
			}
		case "data":
			cfg.Data = *f.data
		case "labels":
			cfg.Labels = *f.labels
		case "subset":
			cfg.SubsetList = *f.subset
		case "methods":
			if cfg.Methods, err = listFlag(*f.methods, "method"); err == nil {
				err = noDuplicates(*f.methods, "method", cfg.Methods)
			}
		case "corruptions":
			var names []string
			cfg.Corruptions = nil
			if names, err = listFlag(*f.corruptions, "corruption"); err != nil {
				break
			}
			for _, c := range names {
				if c == "all" { // the 15, in the benchmark's order ("clean,all" too)
					cfg.Corruptions = append(cfg.Corruptions, corrupt.Names()...)
				} else {
					cfg.Corruptions = append(cfg.Corruptions, c)
				}
			}
			if err = noDuplicates(*f.corruptions, "corruption", cfg.Corruptions); err != nil && slices.Contains(names, "all") {
				err = fmt.Errorf("%v (all stands for the 15)", err)
			}
		case "severities":
			var sev []string
			if sev, err = listFlag(*f.severities, "severity"); err == nil {
				if cfg.Severities, err = parseInts(*f.severities, sev); err == nil {
					err = noDuplicates(*f.severities, "severity", sev)
				}
			}
		case "limit":
			cfg.Limit = *f.limit
		case "batch-size":
			cfg.BatchSize = *f.batchSize
		case "views":
			// 0 is the default, each method's views from the paper, as the
			// help and --print-config say: given, it is that default.
			cfg.Views = *f.views
			if cfg.Views < 0 || cfg.Views == 1 {
				err = fmt.Errorf("%d: want at least 2 views per image (the base view and a random one), or 0 for the paper's", cfg.Views)
			}
		case "protocol":
			if cfg.Protocol = *f.protocol; !slices.Contains(eval.Protocols, cfg.Protocol) {
				err = fmt.Errorf("%q: want %s (reset, the default, when the flag is left out)", cfg.Protocol, strings.Join(eval.Protocols, ", "))
			}
		case "no-shuffle":
			cfg.NoShuffle = *f.noShuffle
		case "seed":
			cfg.Seed = *f.seed
		case "corrupt-seed":
			cfg.CorruptSeed = *f.corruptSeed
		case "frost":
			cfg.FrostDir = *f.frost
		case "out":
			if cfg.Out = *f.out; cfg.Out == "" {
				err = errors.New(`"": give a results folder, or leave the flag out for subtta-results`)
			}
		case "plot":
			cfg.Plot = *f.plot
		case "workers":
			cfg.Workers = *f.workers
		case "shard":
			sh, perr := eval.ParseShard(*f.shard)
			if perr != nil {
				err = errors.New(strings.TrimPrefix(perr.Error(), "eval: "))
			}
			cfg.Shard = &sh
		default:
			err = f.studies.apply(fl.Name, &cfg)
		}
		if err != nil && flagErr == nil {
			flagErr = usagef("--%s %v", fl.Name, err)
		}
	})
	if flagErr != nil {
		return cfg, flagErr
	}
	for _, v := range []struct {
		name string
		v    int
	}{{"limit", cfg.Limit}, {"batch-size", cfg.BatchSize}, {"workers", cfg.Workers}} {
		if v.v < 0 {
			return cfg, usagef("--%s %d: must not be negative", v.name, v.v)
		}
	}
	if err := f.shardFromEnvironment(&cfg, os.Getenv); err != nil {
		return cfg, err
	}
	if cfg.FrostDir == "" {
		cfg.FrostDir = os.Getenv("SUBTTA_FROST")
	}
	if cfg.Model == "" {
		cfg.Model = builtin.ModelName
	}
	if cfg.Dataset == "" {
		if cfg.Data != "" {
			return cfg, usagef("--dataset is required with --data (%s)", strings.Join(tta.PresetDatasets, ", "))
		}
		cfg.Dataset = "cifar10-c"
	}
	if cfg.Data == "" && cfg.Dataset != "cifar10-c" {
		return cfg, usagef("--data is required for %s (the built-in images are CIFAR-10's)", cfg.Dataset)
	}
	return cfg, f.checkCombinations(cfg)
}

// checkCombinations refuses flags that cfg, the run's configuration, would
// leave unused, and files of flags that do not exist, naming the flag; of
// --frost, which a file of flags may give every run, it only warns.
func (f *evalFlags) checkCombinations(cfg eval.Config) error {
	given := map[string]bool{}
	f.fs.Visit(func(fl *pflag.Flag) { given[fl.Name] = true })
	for _, name := range []string{"model-config", "vocab", "labels", "subset", "order", "frost"} {
		v := f.fs.Lookup(name).Value.String()
		if !given[name] || v == "" {
			continue // empty: none, in place of a config file's
		}
		if _, err := os.Stat(v); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--%s %s: no such file or folder", name, v)
		} else if err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
	}
	switch {
	case given["subset"] && cfg.SubsetList != "" && cfg.Dataset != "imagenet-c":
		return usagef("--subset lists ImageNet images (<wnid>/<file>): it applies to --dataset imagenet-c, not %s", cfg.Dataset)
	case given["classes"] && given["class-names"]:
		return usagef("--classes draws the classes, --class-names names them: give one of them")
	case given["class-seed"] && cfg.Classes == 0:
		return usagef("--class-seed draws the classes of --classes N: give --classes, or leave out --class-seed")
	case given["order"] && cfg.Order != "" && cfg.NoShuffle && cfg.Protocol != "mixed":
		// The mixed protocol's pool takes each domain's images shuffled,
		// or in file order with --no-shuffle, before --order permutes it.
		return usagef("--order gives every stream's order in place of the shuffle: leave out --no-shuffle")
	}
	if given["frost"] && cfg.FrostDir != "" && !usesFrost(cfg) && f.stderr != nil {
		fmt.Fprintf(f.stderr, "warning: --frost %s is not used: this run computes no frost corruption\n", cfg.FrostDir)
	}
	return nil
}

// usesFrost reports whether a run of cfg may make frost on the fly: frost
// is among its corruptions (all 15 by default), unless its dataset is an
// ImageNet variant, which has none.
func usesFrost(cfg eval.Config) bool {
	if slices.Contains(data.ImageNetVariants, cfg.Dataset) {
		return false
	}
	return len(cfg.Corruptions) == 0 || slices.Contains(cfg.Corruptions, "frost")
}

// useBuiltinData points cfg at the built-in evaluation images and frost
// overlays (written once into the cache), with the methods and limit that
// make the no-flag run take a few minutes unless they were given.
func useBuiltinData(cfg *eval.Config, limitGiven bool) error {
	dir, err := cacheDir()
	if err != nil {
		return err
	}
	subset, frost, err := builtin.Extract(filepath.Join(dir, "builtin"))
	if err != nil {
		return err
	}
	cfg.Data = subset
	if cfg.FrostDir == "" {
		cfg.FrostDir = frost
	}
	if len(cfg.Methods) == 0 {
		cfg.Methods = builtinMethods
	}
	if cfg.Limit == 0 && !limitGiven {
		cfg.Limit = builtinLimit
	}
	return nil
}

// evalOptions loads cfg's model and tokenizer for eval.Run.
func evalOptions(cfg eval.Config, stderr io.Writer) (eval.Options, error) {
	b, err := openModel(cfg.Model, cfg.ModelConfig, cfg.Arch, cfg.Vocab, cfg.Precision, stderr)
	if err != nil {
		return eval.Options{}, err
	}
	modelID := "built-in, sha256 " + builtin.ModelSHA256()[:16]
	if !isBuiltin(cfg.Model) {
		if modelID, err = eval.ModelFingerprint(cfg.Model); err != nil {
			return eval.Options{}, err
		}
	}
	tok, err := b.Tokenizer()
	if err != nil {
		return eval.Options{}, err
	}
	return eval.Options{
		Model:     b.Model,
		ModelID:   modelID,
		Tokenizer: tok,
		Frost:     func() (string, error) { return frostDir("") },
	}, nil
}

// progressTo returns an eval.Options.Progress that draws *bar on w, made at
// the first report; its rate counts from now, the start of the work.
func progressTo(w io.Writer, bar **progressBar) func(eval.Progress) {
	return progressWith(w, bar, time.Now)
}

// progressWith is progressTo on the clock now.
func progressWith(w io.Writer, bar **progressBar, now func() time.Time) func(eval.Progress) {
	last := 0
	started := now()
	return func(p eval.Progress) {
		t := now()
		if *bar == nil {
			*bar = newProgress(w, "", p.Total)
			(*bar).start = started
		}
		(*bar).SetLabel(fmt.Sprintf("%s %s", p.Method, p.Domain))
		(*bar).SetTotal(p.Total)
		(*bar).setMethod(t, p.Method, p.MethodDone, p.MethodTotal, p.MethodsLeft)
		(*bar).addAt(t, p.Done-last)
		last = p.Done
	}
}

// lineWriter writes log lines above a progress bar drawn on a terminal.
type lineWriter struct {
	w   io.Writer
	bar **progressBar
}

func (l lineWriter) Write(b []byte) (int, error) {
	if *l.bar != nil && (*l.bar).terminal {
		fmt.Fprint(l.w, "\r\033[K")
	}
	return l.w.Write(b)
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// listFlag splits the value s of a comma-separated list flag of what
// (method, corruption), refusing an empty list (the default is had by
// leaving the flag out) and an empty entry ("source,,tent").
func listFlag(s, what string) ([]string, error) {
	out := splitList(s)
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: no %s (the default is given by leaving the flag out)", s, what)
	}
	for i, x := range strings.Split(s, ",") {
		if strings.TrimSpace(x) == "" {
			return nil, fmt.Errorf("%q: entry %d is empty", s, i+1)
		}
	}
	return out, nil
}

// noDuplicates refuses a list (the value s of a list flag of what) that
// gives an entry twice.
func noDuplicates(s, what string, list []string) error {
	for i, x := range list {
		if slices.Contains(list[:i], x) {
			return fmt.Errorf("%q: %s %q given twice", s, what, x)
		}
	}
	return nil
}

// parseInts parses the entries of s, the value of a list flag.
func parseInts(s string, entries []string) ([]int, error) {
	var out []int
	for _, x := range entries {
		v, err := strconv.Atoi(x)
		if err != nil {
			return nil, fmt.Errorf("%q: %q is not an integer", s, x)
		}
		out = append(out, v)
	}
	return out, nil
}

// shardFromEnvironment sets cfg's shard from a batch system's array task
// (eval.ShardFromEnv) with --shard-from-env and no --shard.
func (f *evalFlags) shardFromEnvironment(cfg *eval.Config, getenv func(string) string) error {
	given := map[string]bool{}
	f.fs.Visit(func(fl *pflag.Flag) { given[fl.Name] = true })
	switch {
	case given["shard"] && (given["shard-from-env"] || given["shard-count"]):
		return usagef("--shard names the shard: leave out --shard-from-env and --shard-count")
	case given["shard-count"] && !*f.shardFromEnv:
		return usagef("--shard-count goes with --shard-from-env")
	case !*f.shardFromEnv:
		return nil
	}
	sh, err := eval.ShardFromEnv(getenv, *f.shardCount)
	if err != nil {
		return usagef("--shard-from-env: %s", strings.TrimPrefix(err.Error(), "eval: "))
	}
	cfg.Shard = &sh
	return nil
}

// runEvalMerge is `subtta eval merge OUT SHARD...`.
// evalMergeOptions are the flags of eval merge.
type evalMergeOptions struct {
	plot bool

	stdout, stderr io.Writer
}

// newEvalMergeCmd is `subtta eval merge OUT SHARD...`.
func newEvalMergeCmd(stdout, stderr io.Writer) *cobra.Command {
	const summary = "join the results folders of a run's shards (eval --shard) into one"
	o := &evalMergeOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "merge OUT SHARD...",
		Short: summary,
		Long: summary + "\n\nJoins the results folders of the shards of one run (eval --shard I/N) into OUT, as one process would\n" +
			"have written it: run.json, results.jsonl, batches.jsonl, the tables and the plots the run asked for.\n" +
			"Refuses shards of other runs or builds, duplicate units and missing units, naming them.",
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(args) },
	}
	c.Flags().BoolVar(&o.plot, "plot", false, "write the plots into OUT/plots even if the run did not ask for them")
	return c
}

// run merges the shard folders args[1:] into args[0].
func (o *evalMergeOptions) run(args []string) error {
	if len(args) < 2 {
		return usagef("want OUT and at least one shard folder")
	}
	sum, err := eval.Merge(args[0], args[1:], eval.MergeOptions{Plot: o.plot, Log: lineWriter{o.stderr, new(*progressBar)}})
	if err != nil {
		// "subtta eval merge: eval: merge: …" says where the code is, not
		// the user.
		return errors.New(strings.TrimPrefix(strings.TrimPrefix(err.Error(), "eval: "), "merge: "))
	}
	md, err := os.ReadFile(filepath.Join(sum.Config.Out, eval.MarkdownFile))
	if err != nil {
		return err
	}
	o.stdout.Write(md)
	fmt.Fprintf(o.stderr, "%d records of %d shards merged into %s\n", len(sum.Records), len(args)-1, sum.Config.Out)
	return nil
}
