package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/subtta/subtta/autograd/kernel"
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

// findVocab is where the command line looks for the CLIP BPE vocabulary
// when --vocab and the model give none (clip.Spec.FindVocab):
// $SUBTTA_VOCAB, then the cache, downloading it on first use. A
// $SUBTTA_VOCAB that is not there is named as the variable (the user may
// not know it is set); whether the vocabulary fits the model,
// clip.Spec.Tokenizer checks.
func findVocab(stderr io.Writer) (string, error) {
	if v := os.Getenv("SUBTTA_VOCAB"); v != "" {
		if _, err := os.Stat(v); err != nil {
			return "", fmt.Errorf("SUBTTA_VOCAB: %w", err)
		}
		return v, nil
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	files := []weights.RemoteFile{{Name: "vocab.json"}, {Name: "merges.txt"}}
	hub := weights.HubFromEnv()
	paths, err := hub.Pull(context.Background(), tokenizerRepo, files, dir, progressPrinter(stderr))
	if err == nil && filepath.Dir(paths[0]) != filepath.Dir(paths[1]) {
		// One file in the Hugging Face cache, one not: both in ours, in
		// one folder, as the tokenizer reads them.
		hub.HFCache = ""
		paths, err = hub.Pull(context.Background(), tokenizerRepo, files, dir, progressPrinter(stderr))
	}
	if err != nil {
		return "", fmt.Errorf("no vocabulary given (--vocab or SUBTTA_VOCAB) and the download failed: %w", err)
	}
	return filepath.Dir(paths[0]), nil
}

// modelFlagHelp is the help of every --model flag.
const modelFlagHelp = "checkpoint: .safetensors, .pt or Hugging Face directory (default: the built-in CLIP trained on CIFAR-10)"

// openModel builds the model of the --model, --model-config, --arch and
// --vocab flags with clip.Create: the checkpoint at path, or the built-in
// model when path is empty or "default"; configPath (a Hugging Face
// config.json, an open_clip model config, OpenAI's CLIP keyword arguments,
// or the JSON that convert stores) or arch (an open_clip model name), if
// given, is the architecture. A warning goes to stderr when the head
// counts were inferred from the tensor shapes. The bundle's tokenizer
// reads vocab, else the byte-level one for byte-level models, the model
// folder's vocabulary, or findVocab's. A vocab given is read here, before
// any work, and refused when the text tower cannot take its ids
// (clip.ErrVocabDoesNotFit). The linear layers run in prec (clip.Spec.Precision).
func openModel(path, configPath, arch, vocab string, prec kernel.Precision, stderr io.Writer) (*clip.Bundle, error) {
	if isBuiltin(path) {
		path = builtin.ModelName
	}
	b, err := clip.Create(clip.Spec{Model: path, Arch: arch, ModelConfig: configPath, Vocab: vocab, Precision: prec,
		FindVocab: func() (string, error) { return findVocab(stderr) }})
	if field := (*clip.SpecError)(nil); errors.As(err, &field) && field.Field == "Precision" {
		return nil, fmt.Errorf("--precision %s: %w", prec, field.Err)
	}
	if err != nil {
		return nil, specUsage(err)
	}
	if vocab != "" {
		_, err := b.Tokenizer()
		switch {
		case errors.Is(err, clip.ErrVocabDoesNotFit):
			hint := ""
			if b.Model.Config.Text.VocabSize == textenc.ByteVocabSize {
				hint = ": leave it out (byte-level tokens need no vocabulary)"
			}
			return nil, usagef("--vocab: %v%s", err, hint)
		case err != nil:
			return nil, fmt.Errorf("--vocab: %w", err)
		}
	}
	warnInferred(stderr, path, b.Model.Config)
	warnUnreadConfig(stderr, configPath)
	return b, nil
}

// modelArch returns the architecture configPath (--model-config) or arch
// (--arch) gives (clip.Spec.Architecture), or nil when neither is given.
func modelArch(configPath, arch string) (*weights.CLIPConfig, error) {
	c, err := clip.Spec{Arch: arch, ModelConfig: configPath}.Architecture()
	if err != nil {
		return nil, specUsage(err)
	}
	return c, nil
}

// specUsage turns the errors of a clip.Spec into the usage errors of the
// flags that made it.
func specUsage(err error) error {
	var field *clip.SpecError
	switch {
	case errors.Is(err, clip.ErrArchTwice):
		return usagef("--model-config and --arch both give the architecture: give one")
	case errors.Is(err, clip.ErrNamedArch):
		// Create reports it for the built-in model (--model default, or
		// no --model where that means the built-in one), whichever of
		// the two was given.
		return usagef("--model-config and --arch do not apply to the built-in model, which stores its own architecture: they need --model naming a checkpoint")
	case errors.As(err, &field) && field.Field == "Arch":
		return usagef("--arch: %v", field.Err)
	case errors.As(err, &field) && field.Field == "ModelConfig":
		return usagef("--model-config: %v", field.Err)
	}
	return err
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

// warnUnreadConfig tells stderr which keys of the open_clip model config
// at path (--model-config) are not read (weights.UnreadConfigKeys): the
// model is built without what they say, which a user who wrote them
// should know. It says nothing for a file it cannot read: the
// configuration's reader reports that.
func warnUnreadConfig(stderr io.Writer, path string) {
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if keys := weights.UnreadConfigKeys(b); len(keys) > 0 {
		fmt.Fprintf(stderr, "warning: --model-config %s: %s not read: the model is built from the other keys (open_clip's plain ViT towers), without what these say\n",
			path, strings.Join(keys, ", "))
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

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// progressPrinter reports download progress on one line of stderr, or,
// where w is not a terminal (a log), as a line every
// progressLogInterval and one at the end.
func progressPrinter(w io.Writer) func(weights.Progress) {
	terminal := isTerminal(w)
	var last time.Time
	return func(p weights.Progress) {
		done := p.Total > 0 && p.Done == p.Total
		if !terminal && !p.Skipped && !done {
			now := time.Now()
			if now.Sub(last) < progressLogInterval {
				return
			}
			last = now
		}
		cr, nl := "\r", ""
		if !terminal {
			cr, nl = "", "\n"
		}
		switch {
		case p.Skipped:
			fmt.Fprintf(w, "%s: cached\n", p.File)
		case p.Total > 0:
			fmt.Fprintf(w, "%s%s: %5.1f%% of %s%s", cr, p.File, 100*float64(p.Done)/float64(p.Total), humanBytes(p.Total), nl)
			if done && terminal {
				fmt.Fprintln(w)
			}
		default:
			fmt.Fprintf(w, "%s%s: %s%s", cr, p.File, humanBytes(p.Done), nl)
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

// checkModelFile refuses, before any work, a model file path (named by
// what: "DST", "--export") that cannot be written: a folder, or a file in
// a folder that does not exist, is not a folder or cannot be written (a
// file made and removed there, as weights.WriteFile makes its temporary
// file beside the model).
func checkModelFile(what, path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usagef("%s %s is a folder: give a file name (.safetensors, or .safetensors.zst)", what, path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s %s: folder %s does not exist", what, path, dir)
	case err != nil:
		return fmt.Errorf("%s %s: %w", what, path, err)
	case !st.IsDir():
		return fmt.Errorf("%s %s: %s is not a folder", what, path, dir)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".check*")
	if err != nil {
		// The probe's name says nothing to the user: the reason alone.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s %s: folder %s cannot be written: %w", what, path, dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}
