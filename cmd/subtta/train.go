package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/atomicfile"
	"github.com/subtta/subtta/pretrain"
	"github.com/subtta/subtta/report"
)

func runTrain(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("train", "", stderr)
	configFlags(fs, "train", stdout)
	def := pretrain.DefaultConfig(data.CIFAR10Classes, data.CIFAR10Templates)
	trainPath := fs.String("data", "", "CIFAR-10 training set: the official binaries (.tar.gz or folder), or an image folder (folder, .tar, .tar.gz) with one folder per class")
	testPath := fs.String("test", "", "CIFAR-10 test set in the same forms, classified zero-shot after every epoch (optional)")
	out := fs.String("out", "subtta-train", "run folder: checkpoint, model, log.jsonl; an interrupted run resumes there")
	epochs := fs.Int("epochs", def.Epochs, "epochs")
	batch := fs.Int("batch-size", def.BatchSize, "images per step")
	lr := fs.Float64("lr", def.LR, "peak learning rate (AdamW)")
	warmup := fs.Int("warmup", def.WarmupSteps, "linear warm-up steps")
	wd := fs.Float64("weight-decay", def.WeightDecay, "AdamW weight decay of linear and projection weights")
	seed := fs.Uint64("seed", def.Seed, "seed of the initialisation, the shuffles and the augmentation")
	width := fs.Int("width", def.Model.Vision.Width, "width of both towers and of the embedding")
	visionLayers := fs.Int("vision-layers", def.Model.Vision.Layers, "blocks of the image tower")
	textLayers := fs.Int("text-layers", def.Model.Text.Layers, "blocks of the text tower")
	heads := fs.Int("heads", def.Model.Vision.Heads, "attention heads of both towers")
	evalLimit := fs.Int("eval-limit", 0, "classify only the first N test images after each epoch (0: all)")
	every := fs.Int("checkpoint-every", 100, "also write a checkpoint every N steps (0: at the end of each epoch only)")
	final := fs.String("export", "", "when training ends, also write the model here (.safetensors, or .safetensors.zst for zstd)")
	plot := fs.Bool("plot", false, "write OUT/accuracy.png, the test accuracy and training loss per epoch")
	quiet := fs.Bool("quiet", false, "no progress bar")
	device := deviceFlag(fs)
	release, err := parseOnDevice(fs, device, args, stderr)
	if err != nil {
		return err
	}
	defer release()
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (all inputs are flags)", fs.Arg(0))
	}
	if *trainPath == "" {
		return usagef("--data is required (the CIFAR-10 training set)")
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"epochs", *epochs}, {"batch-size", *batch}, {"width", *width}, {"vision-layers", *visionLayers}, {"text-layers", *textLayers}, {"heads", *heads}} {
		if c.v <= 0 {
			return usagef("--%s %d: want a positive number", c.name, c.v)
		}
	}
	if *width%*heads != 0 {
		return usagef("--width %d is not a multiple of --heads %d", *width, *heads)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"warmup", *warmup}, {"eval-limit", *evalLimit}, {"checkpoint-every", *every}} {
		if c.v < 0 {
			return usagef("--%s %d: want 0 or more", c.name, c.v)
		}
	}
	cfg := def
	cfg.Epochs, cfg.BatchSize, cfg.LR, cfg.WarmupSteps, cfg.WeightDecay, cfg.Seed = *epochs, *batch, *lr, *warmup, *wd, *seed
	cfg.MinLR = min(cfg.MinLR, cfg.LR)
	m := &cfg.Model
	m.EmbedDim, m.Vision.Width, m.Text.Width = *width, *width, *width
	m.Vision.MLPWidth, m.Text.MLPWidth = 4**width, 4**width
	m.Vision.Layers, m.Text.Layers = *visionLayers, *textLayers
	m.Vision.Heads, m.Text.Heads = *heads, *heads
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}

	train, err := loadImageSet(*trainPath, data.Train, cfg.Model.Vision.ImageSize, "training", stderr, *quiet)
	if err != nil {
		return err
	}
	if len(train.Classes) != len(cfg.Classes) {
		return fmt.Errorf("%s: %d classes, want CIFAR-10's %d", *trainPath, len(train.Classes), len(cfg.Classes))
	}
	var test *pretrain.Images
	if *testPath != "" {
		if test, err = loadImageSet(*testPath, data.Test, cfg.Model.Vision.ImageSize, "test", stderr, *quiet); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var bar *progressBar
	started := time.Now()
	opt := pretrain.RunOptions{Dir: *out, Test: test, EvalLimit: *evalLimit, CheckpointEvery: *every}
	opt.Progress = func(p pretrain.Progress) {
		if *quiet {
			return
		}
		if bar == nil {
			// The bar counts images; it starts when the run did, not at
			// the first step's end.
			bar = newProgress(stderr, "", (p.Total-p.Resumed)*cfg.BatchSize)
			bar.start = started
		}
		bar.SetLabel(fmt.Sprintf("epoch %d  step %d/%d  loss %.3f  lr %.2g", p.Epoch, p.Step, p.Total, p.Loss, p.LR))
		bar.Add(cfg.BatchSize)
	}
	opt.Epoch = func(r pretrain.EpochRecord) {
		if bar != nil && bar.terminal {
			fmt.Fprint(stderr, "\r\033[K")
		}
		line := fmt.Sprintf("epoch %d: train loss %.4f, train accuracy %.2f%%", r.Epoch, r.TrainLoss, 100*r.TrainAcc)
		if r.TestImages > 0 {
			line += fmt.Sprintf(", test accuracy %.2f%% (%d images)", 100*r.TestAcc, r.TestImages)
		}
		fmt.Fprintf(stderr, "%s, logit scale %.1f, %s\n", line, r.LogitScale, formatDuration(time.Duration(r.Seconds*float64(time.Second))))
		if *plot {
			if err := plotTraining(*out); err != nil {
				fmt.Fprintf(stderr, "plot: %v\n", err)
			}
		}
	}
	t, err := pretrain.Run(ctx, cfg, train, opt)
	if bar != nil {
		bar.Done()
	}
	if errors.Is(err, context.Canceled) && t != nil {
		fmt.Fprintf(stderr, "interrupted at step %d; the checkpoint is in %s: run the same command to resume\n", t.Step, *out)
		return errInterrupted
	}
	if err != nil {
		return err
	}
	if *final != "" {
		if err := t.SaveModel(*final); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "model written to %s\n", *final)
	}
	fmt.Fprintf(stdout, "trained %d steps; model in %s\n", t.Step, filepath.Join(*out, pretrain.ModelFile))
	return nil
}

// loadImageSet reads a CIFAR-style set into memory: the official binaries
// (split chooses data_batch_* or test_batch), else an image folder.
func loadImageSet(path string, split data.Split, size int, what string, stderr io.Writer, quiet bool) (*pretrain.Images, error) {
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
	var bar *progressBar
	if !quiet {
		bar = newProgress(stderr, "decoding the "+what+" set", ds.Len())
	}
	last := 0
	set, err := pretrain.LoadImages(ds, size, 0, func(done, total int) {
		if bar != nil {
			bar.Add(done - last)
		}
		last = done
	})
	if bar != nil {
		bar.Done()
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
