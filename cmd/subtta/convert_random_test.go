package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/textenc"
)

// TestConvertRandom: convert --random writes a model of the architecture
// given that loads without --model-config or a vocabulary (the byte-level
// tokenizer), whose image features are finite and differ between images;
// the same seed writes the same bytes, another seed other weights; and the
// flags it cannot honour are refused.
func TestConvertRandom(t *testing.T) {
	dir := t.TempDir()
	arch := filepath.Join(dir, "tiny.json")
	os.WriteFile(arch, []byte(`{"embed_dim": 32, "image_resolution": 64, "vision_layers": 2, "vision_width": 64,
		"vision_patch_size": 16, "context_length": 77, "vocab_size": 49408, "transformer_width": 64,
		"transformer_heads": 2, "transformer_layers": 1}`), 0o644)
	write := func(name string, args ...string) string {
		t.Helper()
		dst := filepath.Join(dir, name)
		var stdout, stderr bytes.Buffer
		if st := run(append([]string{"convert", "--random", "--model-config", arch, dst}, args...), &stdout, &stderr); st != 0 {
			t.Fatalf("convert --random: status %d: %s", st, stderr.String())
		}
		if !strings.Contains(stdout.String(), "random weights") {
			t.Errorf("stdout %q", stdout.String())
		}
		b, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a, again, other := write("a.safetensors"), write("b.safetensors"), write("c.safetensors", "--seed", "2")
	if a != again {
		t.Error("the same seed wrote different files")
	}
	if a == other {
		t.Error("--seed 2 wrote the same file as seed 1")
	}
	b, err := openModel(filepath.Join(dir, "a.safetensors"), "", "", "", kernel.FP32, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c := b.Model.Config
	if c.Vision.Width != 64 || c.Vision.Layers != 2 || c.Vision.ImageSize != 64 || c.Text.VocabSize != textenc.ByteVocabSize || c.Inferred {
		t.Fatalf("config read back: %+v", c)
	}
	px := make([]float32, 2*b.Preprocessor.OutputLen())
	for i := range px {
		px[i] = float32(math.Sin(float64(i)))
	}
	for i := len(px) / 2; i < len(px); i++ {
		px[i] = -px[i]
	}
	f, err := b.Model.EncodeImage(px, 2)
	if err != nil {
		t.Fatal(err)
	}
	v := f.Value().Data().F64()
	same := true
	for j := range len(v) / 2 {
		if math.IsNaN(v[j]) || math.IsInf(v[j], 0) {
			t.Fatalf("feature %d is %v", j, v[j])
		}
		same = same && v[j] == v[len(v)/2+j]
	}
	if same {
		t.Error("two different images have the same features")
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"convert", "--random", filepath.Join(dir, "x.safetensors")}, "--random needs --arch or --model-config"},
		{[]string{"convert", "--random", "--model-config", arch, "--dtype", "int8", filepath.Join(dir, "x.safetensors")}, "int8 is not offered"},
		{[]string{"convert", "--random", "--model-config", arch, filepath.Join(dir, "x.safetensors.zst")}, "zstd does not shrink"},
		{[]string{"convert", "--random", "--model-config", arch, "src", filepath.Join(dir, "x.safetensors")}, "want DST only"},
	} {
		var stdout, stderr bytes.Buffer
		if st := run(tc.args, &stdout, &stderr); st != 2 || !strings.Contains(stderr.String(), tc.msg) {
			t.Errorf("%q: status %d, %q; want 2 and %q", tc.args, st, stderr.String(), tc.msg)
		}
	}
}

// TestConvertInterrupted sends SIGINT while convert writes its temporary
// file: convert stops with status 130, says DST was not written, and
// leaves nothing in the folder (the temporary file stayed there when the
// signal ended the process).
func TestConvertInterrupted(t *testing.T) {
	dir := t.TempDir()
	arch := filepath.Join(dir, "arch.json")
	// About 100 MB to write: a tenth of a second or more, against the
	// millisecond the test takes to see the temporary file.
	if err := os.WriteFile(arch, []byte(`{"embed_dim": 512, "image_resolution": 224, "vision_layers": 4, "vision_width": 512,
		"vision_patch_size": 32, "context_length": 77, "vocab_size": 49408, "transformer_width": 512,
		"transformer_heads": 8, "transformer_layers": 4}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	stop := interruptWhen(t, time.Millisecond, func() bool {
		entries, _ := os.ReadDir(out)
		return len(entries) > 0 && strings.HasPrefix(entries[0].Name(), ".x.safetensors.tmp")
	})
	dst := filepath.Join(out, "x.safetensors")
	st, stdout, stderr := runCLI("convert", "--random", "--model-config", arch, dst)
	stop()
	if st != 130 || stderr != "interrupted: "+dst+" not written (left as it was)\n" || stdout != "" {
		t.Fatalf("status %d, stdout %q, stderr %q: want 130 and DST not written", st, stdout, stderr)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("%d files left in the folder: %s...", len(entries), entries[0].Name())
	}
}

// TestConvertRandomOpenCLIPKeys: an open_clip --model-config whose
// vision_cfg.heads is not the heads the model gets (open_clip's
// width/head_width) is refused naming the key, not written with other
// heads; one with keys the architecture is not read from is written with
// a warning that names them.
func TestConvertRandomOpenCLIPKeys(t *testing.T) {
	dir := t.TempDir()
	config := func(name, vision, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(`{"embed_dim": 32, "vision_cfg": {"image_size": 64, "layers": 1, "width": 96, "patch_size": 16`+vision+
			`}, "text_cfg": {"context_length": 16, "vocab_size": 259, "width": 64, "heads": 2, "layers": 1`+text+`}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		config, warning, err string
	}{
		{config("heads.json", `, "heads": 3`, ``), "", "vision_cfg.heads 3"},
		{config("plain.json", ``, ``), "", ""},
		{config("more.json", `, "no_ln_pre": true, "ls_init_value": null`, `, "pool_type": "last"`), "text_cfg.pool_type, vision_cfg.no_ln_pre not read", ""},
	} {
		dst := filepath.Join(dir, filepath.Base(c.config)+".safetensors")
		var stdout, stderr bytes.Buffer
		st := run([]string{"convert", "--random", "--model-config", c.config, dst}, &stdout, &stderr)
		_, statErr := os.Stat(dst)
		switch {
		case c.err != "" && (st == 0 || !strings.Contains(stderr.String(), c.err) || statErr == nil):
			t.Errorf("%s: status %d, stderr %q, DST written %v; want an error with %q and no DST", c.config, st, stderr.String(), statErr == nil, c.err)
		case c.err == "" && (st != 0 || statErr != nil):
			t.Errorf("%s: status %d, stderr %q", c.config, st, stderr.String())
		case c.err == "" && c.warning == "" && stderr.Len() > 0:
			t.Errorf("%s: stderr %q; want nothing", c.config, stderr.String())
		case c.warning != "" && !strings.Contains(stderr.String(), "warning: --model-config "+c.config+": "+c.warning):
			t.Errorf("%s: stderr %q; want a warning with %q", c.config, stderr.String(), c.warning)
		}
	}
}
