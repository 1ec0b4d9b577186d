package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/eval"
)

// corruptOptions are the flags of corrupt.
type corruptOptions struct {
	dataset, dataPath, out string
	corrs, sevs            string
	seed                   uint64
	frost                  string
	limit                  int
	labels, subset         string
	workers                int

	sevsGiven      bool // whether --severities was given
	stdout, stderr io.Writer
}

// newCorruptCmd is `subtta corrupt`.
func newCorruptCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &corruptOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "corrupt",
		Short: "write CIFAR-10/100-C or ImageNet-C from a clean dataset",
		Long: "write CIFAR-10/100-C or ImageNet-C from a clean dataset\n\n" +
			"Running again into the same --out resumes: finished files are kept. Ctrl-C (SIGINT, SIGTERM) stops at the\n" +
			"next image and keeps every finished file; for CIFAR-C, whose file holds a corruption's every image, the\n" +
			"corruption in progress is computed again.",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.sevsGiven = cmd.Flags().Changed("severities")
			return o.run(args)
		},
	}
	f := c.Flags()
	f.StringVar(&o.dataset, "dataset", "", "clean dataset: cifar10, cifar100 or imagenet")
	f.StringVar(&o.dataPath, "data", "", "cifar10/100: the binary version (.tar.gz or its folder) or an image folder (<class>/<image>, folder or .tar.gz); imagenet: a validation tree <wnid>/<image> (folder, .tar or .tar.gz)")
	f.StringVar(&o.out, "out", "", "output folder: CIFAR-C layout (<corruption>.npy, labels.npy) or ImageNet-C layout (<corruption>/<severity>/<wnid>/<image>.JPEG)")
	f.StringVar(&o.corrs, "corruptions", "all", "comma-separated corruptions, or all (the benchmark's 15)")
	f.StringVar(&o.sevs, "severities", "1,2,3,4,5", "comma-separated severities (imagenet; a CIFAR-C file holds all five)")
	f.Uint64Var(&o.seed, "seed", 1, "random seed: image i of a corruption at a severity is the same for the same seed")
	f.StringVar(&o.frost, "frost", "", "folder with frost1.png … frost5.jpg (default: $SUBTTA_FROST, else the built-in ones)")
	f.IntVar(&o.limit, "limit", 0, "write N clean images spread evenly over the dataset, so that every class of a class-ordered folder is kept (0: all)")
	f.StringVar(&o.labels, "labels", "", "cifar10/100 image folder: the labels folder (cifar10_classes.txt, cifar100_classes.txt) that places its class folders; default: the sorted folder names, which must then be all 10 or 100")
	f.StringVar(&o.subset, "subset", "", "imagenet: list of <wnid>/<file> to keep, in order (e.g. robustbench's imagenet_test_image_ids.txt)")
	f.IntVar(&o.workers, "workers", 0, "images corrupted at once (0: GOMAXPROCS)")
	c.RegisterFlagCompletionFunc("dataset", completeChoices("cifar10", "cifar100", "imagenet"))
	c.RegisterFlagCompletionFunc("corruptions", completeCorruptions)
	return c
}

// run writes the corrupted dataset.
func (o *corruptOptions) run(args []string) error {
	switch {
	case len(args) > 0:
		return usagef("unexpected argument %q", args[0])
	case o.dataset != "cifar10" && o.dataset != "cifar100" && o.dataset != "imagenet":
		return usagef("--dataset must be cifar10, cifar100 or imagenet, not %q", o.dataset)
	case o.dataPath == "":
		return usagef("--data is required (the clean %s)", o.dataset)
	case o.out == "":
		return usagef("--out is required (the folder to write)")
	case o.limit < 0:
		return usagef("--limit %d: must be 0 (all) or positive", o.limit)
	case o.workers < 0:
		return usagef("--workers %d: must be 0 (GOMAXPROCS) or positive", o.workers)
	}
	names, err := parseCorruptions(o.corrs)
	if err != nil {
		return err
	}
	severities, err := parseSeverities(o.sevs)
	if err != nil {
		return err
	}
	isCIFAR := o.dataset != "imagenet"
	if isCIFAR {
		if o.sevsGiven && len(severities) != data.Severities {
			return usagef("--severities: a CIFAR-C file holds all five severities; leave the flag out")
		}
		if o.subset != "" {
			return usagef("--subset applies to imagenet only")
		}
	} else if o.labels != "" {
		return usagef("--labels applies to CIFAR image folders only")
	}

	if _, err := os.Stat(o.dataPath); err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	var clean data.Dataset
	if isCIFAR {
		clean, err = openCleanCIFAR(o.dataset, o.dataPath, o.labels)
	} else {
		clean, err = data.OpenImageNetFolder(o.dataPath, data.ImageNetOptions{SubsetList: o.subset})
	}
	if err != nil {
		return err
	}
	defer clean.Close()
	name := clean.Name()
	if o.limit > clean.Len() {
		fmt.Fprintf(o.stderr, "note: --limit %d, but %s holds %d images: writing all %d\n", o.limit, name, clean.Len(), clean.Len())
	}
	clean = data.Spread(clean, o.limit)

	source, err := cleanSource(o.dataset, o.dataPath, o.subset, o.labels)
	if err != nil {
		return err
	}
	opts := data.WriteOptions{Seed: o.seed, Workers: o.workers, Source: source}
	if slices.Contains(names, "frost") {
		if opts.FrostDir, err = frostDir(o.frost); err != nil {
			return err
		}
	} else if o.frost != "" {
		fmt.Fprintf(o.stderr, "warning: --frost %s is not used: frost is not among the corruptions written\n", o.frost)
	}
	// The writers make --out too; made here, a plain file there is named
	// by its flag.
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	n := clean.Len()
	if isCIFAR {
		severities = []int{1, 2, 3, 4, 5}
	}
	planned := len(names) * len(severities) * n

	// The writer calls Progress one call at a time, first with done = 0.
	var bar *progressBar
	toWrite, last := -1, 0
	opts.Progress = func(done, total int) {
		if toWrite < 0 {
			toWrite = total
			if total > 0 {
				bar = newProgress(o.stderr, "corrupt "+name, total)
			}
		}
		if bar != nil && done > last {
			bar.Add(done - last)
			last = done
		}
	}
	// On SIGINT or SIGTERM the writer stops at the next image, keeping
	// every file it finished; running again resumes.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts.Context = ctx
	start := time.Now()
	if isCIFAR {
		err = data.WriteCIFARC(o.out, clean, names, opts)
	} else {
		err = data.WriteImageNetC(o.out, clean, names, severities, opts)
	}
	if bar != nil {
		bar.Done()
	}
	if ie := (*data.Interrupted)(nil); errors.As(err, &ie) {
		lost := ""
		if isCIFAR && last > ie.Written {
			lost = fmt.Sprintf(" (the %d images of the corruption in progress are not kept: a CIFAR-C file is written whole)", last-ie.Written)
		}
		fmt.Fprintf(o.stderr, "interrupted: %d of %d written%s; the same command resumes\n", ie.Written, ie.Total, lost)
		return errInterrupted // exit status 130
	}
	if err != nil {
		return err
	}
	el := time.Since(start)
	shape := fmt.Sprintf("%d corruptions × %d severities × %d images", len(names), len(severities), n)
	if toWrite <= 0 {
		fmt.Fprintf(o.stdout, "nothing to write: the %d corrupted images of %s (%s) are already in %s\n", planned, name, shape, o.out)
		return nil
	}
	skipped := ""
	if planned > toWrite {
		skipped = fmt.Sprintf("; %d were already there", planned-toWrite)
	}
	fmt.Fprintf(o.stdout, "wrote %d corrupted images of %s (%s%s) to %s in %s, %.1f img/s\n",
		toWrite, name, shape, skipped, o.out, el.Round(time.Millisecond), float64(toWrite)/max(el.Seconds(), 1e-9))
	return nil
}

// cleanSource identifies the clean images of a corrupt command by the
// contents of the files they come from (data.WriteOptions.Source), not
// by the paths naming them.
func cleanSource(dataset, dataPath, subset, labels string) (string, error) {
	src := dataset
	for _, in := range []struct{ flag, path string }{{"data", dataPath}, {"subset", subset}, {"labels", labels}} {
		if in.path == "" {
			continue
		}
		fp, err := eval.Fingerprint(in.path)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", in.flag, err)
		}
		src += fmt.Sprintf("; %s %s", in.flag, fp)
	}
	return src, nil
}

// parseCorruptions reads a comma-separated list of corruption names, or
// "all".
func parseCorruptions(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return corrupt.Names(), nil
	}
	var names []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if _, err := corrupt.Lookup(name); err != nil {
			return nil, usagef("--corruptions: unknown corruption %q (the benchmark's are: all, %s)", name, strings.Join(corrupt.Names(), ", "))
		}
		if slices.Contains(names, name) {
			return nil, usagef("--corruptions: %s is listed twice", name)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, usagef("--corruptions is empty")
	}
	return names, nil
}

// parseSeverities reads a comma-separated list of distinct severities.
func parseSeverities(s string) ([]int, error) {
	var sevs []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 || v > data.Severities {
			return nil, usagef("--severities: %q is not a severity 1 to %d", f, data.Severities)
		}
		if slices.Contains(sevs, v) {
			return nil, usagef("--severities: %d is listed twice", v)
		}
		sevs = append(sevs, v)
	}
	if len(sevs) == 0 {
		return nil, usagef("--severities is empty")
	}
	return sevs, nil
}

// openCleanCIFAR opens the CIFAR-10 or CIFAR-100 test set at path: the
// official binary version, or else an image folder. The folder's class
// folders are placed among the classes of labelsDir's label set if given,
// else taken in sorted order, which is the official label order when all
// 10 or 100 are present.
func openCleanCIFAR(set, path, labelsDir string) (data.Dataset, error) {
	open, nclasses := data.OpenCIFAR10, 10
	if set == "cifar100" {
		open, nclasses = data.OpenCIFAR100, 100
	}
	bin, binErr := open(path, data.Test)
	if binErr == nil {
		return bin, nil
	}
	var opts data.FolderOptions
	if labelsDir != "" {
		l, err := data.ReadLabels(labelsDir, set)
		if err != nil {
			return nil, err
		}
		opts.Classes = l.Classes
	}
	f, err := data.OpenFolder(path, opts)
	if err != nil {
		return nil, fmt.Errorf("%s is neither the %s binary version (%v) nor an image folder (%v)", path, set, binErr, err)
	}
	switch {
	case labelsDir == "":
		// The sorted folders become the labels: they must be the set's.
		if err := data.CheckCIFARClassFolders(set, f.Classes()); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w: give --labels DIR (a folder with %s_classes.txt) to place them", path, err, set)
		}
	case len(f.Classes()) != nclasses:
		f.Close()
		return nil, fmt.Errorf("%s: --labels %s names %d classes, %s has %d", path, labelsDir, len(f.Classes()), set, nclasses)
	}
	return f, nil
}
