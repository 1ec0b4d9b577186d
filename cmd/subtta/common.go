package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

// cacheDir is where downloads go: $SUBTTA_CACHE, else the user cache
// directory's subtta folder.
func cacheDir() (string, error) {
	if d := os.Getenv("SUBTTA_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set SUBTTA_CACHE): %w", err)
	}
	return filepath.Join(d, "subtta"), nil
}

// tokenizerRepo is the Hugging Face repository the default CLIP vocabulary
// is downloaded from (vocab.json and merges.txt, the same BPE as OpenAI's).
const tokenizerRepo = "openai/clip-vit-base-patch32"

// loadTokenizer finds the CLIP BPE vocabulary: the --vocab flag, then a
// model directory holding vocab.json/merges.txt or tokenizer.json, then
// $SUBTTA_VOCAB, then the cache (downloading it on first use).
func loadTokenizer(vocab, model string, stderr io.Writer) (*textenc.BPETokenizer, error) {
	if vocab == "" {
		vocab = os.Getenv("SUBTTA_VOCAB")
	}
	if vocab == "" && model != "" {
		if st, err := os.Stat(model); err == nil && st.IsDir() {
			if t, err := textenc.LoadBPETokenizer(model); err == nil {
				return t, nil
			}
		}
	}
	if vocab == "" {
		dir, err := cacheDir()
		if err != nil {
			return nil, err
		}
		paths, err := weights.Pull(context.Background(), tokenizerRepo, []string{"vocab.json", "merges.txt"}, dir, progressPrinter(stderr))
		if err != nil {
			return nil, fmt.Errorf("no vocabulary given (--vocab or SUBTTA_VOCAB) and the download failed: %w", err)
		}
		vocab = filepath.Dir(paths[0])
	}
	return textenc.LoadBPETokenizer(vocab)
}

// modelFlagHelp is the help of every --model flag.
const modelFlagHelp = "checkpoint: .safetensors, .pt or Hugging Face directory (default: the built-in CLIP trained on CIFAR-10)"

// loadModel loads the checkpoint at path, or the built-in model when path
// is empty or "default". configPath (--model-config) or arch (--arch), if
// given, is the architecture (see modelArch). A warning goes to stderr when
// the head counts were inferred from the tensor shapes.
func loadModel(path, configPath, arch string, stderr io.Writer) (*clip.Model, error) {
	var opt clip.Options
	var err error
	if opt.Config, err = modelArch(configPath, arch); err != nil {
		return nil, err
	}
	if path == "" || path == builtin.ModelName {
		if opt.Config != nil {
			return nil, usagef("--model-config and --arch need --model: the built-in model has its own architecture")
		}
		return builtin.Model(opt)
	}
	m, err := clip.Load(path, opt)
	if err != nil {
		return nil, err
	}
	if opt.Config == nil {
		warnInferred(stderr, path, m.Config)
	}
	return m, nil
}

// modelArch returns the architecture configPath (--model-config: a Hugging
// Face config.json, an open_clip model config, OpenAI's CLIP keyword
// arguments, or the JSON that convert stores) or arch (--arch, an open_clip
// model name) gives, or nil when neither is given.
func modelArch(configPath, arch string) (*weights.CLIPConfig, error) {
	switch {
	case configPath != "" && arch != "":
		return nil, usagef("--model-config and --arch both give the architecture: give one")
	case arch != "":
		c, err := weights.Arch(arch)
		if err != nil {
			return nil, usagef("--arch: %v", err)
		}
		return c, nil
	case configPath != "":
		if _, err := os.Stat(configPath); err != nil {
			return nil, usagef("--model-config: %v", err)
		}
		c, err := weights.ReadConfig(configPath)
		if err != nil {
			return nil, fmt.Errorf("--model-config: %w", err)
		}
		return c, nil
	}
	return nil, nil
}

// warnInferred tells stderr that the checkpoint at path stores no
// configuration, when c was inferred from its tensor shapes: its head
// counts are then a guess.
func warnInferred(stderr io.Writer, path string, c *weights.CLIPConfig) {
	if c.Inferred {
		fmt.Fprintf(stderr, "warning: %s has no stored configuration: %d vision and %d text heads assumed (width/64, as OpenAI's models); give --arch or --model-config if it differs\n",
			path, c.Vision.Heads, c.Text.Heads)
	}
}

// modelConfigHelp and archHelp are the help of every --model-config and
// --arch flag.
const (
	modelConfigHelp = "architecture of --model, when it is not stored with the weights: a Hugging Face config.json, an open_clip model config (ViT-B-32.json), OpenAI's CLIP keyword arguments, or convert's JSON"
	archHelp        = "architecture of --model by open_clip model name (ViT-B-32, ViT-B-16-quickgelu, ViT-L-14-336, ViT-H-14, ...), when it is not stored with the weights"
)

// isBuiltin reports whether a --model value names the built-in model.
func isBuiltin(path string) bool { return path == "" || path == builtin.ModelName }

// modelTokenizer returns the tokenizer for m: the byte-level one when the
// text tower has the byte-level vocabulary (the built-in model and models
// from subtta train) and no --vocab is given, else the CLIP BPE vocabulary
// that loadTokenizer finds.
func modelTokenizer(m *clip.Model, vocab, model string, stderr io.Writer) (textenc.Tokenizer, error) {
	if vocab == "" && m.Config.Text.VocabSize == textenc.ByteVocabSize {
		return textenc.ByteTokenizer{}, nil
	}
	return loadTokenizer(vocab, model, stderr)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// progressPrinter reports download progress on one line of stderr.
func progressPrinter(w io.Writer) func(weights.Progress) {
	return func(p weights.Progress) {
		switch {
		case p.Skipped:
			fmt.Fprintf(w, "%s: cached\n", p.File)
		case p.Total > 0:
			fmt.Fprintf(w, "\r%s: %5.1f%% of %s", p.File, 100*float64(p.Done)/float64(p.Total), humanBytes(p.Total))
			if p.Done == p.Total {
				fmt.Fprintln(w)
			}
		default:
			fmt.Fprintf(w, "\r%s: %s", p.File, humanBytes(p.Done))
		}
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
