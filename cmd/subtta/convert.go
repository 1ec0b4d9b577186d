package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/subtta/subtta/weights"
)

func runConvert(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("convert", "SRC DST", stderr)
	dtype := fs.String("dtype", "f32", "storage type of float tensors: f32, f16, bf16, or int8 (the weights --precision int8 quantises stored as it quantises them, per output channel with float32 scales; every other tensor f32)")
	zstd := fs.Bool("zstd", false, "compress with zstd (implied by a DST ending in .zst)")
	modelConfig := fs.String("model-config", "", strings.Replace(modelConfigHelp, "--model", "SRC", 1))
	arch := fs.String("arch", "", strings.Replace(archHelp, "--model", "SRC", 1))
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want SRC and DST")
	}
	var dt weights.DType
	switch strings.ToLower(*dtype) {
	case "f32", "fp32", "float32":
		dt = weights.F32
	case "f16", "fp16", "float16":
		dt = weights.F16
	case "bf16", "bfloat16":
		dt = weights.BF16
	case "int8", "i8":
		dt = weights.I8
	default:
		return usagef("--dtype %q: want f32, f16, bf16 or int8", *dtype)
	}
	c, err := modelArch(*modelConfig, *arch)
	if err != nil {
		return err
	}
	cfg, err := weights.Convert(fs.Arg(0), fs.Arg(1), weights.ConvertOptions{DType: dt, Zstd: *zstd, Config: c})
	if err != nil {
		return err
	}
	// An inferred configuration is not written (see weights.Convert), so
	// that the output's readers warn too.
	warnInferred(stderr, fs.Arg(0), cfg)
	stored := string(dt)
	if dt == weights.I8 {
		// Convert stores exactly these in int8.
		stored = fmt.Sprintf("%d weight tensors quantised to int8 with per-channel scales, the rest F32", len(cfg.Int8Names()))
	}
	fmt.Fprintf(stdout, "wrote %s (%s; vision %d×%d, patch %d; text %d×%d; embed %d)\n", fs.Arg(1), stored,
		cfg.Vision.Layers, cfg.Vision.Width, cfg.Vision.PatchSize, cfg.Text.Layers, cfg.Text.Width, cfg.EmbedDim)
	return nil
}

func runPull(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pull", "REPO", stderr)
	files := fs.String("files", "config.json,model.safetensors,vocab.json,merges.txt", "comma-separated files to fetch")
	cache := fs.String("cache", "", "cache directory (default $SUBTTA_CACHE or the user cache dir); a file already in the Hugging Face cache ($HF_HUB_CACHE, else ~/.cache/huggingface/hub) is used in place. $HF_ENDPOINT names a mirror, $HF_TOKEN the token of a gated repository")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one repository, e.g. openai/clip-vit-base-patch32")
	}
	dir := *cache
	if dir == "" {
		var err error
		if dir, err = cacheDir(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var remote []weights.RemoteFile
	for _, f := range strings.Split(*files, ",") {
		remote = append(remote, weights.RemoteFile{Name: f})
	}
	hub := weights.HubFromEnv()
	lw := &lastByteWriter{w: stderr}
	hub.OnRetry = func(file string, err error, wait time.Duration) {
		if lw.last != '\n' && lw.last != 0 {
			fmt.Fprintln(lw) // end the progress line
		}
		fmt.Fprintf(lw, "%s; retrying in %.1f s\n", strings.TrimPrefix(err.Error(), "weights: pull "), wait.Seconds())
	}
	paths, err := hub.Pull(ctx, fs.Arg(0), remote, dir, progressPrinter(lw))
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, p)
	}
	return nil
}

// lastByteWriter remembers the last byte written through it.
type lastByteWriter struct {
	w    io.Writer
	last byte
}

func (l *lastByteWriter) Write(b []byte) (int, error) {
	if len(b) > 0 {
		l.last = b[len(b)-1]
	}
	return l.w.Write(b)
}
