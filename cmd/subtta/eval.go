package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/tta"
)

// With no --data, eval runs the built-in model and images: these methods,
// on this many images of each of the 15 corruptions, take about four
// minutes on two cores.
var builtinMethods = []string{"source", "tent", "subtta-m"}

const builtinLimit = 1000

// limitGiven reports whether --limit was on the command line.
func limitGiven(fs *flag.FlagSet) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "limit" })
	return given
}

func runEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", "\n\nWith no flags: the built-in model on the embedded CIFAR-10 test images, corrupted on the fly,\nfor "+strings.Join(builtinMethods, ", ")+" on "+strconv.Itoa(builtinLimit)+" images per corruption (about four minutes on two cores).\n", stderr)
	configFile := fs.String("config", "", "JSON config file (keys as in results.json's config), or the run.json or results.json of an earlier run; flags given override it")
	model := fs.String("model", "", modelFlagHelp)
	modelConfig := fs.String("model-config", "", modelConfigHelp)
	arch := fs.String("arch", "", archHelp)
	vocab := fs.String("vocab", "", "CLIP vocabulary (see subtta tokenize -h)")
	dataset := fs.String("dataset", "", "benchmark: "+strings.Join(tta.PresetDatasets, ", ")+" (default cifar10-c)")
	dataPath := fs.String("data", "", "the -C files (CIFAR-C .npy folder, ImageNet-C folders), or a clean test set to corrupt on the fly (CIFAR binaries, image folder, .tar/.tar.gz); default: the built-in 2,000 CIFAR-10 test images")
	labels := fs.String("labels", "", "folder of class-name files (cifar10_classes.txt, cifar100_classes.txt, imagenet_classes_openai.txt)")
	subset := fs.String("subset", "", "ImageNet: list of <wnid>/<file> to keep (robustbench's 5,000 images)")
	methods := fs.String("methods", "", "comma-separated methods (default source,subtta-m; on the built-in images "+strings.Join(builtinMethods, ",")+"): "+strings.Join(tta.PresetMethods, ", "))
	corruptions := fs.String("corruptions", "", "comma-separated corruptions; all stands for the 15 (the default); clean adds the uncorrupted images")
	severities := fs.String("severities", "", "comma-separated severities 1–5 (default 5)")
	limit := fs.Int("limit", 0, fmt.Sprintf("keep the first N images of every domain's stream (0: all; on the built-in images %d unless given)", builtinLimit))
	batch := fs.Int("batch-size", 0, "batch size for every method (0: each preset's)")
	proto := fs.String("protocol", "", "reset (default; reset before every corruption), continual or mixed")
	noShuffle := fs.Bool("no-shuffle", false, "stream every domain in file order instead of the official seeded shuffle")
	seed := fs.Uint64("seed", 1, "shuffle seed (Python's random.seed; the official protocol uses 1)")
	corruptSeed := fs.Uint64("corrupt-seed", 1, "seed of on-the-fly corruptions")
	frost := fs.String("frost", "", "folder with frost1.png … frost5.jpg (default: $SUBTTA_FROST, else downloaded into the cache)")
	out := fs.String("out", "", "results folder (default subtta-results); an interrupted run resumes there")
	plot := fs.Bool("plot", false, "write PNG plots of accuracy and diagnostics into OUT/plots")
	workers := fs.Int("workers", 0, "image decoding goroutines (0: GOMAXPROCS)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (all inputs are flags)", fs.Arg(0))
	}

	var cfg eval.Config
	if *configFile != "" {
		c, err := eval.ReadConfig(*configFile)
		if err != nil {
			return err
		}
		cfg = c
	} else {
		cfg.Seed, cfg.CorruptSeed = *seed, *corruptSeed // the defaults
	}
	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		var err error
		switch f.Name {
		case "model":
			cfg.Model = *model
		case "model-config":
			cfg.ModelConfig = *modelConfig
		case "arch":
			cfg.Arch = *arch
		case "vocab":
			cfg.Vocab = *vocab
		case "dataset":
			cfg.Dataset = *dataset
		case "data":
			cfg.Data = *dataPath
		case "labels":
			cfg.Labels = *labels
		case "subset":
			cfg.SubsetList = *subset
		case "methods":
			cfg.Methods = splitList(*methods)
		case "corruptions":
			cfg.Corruptions = nil
			for _, c := range splitList(*corruptions) {
				if c == "all" { // the 15, in the benchmark's order ("clean,all" too)
					cfg.Corruptions = append(cfg.Corruptions, corrupt.Names()...)
				} else {
					cfg.Corruptions = append(cfg.Corruptions, c)
				}
			}
		case "severities":
			cfg.Severities, err = parseInts(*severities)
		case "limit":
			cfg.Limit = *limit
		case "batch-size":
			cfg.BatchSize = *batch
		case "protocol":
			cfg.Protocol = *proto
		case "no-shuffle":
			cfg.NoShuffle = *noShuffle
		case "seed":
			cfg.Seed = *seed
		case "corrupt-seed":
			cfg.CorruptSeed = *corruptSeed
		case "frost":
			cfg.FrostDir = *frost
		case "out":
			cfg.Out = *out
		case "plot":
			cfg.Plot = *plot
		case "workers":
			cfg.Workers = *workers
		}
		if err != nil && flagErr == nil {
			flagErr = usagef("--%s: %v", f.Name, err)
		}
	})
	if flagErr != nil {
		return flagErr
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"limit", cfg.Limit}, {"batch-size", cfg.BatchSize}, {"workers", cfg.Workers}} {
		if f.v < 0 {
			return usagef("--%s %d: must not be negative", f.name, f.v)
		}
	}
	if cfg.FrostDir == "" {
		cfg.FrostDir = os.Getenv("SUBTTA_FROST")
	}
	if cfg.Model == "" {
		cfg.Model = builtin.ModelName
	}
	if cfg.Dataset == "" {
		if cfg.Data != "" {
			return usagef("--dataset is required with --data (%s)", strings.Join(tta.PresetDatasets, ", "))
		}
		cfg.Dataset = "cifar10-c"
	}
	if cfg.Data == "" {
		if cfg.Dataset != "cifar10-c" {
			return usagef("--data is required for %s (the built-in images are CIFAR-10's)", cfg.Dataset)
		}
		// The built-in evaluation set, written once into the cache.
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
		if cfg.Limit == 0 && !limitGiven(fs) {
			cfg.Limit = builtinLimit
		}
	}
	m, err := loadModel(cfg.Model, cfg.ModelConfig, cfg.Arch, stderr)
	if err != nil {
		return err
	}
	modelID := "built-in, sha256 " + builtin.ModelSHA256()[:16]
	if !isBuiltin(cfg.Model) {
		if modelID, err = eval.ModelFingerprint(cfg.Model); err != nil {
			return err
		}
	}
	tok, err := modelTokenizer(m, cfg.Vocab, cfg.Model, stderr)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var bar *progressBar
	opt := eval.Options{
		Model:     m,
		ModelID:   modelID,
		Tokenizer: tok,
		Log:       lineWriter{stderr, &bar},
		Frost:     func() (string, error) { return frostDir("", stderr) },
	}
	if !*quiet {
		last := 0
		started := time.Now()
		opt.Progress = func(p eval.Progress) {
			if bar == nil {
				// The rate counts from the start of the work, not from
				// the first batch's end.
				bar = newProgress(stderr, "", p.Total)
				bar.start = started
			}
			bar.SetLabel(fmt.Sprintf("%s %s", p.Method, p.Domain))
			bar.Add(p.Done - last)
			last = p.Done
		}
	}
	sum, err := eval.Run(ctx, cfg, opt)
	if bar != nil {
		bar.Done()
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "subtta eval: %v\n", err)
		return errInterrupted // exit status 130
	}
	if err != nil {
		return err
	}
	md, err := os.ReadFile(filepath.Join(sum.Config.Out, eval.MarkdownFile))
	if err != nil {
		return err
	}
	stdout.Write(md)
	fmt.Fprintf(stderr, "%d domains computed, %d taken from earlier runs; results in %s\n", sum.Computed, sum.Resumed, sum.Config.Out)
	return nil
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

func parseInts(s string) ([]int, error) {
	var out []int
	for _, x := range splitList(s) {
		v, err := strconv.Atoi(x)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", x)
		}
		out = append(out, v)
	}
	return out, nil
}
