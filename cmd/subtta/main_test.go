package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/pretrain"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/weights"
)

func TestRunExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		stderr string
	}{
		{nil, 2, "Usage"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"evl"}, 2, "Did you mean this?\n\teval"},
		{[]string{"bench", "--batc", "3"}, 2, "unknown flag: --batc (did you mean --batch or --batch-size?)"},
		{[]string{"bench", "-batch-size", "0"}, 2, "--batch-size 0: must be positive"}, // the standard flag package's spelling
		{[]string{"bench", "--reps=x"}, 2, `invalid value "x" for --reps`},
		{[]string{"tokenize", "--context"}, 2, "flag needs an argument: --context"},
		{[]string{"tokenize"}, 2, "no text given"},
		{[]string{"tokenize", "--context", "100000000", "x"}, 2, "--context 100000000: want 2 to 4096"},
		{[]string{"convert", "--dtype", "f8", "a", "b"}, 2, `--dtype "f8"`},
		{[]string{"classify", "--labels", "a", "--model", "/does/not/exist.pt", "x.png"}, 1, "/does/not/exist.pt"},
		{[]string{"bench", "--batch", "0"}, 2, "--batch-size 0: must be positive"},
		{[]string{"bench", "--batch-size", "-1"}, 2, "--batch-size -1: must be positive"},
		{[]string{"bench", "--classes", "0"}, 2, "--classes 0: must be positive"},
		{[]string{"bench", "--classes", "-3"}, 2, "--classes -3: must be positive"},
		{[]string{"bench", "--only", "forwar"}, 2, `unknown measurement "forwar"`},
		{[]string{"bench", "--precision", "fp16"}, 2, `--precision fp16 needs --device cuda`},
		{[]string{"bench", "--precision", "fp8"}, 2, `--precision "fp8": want fp32, bf16 or int8`},
		{[]string{"eval", "--precision", "tf32"}, 2, `--precision tf32 needs --device cuda`},
		{[]string{"bench", "--device", "cuda", "--tf32", "--precision", "fp16"}, 2, `--tf32 with --precision fp16: give one of them`},
		{[]string{"bench", "--cuda-graphs=false"}, 2, `--cuda-graphs=false needs --device cuda`},
		{[]string{"eval", "--cuda-graphs=false"}, 2, `--cuda-graphs=false needs --device cuda`},
		{[]string{"classify", "--precision", "int4", "x.png"}, 2, `--precision "int4"`},
		{[]string{"embed", "--precision", "", "--text", "a"}, 2, `--precision ""`},
		{[]string{"eval", "--precision", "f32"}, 2, `--precision "f32"`},
		{[]string{"serve", "--precision", "int16"}, 2, `--precision "int16"`},
		{[]string{"classify", "--labels", "cat,dog,cat", "x.png"}, 2, `"cat" is given twice`},
		{[]string{"version", "now"}, 2, "version takes no arguments"},
		{[]string{"completion", "bsh"}, 2, `unknown command "bsh"`},
		// A flag that would be ignored is refused.
		{[]string{"bench", "--batch", "8", "--batch-size", "4"}, 2, "--batch and --batch-size are the same setting"},
		{[]string{"bench", "--only", ""}, 2, `--only "": no measurement`},
		{[]string{"bench", "--only", "forward,,backward"}, 2, `--only "forward,,backward": entry 2 is empty`},
		{[]string{"bench", "--only", "forward,forward"}, 2, `--only "forward,forward": measurement "forward" given twice`},
		{[]string{"bench", "--cpuprofile", os.TempDir()}, 2, "--cpuprofile: "},
		{[]string{"classify", "--out", "x.csv", "x.png"}, 2, "--out is for --images"},
		{[]string{"classify", "--batch-size", "8", "x.png"}, 2, "--batch-size is for --images"},
		{[]string{"classify", "--json", "--images", "d", "--out", "x.csv"}, 2, "--json is for images given as arguments"},
		{[]string{"classify", "--template", " ", "x.png"}, 2, `--template " ": no template`},
		{[]string{"embed", "--out", "d", "--text", "a"}, 2, "--out is for --images or --texts"},
		// A list flag given empty is an error, not the default.
		{[]string{"classify", "--labels", ",,,", "x.png"}, 2, `--labels ",,,": no label`},
		{[]string{"classify", "--labels", "", "x.png"}, 2, `--labels "": no label`},
		{[]string{"classify", "--labels", "cat,,dog", "x.png"}, 2, `--labels "cat,,dog": entry 2 is empty`},
		{[]string{"classify", "--labels", "cat,dog,", "x.png"}, 2, `--labels "cat,dog,": entry 3 is empty`},
		{[]string{"classify", "--labels", "cat,dog", "--template", "a photo", "x.png"}, 2, `--template "a photo" has no {} for the label`},
		{[]string{"eval", "--methods", ""}, 2, `--methods "": no method`},
		{[]string{"eval", "--methods", "vte", "--views", "1"}, 2, "--views 1: want at least 2 views per image"},
		{[]string{"eval", "--methods", "vte", "--views", "-1"}, 2, "--views -1: want at least 2 views per image"},
		{[]string{"eval", "--methods", "vte", "--views", "5"}, 2, "vte: 5 views per image, want at least 10"},
		{[]string{"eval", "--methods", "source", "--views", "8"}, 2, "source sees one view of each image: it takes no view count"},
		{[]string{"eval", "--protocol", "episodic", "--batch-size", "4"}, 2, "episodic protocol adapts to one sample at a time: batch size 4"},
		{[]string{"eval", "--methods", " , "}, 2, `--methods " , ": no method`},
		{[]string{"eval", "--corruptions", ","}, 2, `--corruptions ",": no corruption`},
		{[]string{"eval", "--severities", ""}, 2, `--severities "": no severity`},
	} {
		var out, errb bytes.Buffer
		if got := run(tc.args, &out, &errb); got != tc.status || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tc.args, got, errb.String(), tc.status, tc.stderr)
		}
	}
}

// TestVersion: the build, the CPU line that bench and eval's results.json
// also carry, and where CUDA stands.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if st := run([]string{"version"}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "subtta ") || !strings.Contains(lines[1], fmt.Sprintf("%d threads", runtime.GOMAXPROCS(0))) || !strings.HasPrefix(lines[2], "cuda: ") {
		t.Errorf("version printed\n%s", out.String())
	}
}

func TestTokenizeAndClassify(t *testing.T) {
	vocab := fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz")
	var out, errb bytes.Buffer
	if st := run([]string{"tokenize", "--vocab", vocab, "Hello World!"}, &out, &errb); st != 0 {
		t.Fatalf("tokenize: status %d: %s", st, errb.String())
	}
	var rows []struct{ IDs []int }
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 || len(rows[0].IDs) == 0 {
		t.Fatalf("tokenize output %q: %v", out.String(), err)
	}
	const rel = "fixtures/clip-tiny.openai.safetensors"
	model, modelConfig := fixture.Path(t, rel), fixture.ModelConfig(t, rel)
	img := fixture.Path(t, "assets/clip/CLIP.png")
	out.Reset()
	if st := run([]string{"classify", "--json", "--model", model, "--model-config", modelConfig, "--vocab", vocab, "--labels", "a diagram,a dog,a cat", img}, &out, &errb); st != 0 {
		t.Fatalf("classify: status %d: %s", st, errb.String())
	}
	var res []struct {
		Probs []struct {
			Label string
			Prob  float64
		}
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 1 || len(res[0].Probs) != 3 {
		t.Fatalf("classify output %q: %v", out.String(), err)
	}
	var sum float64
	for i, p := range res[0].Probs {
		sum += p.Prob
		if want := []string{"a diagram", "a dog", "a cat"}[i]; p.Label != want {
			t.Errorf("label %d is %q, want %q (the order given)", i, p.Label, want)
		}
	}
	if sum < 0.999 || sum > 1.001 {
		t.Errorf("probabilities sum to %g", sum)
	}
}

// TestLongPromptWarns classifies with a template longer than the built-in
// model's context: every prompt is cut, and the user is told which.
func TestLongPromptWarns(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img.png")
	f, _ := os.Create(img)
	png.Encode(f, image.NewNRGBA(image.Rect(0, 0, 32, 32)))
	f.Close()
	long := "a photo that goes on and on about many things before it names the {}."
	var out, errb bytes.Buffer
	if st := run([]string{"classify", "--labels", "cat,dog", "--template", long, img}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	if !strings.Contains(errb.String(), `warning: "a photo that goes on`) || !strings.Contains(errb.String(), "it is cut") {
		t.Errorf("no warning about the cut prompts: %q", errb.String())
	}
}

// TestInterspersedFlags: flags before, between and after the arguments,
// the standard flag package's -name as --name, "--" ending the flags.
func TestInterspersedFlags(t *testing.T) {
	c := &cobra.Command{Use: "x"}
	dtype := c.Flags().String("dtype", "", "")
	zstd := c.Flags().Bool("zstd", false, "")
	args, err := parseCommandLine(c, []string{"src", "-dtype", "f16", "dst", "--zstd", "--", "-odd"})
	if err != nil {
		t.Fatal(err)
	}
	if *dtype != "f16" || !*zstd || !slices.Equal(args, []string{"src", "dst", "-odd"}) {
		t.Errorf("dtype %q, zstd %v, args %q", *dtype, *zstd, args)
	}
}

// TestModelConfig loads a checkpoint that stores no configuration and
// whose heads are not OpenAI's width/64: without --model-config the heads
// are inferred (wrongly) with a warning; with it the features are the
// model's.
func TestModelConfig(t *testing.T) {
	s, cfg, model, cfgPath := headsModel(t)
	ref, err := clip.New(s, &cfg, clip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.EncodeText([][]int{mustTokenize(t, "a cat", cfg.Text.ContextLength)})
	if err != nil {
		t.Fatal(err)
	}
	embed := func(extra ...string) ([]float64, string) {
		var out, errb bytes.Buffer
		args := append([]string{"embed", "--model", model, "--text", "a cat"}, extra...)
		if st := run(args, &out, &errb); st != 0 {
			t.Fatalf("embed %q: status %d: %s", extra, st, errb.String())
		}
		var res []struct{ Features []float64 }
		if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 1 {
			t.Fatalf("embed output %q: %v", out.String(), err)
		}
		return res[0].Features, errb.String()
	}
	matches := func(a []float64) bool {
		w := want.Value().Data().F64()
		for i := range w {
			if math.Abs(a[i]-w[i]) > 1e-5*(1+math.Abs(w[i])) {
				return false
			}
		}
		return true
	}
	inferred, warn := embed()
	if !strings.Contains(warn, "2 vision and 2 text heads assumed") {
		t.Errorf("no warning about inferred heads: %q", warn)
	}
	if matches(inferred) {
		t.Error("features with 2 heads equal those with 4: the test cannot tell them apart")
	}
	given, warn := embed("--model-config", cfgPath)
	if warn != "" {
		t.Errorf("warning with --model-config: %q", warn)
	}
	if !matches(given) {
		t.Error("features with --model-config differ from the model's")
	}
}

// headsModel writes a checkpoint that stores no configuration and whose
// heads are not OpenAI's width/64 (4 at width 128), and its configuration
// in convert's JSON form beside it.
func headsModel(t *testing.T) (s *weights.State, cfg weights.CLIPConfig, model, cfgPath string) {
	t.Helper()
	cfg = pretrain.SmallCIFAR()
	cfg.Vision.Layers, cfg.Text.Layers = 1, 1
	cfg.Vision.Heads, cfg.Text.Heads = 4, 4 // width 128: the rule says 2
	s, err := pretrain.RandomState(&cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model = filepath.Join(dir, "model.safetensors")
	if err := weights.WriteFile(model, s.Tensors(weights.F32), nil); err != nil {
		t.Fatal(err)
	}
	cj, _ := json.Marshal(cfg)
	cfgPath = filepath.Join(dir, "config.json")
	os.WriteFile(cfgPath, cj, 0o644)
	return s, cfg, model, cfgPath
}

// TestConvertModelConfig: convert of a checkpoint that stores no
// configuration warns that the heads are assumed, as classify does, and
// writes no configuration, so that the output's readers know the heads
// are a guess; with --model-config or --arch the architecture given is
// written; both at once are refused.
func TestConvertModelConfig(t *testing.T) {
	_, cfg, model, cfgPath := headsModel(t)
	dir := t.TempDir()
	convert := func(dst string, extra ...string) (*weights.State, *weights.CLIPConfig, string) {
		t.Helper()
		var out, errb bytes.Buffer
		args := append([]string{"convert", model, filepath.Join(dir, dst)}, extra...)
		if st := run(args, &out, &errb); st != 0 {
			t.Fatalf("convert %q: status %d: %s", extra, st, errb.String())
		}
		s, c, err := weights.LoadCLIP(filepath.Join(dir, dst))
		if err != nil {
			t.Fatal(err)
		}
		return s, c, errb.String()
	}
	s, c, warn := convert("guessed.safetensors")
	if !strings.Contains(warn, "warning: "+model+" has no stored configuration: 2 vision and 2 text heads assumed") {
		t.Errorf("no warning about inferred heads: %q", warn)
	}
	if _, ok := s.Metadata["config"]; ok || !c.Inferred {
		t.Errorf("the guessed heads were written as known: metadata config %q, read back Inferred=%v", s.Metadata["config"], c.Inferred)
	}
	s, c, warn = convert("given.safetensors", "--model-config", cfgPath)
	if warn != "" {
		t.Errorf("warning with --model-config: %q", warn)
	}
	if s.Metadata["config"] == "" || c.Inferred || c.Vision.Heads != cfg.Vision.Heads || c.Text.Heads != cfg.Text.Heads {
		t.Errorf("with --model-config: read back %+v (metadata config %q), want the %d/%d heads given", c, s.Metadata["config"], cfg.Vision.Heads, cfg.Text.Heads)
	}
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"--arch", "ViT-B-32"}, 1, "the config wants"},
		{[]string{"--arch", "ViT-B/32"}, 2, "--arch: weights: unknown architecture"},
		{[]string{"--arch", "ViT-B-32", "--model-config", cfgPath}, 2, "give one"},
		{[]string{"--model-config", filepath.Join(dir, "none.json")}, 2, "--model-config"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"convert", model, filepath.Join(dir, "x.safetensors")}, tc.args...)
		if st := run(args, &out, &errb); st != tc.status || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: status %d, stderr %q; want %d and %q", tc.args, st, errb.String(), tc.status, tc.want)
		}
	}
}

func mustTokenize(t *testing.T, text string, ctx int) []int {
	ids, err := textenc.ByteTokenizer{}.Tokenize(text, ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestArchFlag: --arch takes open_clip's model names; the named
// architecture is checked against the checkpoint's tensors, and the flag's
// misuses are refused with the flag named.
func TestArchFlag(t *testing.T) {
	cfg := pretrain.SmallCIFAR()
	cfg.Vision.Layers, cfg.Text.Layers = 1, 1
	s, err := pretrain.RandomState(&cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "model.safetensors")
	if err := weights.WriteFile(model, s.Tensors(weights.F32), nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"--model", model, "--arch", "ViT-B-32"}, 1, "the config wants"},
		{[]string{"--model", model, "--arch", "ViT-B/32"}, 2, "--arch: weights: unknown architecture \"ViT-B/32\" (known: ViT-B-16"},
		{[]string{"--model", model, "--arch", "ViT-B-32", "--model-config", "x.json"}, 2, "give one"},
		{[]string{"--arch", "ViT-B-32"}, 2, "need --model"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"embed", "--text", "a cat"}, tc.args...)
		st := run(args, &out, &errb)
		if st != tc.status || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: status %d, stderr %q; want %d and %q", tc.args, st, errb.String(), tc.status, tc.want)
		}
	}
}

// TestNaNWeightsRefused: a checkpoint with a NaN weight is refused naming
// the tensor, rather than classifying into NaN probabilities.
func TestNaNWeightsRefused(t *testing.T) {
	dir := t.TempDir()
	s, _, err := weights.LoadCLIPBytes("builtin.safetensors.zst", builtin.ModelBytes())
	if err != nil {
		t.Fatal(err)
	}
	const bad = "visual.transformer.resblocks.2.mlp.c_fc.weight"
	p, err := s.Param(bad)
	if err != nil {
		t.Fatal(err)
	}
	p.Data[7] = float32(math.NaN())
	model := filepath.Join(dir, "nan.safetensors")
	if err := weights.WriteFile(model, s.Tensors(weights.F32), s.Metadata); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img.png")
	f, _ := os.Create(img)
	png.Encode(f, image.NewNRGBA(image.Rect(0, 0, 32, 32)))
	f.Close()
	var out, errb bytes.Buffer
	st := run([]string{"classify", "--model", model, "--labels", "cat,dog", img}, &out, &errb)
	if st != 1 || !strings.Contains(errb.String(), bad) || !strings.Contains(errb.String(), "NaN") {
		t.Errorf("status %d, stderr %q, stdout %q; want 1 and an error naming %s", st, errb.String(), out.String(), bad)
	}
}

// TestTokenizeOffline: without --vocab (and $SUBTTA_VOCAB), tokenize uses
// the built-in model's byte-level tokenizer, padded to its context, says
// so, and downloads nothing.
func TestTokenizeOffline(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("SUBTTA_CACHE", cache)
	t.Setenv("SUBTTA_VOCAB", "")
	var out, errb bytes.Buffer
	if st := run([]string{"tokenize", "a photo of a cat."}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	var rows []struct{ IDs, Padded []int }
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	tok := textenc.ByteTokenizer{}
	want, _ := tok.Tokenize("a photo of a cat.", builtinContext(t), true)
	if !slices.Equal(rows[0].IDs, tok.Encode("a photo of a cat.")) || !slices.Equal(rows[0].Padded, want) {
		t.Errorf("ids %v, padded %v; want the byte-level tokenizer's", rows[0].IDs, rows[0].Padded)
	}
	if !strings.Contains(errb.String(), "byte-level") || !strings.Contains(errb.String(), "--vocab") {
		t.Errorf("stderr %q: want a note that these are byte-level tokens and that --vocab gives CLIP's BPE", errb.String())
	}
	if entries, _ := os.ReadDir(cache); len(entries) > 0 {
		t.Errorf("tokenize wrote into the cache: %v", entries)
	}
}
