package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/gpu"
	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/pretrain"
	"github.com/subtta/subtta/report"
)

// trainOptions are the flags of train.
type trainOptions struct {
	trainPath    string
	testPath     string
	out          string
	epochs       int
	batch        int
	lr           float64
	warmup       int
	wd           float64
	seed         uint64
	width        int
	visionLayers int
	textLayers   int
	heads        int
	evalLimit    int
	every        int
	final        string
	plot         bool
	quiet        bool
	device       deviceOptions

	stdout, stderr io.Writer
}

// newTrainCmd is `subtta train`.
func newTrainCmd(stdout, stderr io.Writer) *cobra.Command {
	const summary = "train a small CLIP from scratch on CIFAR-10 (checkpoints, resume, log)"
	o := &trainOptions{stdout: stdout, stderr: stderr}
	def := pretrain.DefaultConfig(data.CIFAR10Classes, data.CIFAR10Templates)
	c := &cobra.Command{
		Use:   "train",
		Short: summary,
		Long:  summary,
		RunE:  func(cmd *cobra.Command, args []string) error { return o.run(args) },
	}
	f := c.Flags()
	configFlags(f, stdout)
	f.StringVar(&o.trainPath, "data", "", "CIFAR-10 training set: the official binaries (.tar.gz or folder), or an image folder (folder, .tar, .tar.gz) with one folder per class")
	f.StringVar(&o.testPath, "test", "", "CIFAR-10 test set in the same forms, classified zero-shot after every epoch (optional)")
	f.StringVar(&o.out, "out", "subtta-train", "run folder: checkpoint, model, log.jsonl; an interrupted run resumes there (with the same settings and --data only; other settings are refused, naming them, before the data is read)")
	f.IntVar(&o.epochs, "epochs", def.Epochs, "epochs")
	f.IntVar(&o.batch, "batch-size", def.BatchSize, "images per step")
	f.Float64Var(&o.lr, "lr", def.LR, "peak learning rate (AdamW)")
	f.IntVar(&o.warmup, "warmup", def.WarmupSteps, "linear warm-up steps")
	f.Float64Var(&o.wd, "weight-decay", def.WeightDecay, "AdamW weight decay of linear and projection weights")
	f.Uint64Var(&o.seed, "seed", def.Seed, "seed of the initialisation, the shuffles and the augmentation")
	f.IntVar(&o.width, "width", def.Model.Vision.Width, "width of both towers and of the embedding")
	f.IntVar(&o.visionLayers, "vision-layers", def.Model.Vision.Layers, "blocks of the image tower")
	f.IntVar(&o.textLayers, "text-layers", def.Model.Text.Layers, "blocks of the text tower")
	f.IntVar(&o.heads, "heads", def.Model.Vision.Heads, "attention heads of both towers")
	f.IntVar(&o.evalLimit, "eval-limit", 0, "with --test: classify only its first N images after each epoch (0: all)")
	f.IntVar(&o.every, "checkpoint-every", 100, "also write a checkpoint every N steps (0: at the end of each epoch only)")
	f.StringVar(&o.final, "export", "", "when training ends, also write the model here (.safetensors, or .safetensors.zst for zstd), replacing a model there; its folder is checked before the training starts, and a training run's checkpoint is refused")
	f.BoolVar(&o.plot, "plot", false, "write OUT/accuracy.png from OUT/log.jsonl: the training accuracy and, with --test, the test accuracy per epoch; redrawn after every epoch and when the command ends (also for a run already finished)")
	f.BoolVar(&o.quiet, "quiet", false, "no progress bar")
	addDeviceFlags(f, &o.device)
	return c
}

// run runs the command with the positional arguments args.
func (o *trainOptions) run(args []string) error {
	release, err := o.device.use(gpu.FP32, o.stderr)
	if err != nil {
		return err
	}
	defer release()
	if len(args) > 0 {
		return usagef("unexpected argument %q (all inputs are flags)", args[0])
	}
	if o.trainPath == "" {
		return usagef("--data is required (the CIFAR-10 training set)")
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"epochs", o.epochs}, {"batch-size", o.batch}, {"width", o.width}, {"vision-layers", o.visionLayers}, {"text-layers", o.textLayers}, {"heads", o.heads}} {
		if c.v <= 0 {
			return usagef("--%s %d: want a positive number", c.name, c.v)
		}
	}
	if o.width%o.heads != 0 {
		return usagef("--width %d is not a multiple of --heads %d", o.width, o.heads)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"warmup", o.warmup}, {"eval-limit", o.evalLimit}, {"checkpoint-every", o.every}} {
		if c.v < 0 {
			return usagef("--%s %d: want 0 or more", c.name, c.v)
		}
	}
	if o.evalLimit > 0 && o.testPath == "" {
		return usagef("--eval-limit %d needs --test (the set it limits)", o.evalLimit)
	}
	// SIGINT or SIGTERM from here on stops the decoding (nothing is
	// written then) and the training at the next step, with a checkpoint.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Checked now, before the data is read, not after the training.
	if err := checkRunFolder(o.out); err != nil {
		return err
	}
	if o.final != "" {
		if err := checkExportPath(o.final, o.out); err != nil {
			return err
		}
	}
	cfg := pretrain.DefaultConfig(data.CIFAR10Classes, data.CIFAR10Templates)
	cfg.Epochs, cfg.BatchSize, cfg.LR, cfg.WarmupSteps, cfg.WeightDecay, cfg.Seed = o.epochs, o.batch, o.lr, o.warmup, o.wd, o.seed
	cfg.MinLR = min(cfg.MinLR, cfg.LR)
	m := &cfg.Model
	m.EmbedDim, m.Vision.Width, m.Text.Width = o.width, o.width, o.width
	m.Vision.MLPWidth, m.Text.MLPWidth = 4*o.width, 4*o.width
	m.Vision.Layers, m.Text.Layers = o.visionLayers, o.textLayers
	m.Vision.Heads, m.Text.Heads = o.heads, o.heads
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	// A run folder of other settings is refused before the data is read.
	if err := pretrain.CheckSettings(o.out, cfg); err != nil {
		return settingsError(o.out, err)
	}

	train, err := loadImageSet(ctx, o.trainPath, data.Train, cfg.Model.Vision.ImageSize, "training", o.batch, o.stderr, o.quiet)
	if err != nil {
		return err
	}
	train.Source = o.trainPath // named in the checkpoint's record of the set
	if len(train.Classes) != len(cfg.Classes) {
		return fmt.Errorf("%s: %d classes, want CIFAR-10's %d", o.trainPath, len(train.Classes), len(cfg.Classes))
	}
	var test *pretrain.Images
	if o.testPath != "" {
		if test, err = loadImageSet(ctx, o.testPath, data.Test, cfg.Model.Vision.ImageSize, "test", 0, o.stderr, o.quiet); err != nil {
			return err
		}
	}
	var bar *progressBar
	started := time.Now()
	opt := pretrain.RunOptions{Dir: o.out, Test: test, EvalLimit: o.evalLimit, CheckpointEvery: o.every}
	opt.Warn = func(msg string) { fmt.Fprintf(o.stderr, "warning: %s\n", msg) }
	opt.Progress = func(p pretrain.Progress) {
		if o.quiet {
			return
		}
		if bar == nil {
			// The bar counts images; it starts when the run did, not at
			// the first step's end.
			bar = newProgress(o.stderr, "", (p.Total-p.Resumed)*cfg.BatchSize)
			bar.start = started
		}
		bar.SetLabel(fmt.Sprintf("epoch %d  step %d/%d  loss %.3f  lr %.2g", p.Epoch, p.Step, p.Total, p.Loss, p.LR))
		bar.Add(cfg.BatchSize)
	}
	opt.Epoch = func(r pretrain.EpochRecord) {
		if bar != nil && bar.terminal {
			fmt.Fprint(o.stderr, "\r\033[K")
		}
		line := fmt.Sprintf("epoch %d: train loss %.4f, train accuracy %.2f%%", r.Epoch, r.TrainLoss, 100*r.TrainAcc)
		if r.TestImages > 0 {
			line += fmt.Sprintf(", test accuracy %.2f%% (%d images)", 100*r.TestAcc, r.TestImages)
		}
		fmt.Fprintf(o.stderr, "%s, logit scale %.1f, %s\n", line, r.LogitScale, formatDuration(time.Duration(r.Seconds*float64(time.Second))))
		if o.plot {
			if err := plotTraining(o.out); err != nil {
				fmt.Fprintf(o.stderr, "plot: %v\n", err)
			}
		}
	}
	t, err := pretrain.Run(ctx, cfg, train, opt)
	if bar != nil {
		bar.Done()
	}
	var untested *pretrain.TestInterruptedError
	switch {
	case errors.Is(err, context.Canceled) && t != nil && !interruptedOnly(err):
		return fmt.Errorf("interrupted at step %d, but the checkpoint could not be written (the run resumes from the last one written): %w", t.Step, err)
	case errors.As(err, &untested) && t != nil:
		fmt.Fprintf(o.stderr, "interrupted in epoch %d's test pass, at step %d; the checkpoint is in %s: run the same command to resume (it tests epoch %d first)\n", untested.Epoch, t.Step, o.out, untested.Epoch)
		return errInterrupted
	case errors.Is(err, context.Canceled) && t != nil:
		fmt.Fprintf(o.stderr, "interrupted at step %d; the checkpoint is in %s: run the same command to resume\n", t.Step, o.out)
		return errInterrupted
	case err != nil:
		return settingsError(o.out, err)
	}
	if o.plot {
		// Drawn after every epoch above; drawn here too for a run that
		// was already finished (no epoch ran).
		if err := plotTraining(o.out); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	if o.final != "" {
		// Checked again: a run may have begun there since.
		if pretrain.IsCheckpoint(o.final) {
			return exportOverCheckpoint(o.final)
		}
		if err := t.SaveModel(o.final); err != nil {
			return err
		}
		fmt.Fprintf(o.stderr, "model written to %s\n", o.final)
	}
	fmt.Fprintf(o.stdout, "trained %d steps; model in %s\n", t.Step, filepath.Join(o.out, pretrain.ModelFile))
	return nil
}

// interruptedOnly reports whether err, an error of an interrupted
// pretrain.Run, says the interruption alone: not joined with the failure
// to write the checkpoint.
func interruptedOnly(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !errors.Is(e, context.Canceled) {
				return false
			}
		}
	}
	return true
}

// checkExportPath reports why the model could not be written to path
// (--export) when the training ends: a folder, a folder that does not
// exist or cannot be written (checkModelFile, as convert's DST), a file
// of the run folder out, or another run's checkpoint, which the model
// would replace (ending that run's resumption). A file in out itself
// passes: out is checked first (checkRunFolder) and made before the
// training starts. An earlier model (an export, a run's model) may be
// replaced.
func checkExportPath(path, out string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usagef("--export %s is a folder: give a file name (.safetensors, or .safetensors.zst)", path)
	}
	for _, name := range []string{pretrain.CheckpointFile, pretrain.LogFile} {
		if samePath(path, filepath.Join(out, name)) {
			return usagef("--export %s is the run's %s: give another file", path, name)
		}
	}
	if pretrain.IsCheckpoint(path) {
		return exportOverCheckpoint(path)
	}
	if samePath(filepath.Dir(path), out) {
		return nil // the run folder, made before the training starts
	}
	return checkModelFile("--export", path)
}

// exportOverCheckpoint is the usage error of an --export that names a
// training run's checkpoint.
func exportOverCheckpoint(path string) error {
	return usagef("--export %s is a training run's checkpoint (its metadata holds training settings): writing the model over it would end that run's resumption; give another file", path)
}

// checkRunFolder refuses, before any data is read, an --out that cannot
// be the run folder: a file, or a path through a file (usage errors), or
// one whose nearest existing folder cannot be written (a file made and
// removed there finds it).
func checkRunFolder(out string) error {
	st, err := os.Stat(out)
	if err == nil && !st.IsDir() {
		return usagef("--out %s is a file: give a folder (the run folder, made if absent)", out)
	}
	dir := out
	for err != nil {
		// The nearest existing folder above, where out will be made.
		up := filepath.Dir(dir)
		if up == dir {
			return fmt.Errorf("--out %s: %w", out, err)
		}
		dir = up
		if st, err = os.Stat(dir); err == nil && !st.IsDir() {
			return usagef("--out %s: %s is a file, not a folder", out, dir)
		}
	}
	f, err := os.CreateTemp(dir, ".subtta-train.check*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the probe's name says nothing to the user
		}
		return fmt.Errorf("--out %s: folder %s cannot be written: %w", out, dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// trainFlags names the flags of train's settings by their place in
// pretrain.Config's JSON form, each flag's first key giving its values
// (--width sets the embedding and both towers' widths, the MLPs 4×; --lr
// also the minimum learning rate when below 1e-5).
var trainFlags = []struct{ flag, key string }{
	{"--epochs", "epochs"}, {"--batch-size", "batch_size"}, {"--lr", "lr"}, {"--lr", "min_lr"},
	{"--warmup", "warmup_steps"}, {"--weight-decay", "weight_decay"}, {"--seed", "seed"},
	{"--width", "model.vision.width"}, {"--width", "model.text.width"}, {"--width", "model.embed_dim"},
	{"--width", "model.vision.mlp_width"}, {"--width", "model.text.mlp_width"},
	{"--vision-layers", "model.vision.layers"}, {"--text-layers", "model.text.layers"},
	{"--heads", "model.vision.heads"}, {"--heads", "model.text.heads"},
}

// settingsError says a *pretrain.SettingsError by train's flags, in
// trainFlags' order: each flag whose value differs from the run's in out
// once ("--heads 2, was 4"), then each setting no flag sets by its key.
// Other errors are returned as they are.
func settingsError(out string, err error) error {
	var se *pretrain.SettingsError
	if !errors.As(err, &se) {
		return err
	}
	diffs := map[string]pretrain.SettingDiff{}
	for _, d := range se.Diffs {
		diffs[d.Key] = d
	}
	var parts []string
	said, flagged := map[string]bool{}, map[string]bool{}
	for _, f := range trainFlags {
		flagged[f.key] = true
		if d, ok := diffs[f.key]; ok && !said[f.flag] {
			said[f.flag] = true // the flag's first key that differs gives its values
			parts = append(parts, fmt.Sprintf("%s %s, was %s", f.flag, d.Now, d.Was))
		}
	}
	for _, d := range se.Diffs {
		if !flagged[d.Key] {
			parts = append(parts, fmt.Sprintf("setting %s %s, was %s", d.Key, d.Now, d.Was))
		}
	}
	return fmt.Errorf("--out %s holds a run begun with other settings (%s): %s; give the same settings to resume it, or another --out", out, se.Path, strings.Join(parts, "; "))
}

// samePath reports whether paths a and b name the same file: the same
// file if both exist (through links or other spellings), else the same
// absolute path.
func samePath(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	aa, errA := filepath.Abs(a)
	ab, errB := filepath.Abs(b)
	return errA == nil && errB == nil && aa == ab
}

// loadImageSet reads a CIFAR-style set into memory: the official binaries
// (split chooses data_batch_* or test_batch), else an image folder. A set
// of fewer images than batch (when batch > 0, the training set) is
// refused before it is decoded (usage error: --batch-size cannot work
// with it). When ctx ends, the decoding stops with errInterrupted,
// saying so.
func loadImageSet(ctx context.Context, path string, split data.Split, size int, what string, batch int, stderr io.Writer, quiet bool) (*pretrain.Images, error) {
	var ds data.Dataset
	bin, errBin := data.OpenCIFAR10(path, split)
	if errBin == nil {
		ds = bin
	} else {
		fd, errFolder := data.OpenFolder(path, data.FolderOptions{Classes: data.CIFAR10Classes})
		if errFolder != nil {
			return nil, fmt.Errorf("%s set %s: not CIFAR-10 binaries (%v), not an image folder of CIFAR-10's classes (%w)", what, path, errBin, errFolder)
		}
		ds = fd
	}
	defer ds.Close()
	if batch > ds.Len() {
		return nil, usagef("--batch-size %d: the %s set %s holds %d images, fewer than one batch", batch, what, path, ds.Len())
	}
	var bar *progressBar
	if !quiet {
		bar = newProgress(stderr, "decoding the "+what+" set", ds.Len())
	}
	last := 0
	set, err := pretrain.LoadImagesContext(ctx, ds, size, 0, func(done, total int) {
		if bar != nil {
			bar.Add(done - last)
		}
		last = done
	})
	if bar != nil {
		bar.Done()
	}
	if err != nil && ctx.Err() != nil {
		fmt.Fprintf(stderr, "interrupted while decoding the %s set %s; nothing was written: the same command starts the run again (or resumes it from its checkpoint)\n", what, path)
		return nil, errInterrupted
	}
	return set, err
}

// plotTraining draws OUT/accuracy.png from the run's log.
func plotTraining(dir string) error {
	recs, err := pretrain.ReadLog(filepath.Join(dir, pretrain.LogFile))
	if err != nil {
		return err
	}
	pts := make([]report.TrainingPoint, len(recs))
	for i, r := range recs {
		pts[i] = report.TrainingPoint{Epoch: r.Epoch, TrainAcc: r.TrainAcc, TestAcc: r.TestAcc, HasTest: r.TestImages > 0}
	}
	png, err := report.TrainingPlot(pts)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, "accuracy.png"), png)
}
