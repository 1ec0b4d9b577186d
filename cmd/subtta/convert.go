package main

import (
	"context"
	"encoding/json"
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

	"github.com/subtta/subtta/pretrain"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// convertOptions are the flags of convert.
type convertOptions struct {
	dtype             string
	zstd              bool
	modelConfig, arch string
	random            bool
	seed              uint64
	seedGiven         bool // --seed was given (it takes --random)

	stdout, stderr io.Writer
}

// newConvertCmd is `subtta convert SRC DST`.
func newConvertCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &convertOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "convert SRC DST",
		Short: "rewrite a checkpoint as OpenAI-named safetensors (fp16/bf16/int8, zstd)",
		Long: "rewrite a checkpoint as OpenAI-named safetensors (fp16/bf16/int8, zstd)\n\n" +
			"DST is written whole or not at all (a temporary file beside it, renamed), and may not be SRC or one of its files;\n" +
			"Ctrl-C (SIGINT) or SIGTERM stops it with status 130, leaving DST as it was and no temporary file; while SRC is\n" +
			"still being read it stops when the read is done, and a second Ctrl-C ends it at once.\n\n" +
			"With --random (convert --random --arch ViT-B-32 DST), write a model of that architecture with random weights\n" +
			"(OpenAI's initialisation) instead: a real model's shapes and cost, for timing eval, embed or serve\n" +
			"without a checkpoint; its text tower takes the byte-level tokenizer (no vocabulary needed). Its predictions mean nothing.",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.seedGiven = cmd.Flags().Changed("seed")
			return o.run(args)
		},
	}
	f := c.Flags()
	f.StringVar(&o.dtype, "dtype", "f32", "storage type of float tensors: f32, f16, bf16, or int8 (the weights --precision int8 quantises stored as it quantises them, per output channel with float32 scales; every other tensor f32)")
	f.BoolVar(&o.zstd, "zstd", false, "compress with zstd (implied by a DST ending in .zst)")
	f.StringVar(&o.modelConfig, "model-config", "", strings.Replace(modelConfigHelp, "--model", "SRC", 1))
	f.StringVar(&o.arch, "arch", "", strings.Replace(archHelp, "--model", "SRC", 1))
	f.BoolVar(&o.random, "random", false, "write a model of --arch or --model-config with random weights to DST (the only argument), for timing")
	f.Uint64Var(&o.seed, "seed", 1, "with --random: the seed of the weights")
	c.RegisterFlagCompletionFunc("dtype", cobra.FixedCompletions([]string{"f32", "f16", "bf16", "int8"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

// run converts args[0] (SRC) into args[1] (DST).
func (o *convertOptions) run(args []string) error {
	if o.random {
		if len(args) != 1 {
			return usagef("--random: want DST only")
		}
	} else if len(args) != 2 {
		return usagef("want SRC and DST")
	} else if o.seedGiven {
		return usagef("--seed %d needs --random (the seed of its weights): a conversion takes none", o.seed)
	}
	var dt weights.DType
	switch strings.ToLower(o.dtype) {
	case "f32", "fp32", "float32":
		dt = weights.F32
	case "f16", "fp16", "float16":
		dt = weights.F16
	case "bf16", "bfloat16":
		dt = weights.BF16
	case "int8", "i8":
		dt = weights.I8
	default:
		return usagef("--dtype %q: want f32, f16, bf16 or int8", o.dtype)
	}
	c, err := modelArch(o.modelConfig, o.arch)
	if err != nil {
		return err
	}
	// SIGINT or SIGTERM stops the write and removes its temporary file
	// (left beside DST when the signal ended the process). Reading SRC
	// or making random weights is not cut short: a second signal ends the
	// process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	if o.random {
		return o.interrupted(ctx, args[0], o.writeRandom(ctx, c, dt, args[0]))
	}
	if err := checkConvertTarget(args[0], args[1]); err != nil {
		return err
	}
	if err := checkConvertFolder(args[1]); err != nil {
		return err
	}
	warnUnreadConfig(o.stderr, o.modelConfig)
	// An architecture given for a SRC that stores one must be that one,
	// as for the models classify, embed or eval load (the same error).
	cfg, err := weights.ConvertContext(ctx, args[0], args[1], weights.ConvertOptions{DType: dt, Zstd: o.zstd, Config: c, StoredWins: true})
	if errors.Is(err, weights.ErrArchDiffers) {
		if o.modelConfig != "" {
			return usagef("--model-config: %v", err)
		}
		return usagef("--arch: %v", err)
	}
	if err != nil {
		return o.interrupted(ctx, args[1], err)
	}
	// An inferred configuration is not written (see weights.Convert), so
	// that the output's readers warn too.
	warnInferred(o.stderr, args[0], cfg)
	stored := string(dt)
	if dt == weights.I8 {
		// Convert stores exactly these in int8.
		stored = fmt.Sprintf("%d weight tensors quantised to int8 with per-channel scales, the rest F32", len(cfg.Int8Names()))
	}
	fmt.Fprintf(o.stdout, "wrote %s (%s; vision %d×%d, patch %d; text %d×%d; embed %d)\n", args[1], stored,
		cfg.Vision.Layers, cfg.Vision.Width, cfg.Vision.PatchSize, cfg.Text.Layers, cfg.Text.Width, cfg.EmbedDim)
	return nil
}

// interrupted turns err into errInterrupted (exit status 130), saying so,
// when ctx ended it; dst is then as it was before.
func (o *convertOptions) interrupted(ctx context.Context, dst string, err error) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintf(o.stderr, "interrupted: %s not written (left as it was)\n", dst)
	return errInterrupted
}

// checkConvertTarget refuses a DST that would replace SRC: the same file
// under any spelling or link, or, when SRC is a folder, one of its files
// (its model.safetensors, a shard, ...). The output is written to a
// temporary file renamed over DST once complete (weights.WriteFile), so
// that an interrupted conversion leaves DST as it was; only this check
// keeps it from replacing the source.
func checkConvertTarget(src, dst string) error {
	sd, err := os.Stat(dst)
	if err != nil {
		return nil // nothing there to lose; errors other than absence show when DST is written
	}
	ss, err := os.Stat(src)
	if err != nil {
		return nil // weights.Convert says why SRC cannot be read
	}
	if os.SameFile(ss, sd) {
		return usagef("DST %s is SRC %s: write the conversion to another file", dst, src)
	}
	if !ss.IsDir() || sd.IsDir() {
		return nil
	}
	var found string
	filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if st, err := os.Stat(path); err == nil && os.SameFile(st, sd) {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found != "" {
		return usagef("DST %s is %s, a file of SRC %s: write the conversion to another file", dst, found, src)
	}
	return nil
}

// checkConvertFolder refuses, before any work, a DST that cannot be
// written (checkModelFile): without it, the error would come once SRC is
// read or the random weights made, and would name the temporary file
// rather than DST.
func checkConvertFolder(dst string) error { return checkModelFile("DST", dst) }

// writeRandom writes a model of architecture c with OpenAI's random
// initialisation (pretrain.RandomState) to dst, its float tensors stored
// as dt.
func (o *convertOptions) writeRandom(ctx context.Context, c *weights.CLIPConfig, dt weights.DType, dst string) error {
	if c == nil {
		return usagef("--random needs --arch or --model-config (the architecture to make)")
	}
	switch {
	case dt == weights.I8:
		return usagef("--random: --dtype int8 is not offered (the weights are random: f32, f16 or bf16)")
	case o.zstd || filepath.Ext(dst) == ".zst":
		return usagef("--random: zstd does not shrink random weights: write a .safetensors file")
	}
	if err := checkConvertFolder(dst); err != nil {
		return err
	}
	warnUnreadConfig(o.stderr, o.modelConfig)
	// The text tower takes the byte-level vocabulary (259 tokens, as
	// `train`'s models do): no BPE vocabulary is needed to use the model,
	// and only the token embedding's rows differ from the architecture's.
	c.Text.VocabSize = textenc.ByteVocabSize
	s, err := pretrain.RandomState(c, o.seed)
	if err != nil {
		return err
	}
	cj, err := json.Marshal(c)
	if err != nil {
		return err
	}
	meta := map[string]string{
		"format":    "pt",
		"layout":    string(weights.LayoutOpenAI),
		"config":    string(cj),
		"dtype":     string(dt),
		"source":    fmt.Sprintf("random weights, seed %d", o.seed),
		"generator": "github.com/subtta/subtta/pretrain.RandomState",
	}
	var tensors []weights.Tensor
	for _, name := range c.Names() {
		p, err := s.Param(name)
		if err != nil {
			return err
		}
		tensors = append(tensors, weights.Tensor{Name: name, DType: dt, Shape: p.Shape, Data: p.Data})
	}
	if err := weights.WriteFileContext(ctx, dst, tensors, meta); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "wrote %s (%s, random weights, seed %d; vision %d×%d, patch %d, %d pixels; text %d×%d; embed %d)\n", dst, dt, o.seed,
		c.Vision.Layers, c.Vision.Width, c.Vision.PatchSize, c.Vision.ImageSize, c.Text.Layers, c.Text.Width, c.EmbedDim)
	return nil
}

// pullOptions are the flags of pull.
type pullOptions struct {
	files, cache string

	stdout, stderr io.Writer
}

// newPullCmd is `subtta pull REPO`.
func newPullCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &pullOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "pull REPO",
		Short: "download a Hugging Face checkpoint into the cache",
		Long: "download a Hugging Face checkpoint into the cache\n\n" +
			"Ctrl-C (SIGINT) or SIGTERM stops it with status 130, keeping what arrived as FILE.part: the same command resumes.",
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(args) },
	}
	f := c.Flags()
	f.StringVar(&o.files, "files", "config.json,model.safetensors,vocab.json,merges.txt", "comma-separated files to fetch")
	f.StringVar(&o.cache, "cache", "", "cache directory (default $SUBTTA_CACHE or the user cache dir); a file already in the Hugging Face cache ($HF_HUB_CACHE, else ~/.cache/huggingface/hub) is used in place. $HF_ENDPOINT names a mirror, $HF_TOKEN the token of a gated repository")
	return c
}

// run downloads the files of the repository args[0].
func (o *pullOptions) run(args []string) error {
	if len(args) != 1 {
		return usagef("want one repository, e.g. openai/clip-vit-base-patch32")
	}
	dir := o.cache
	if dir == "" {
		var err error
		if dir, err = cacheDir(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var remote []weights.RemoteFile
	for _, f := range strings.Split(o.files, ",") {
		remote = append(remote, weights.RemoteFile{Name: f})
	}
	hub := weights.HubFromEnv()
	lw := &lastByteWriter{w: o.stderr}
	hub.OnRetry = func(file string, err error, wait time.Duration) {
		if lw.last != '\n' && lw.last != 0 {
			fmt.Fprintln(lw) // end the progress line
		}
		fmt.Fprintf(lw, "%s; retrying in %.1f s\n", strings.TrimPrefix(err.Error(), "weights: pull "), wait.Seconds())
	}
	paths, err := hub.Pull(ctx, args[0], remote, dir, progressPrinter(lw))
	if err != nil && ctx.Err() != nil {
		if lw.last != '\n' && lw.last != 0 {
			fmt.Fprintln(lw) // end the progress line
		}
		fmt.Fprintf(lw, "interrupted: what arrived is kept (FILE.part under %s); the same command resumes\n", filepath.Join(dir, filepath.FromSlash(args[0])))
		return errInterrupted // exit status 130
	}
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintln(o.stdout, p)
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
