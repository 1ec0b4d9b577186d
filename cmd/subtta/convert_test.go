package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/pretrain"
	"github.com/subtta/subtta/weights"
)

// TestConvertInt8 converts the built-in model and the fixture model with
// --dtype int8 and checks that the file stores in int8 exactly the weights
// --precision int8 runs in int8; that the file is smaller than the F32
// one; that its image features under --precision int8 are the original
// model's under --precision int8, bit for bit when every weight quantises
// to the same values and scales (else within a cosine of 0.9998); and
// that under fp32 they stay within a cosine of the original fp32 features
// (the dequantised weights are within half a quantisation step of the
// originals).
func TestConvertInt8(t *testing.T) {
	dir := t.TempDir()
	builtinPath := filepath.Join(dir, "builtin.safetensors.zst")
	if err := os.WriteFile(builtinPath, builtin.ModelBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	jpegs, err := builtin.JPEGs(32)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		// model returns the source and the architecture flags it needs.
		model func(t *testing.T) (src string, flags []string)
		// minCos bounds the cosine of an image's fp32 features from the
		// int8 file and from the original over 32 images: measured
		// 0.99975 (built-in, trained) and 0.999994 (fixture, random
		// weights); the bounds leave about ten times the measured 1 − cos.
		minCos float64
	}{
		{"builtin", func(*testing.T) (string, []string) { return builtinPath, nil }, 0.9975},
		{"fixture", func(t *testing.T) (string, []string) {
			const rel = "fixtures/clip-tiny.openai.safetensors"
			return fixture.Path(t, rel), []string{"--model-config", fixture.ModelConfig(t, rel)}
		}, 0.99995},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, flags := c.model(t)
			convert := func(dtype string) (string, string) {
				t.Helper()
				dst := filepath.Join(dir, c.name+"-"+dtype+".safetensors")
				var out, errb bytes.Buffer
				args := append([]string{"convert", "--dtype", dtype, src, dst}, flags...)
				if st := run(args, &out, &errb); st != 0 {
					t.Fatalf("convert --dtype %s: status %d: %s", dtype, st, errb.String())
				}
				return dst, out.String()
			}
			f32Path, _ := convert("f32")
			i8Path, line := convert("int8")

			// The file: count its I8 tensors, each beside its scales.
			f, err := weights.Open(i8Path)
			if err != nil {
				t.Fatal(err)
			}
			var int8Names []string
			for _, name := range f.Names() {
				if ti, _ := f.Info(name); ti.DType == weights.I8 {
					int8Names = append(int8Names, name)
					if _, ok := f.Info(name + weights.Int8ScaleSuffix); !ok {
						t.Errorf("%s: no scales", name)
					}
				}
			}
			f.Close()
			if want := fmt.Sprintf("(%d weight tensors quantised to int8", len(int8Names)); !strings.Contains(line, want) {
				t.Errorf("convert said %q, want %q", line, want)
			}

			orig, err := clip.Load(src, clip.Options{Config: archConfig(t, flags)})
			if err != nil {
				t.Fatal(err)
			}
			stored, err := clip.Load(i8Path, clip.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// The I8 tensors are the layers SetPrecision runs in int8: the
			// patch projection and every block's four linear layers.
			var lowNames []string
			name := func(params []autograd.Named, l *autograd.LinearParams) string {
				for _, p := range params {
					if p.Value == l.Weight {
						return p.Name
					}
				}
				t.Fatalf("a linear layer's weight is not among the tower's parameters")
				return ""
			}
			lowNames = append(lowNames, name(orig.Vision.Params, orig.Vision.Patch))
			for _, tower := range []struct {
				params []autograd.Named
				blocks []*autograd.BlockParams
			}{{orig.Vision.Params, orig.Vision.Blocks}, {orig.Text.Params, orig.Text.Blocks}} {
				for _, b := range tower.blocks {
					for _, l := range []*autograd.LinearParams{b.QKV, b.Out, b.FC, b.Proj} {
						lowNames = append(lowNames, name(tower.params, l))
					}
				}
			}
			slices.Sort(lowNames)
			slices.Sort(int8Names)
			if !slices.Equal(int8Names, lowNames) {
				t.Errorf("I8 tensors %v, want the layers --precision int8 quantises %v", int8Names, lowNames)
			}

			pixels := preprocessed(t, orig, jpegs)
			features := func(m *clip.Model) []float32 {
				t.Helper()
				x, err := m.EncodeImage(slices.Clone(pixels), len(jpegs))
				if err != nil {
					t.Fatal(err)
				}
				return slices.Clone(x.Value().Data().F32())
			}
			fp32Orig, fp32Stored := features(orig), features(stored)
			worst := minCosine(fp32Orig, fp32Stored, len(jpegs))
			t.Logf("fp32: lowest cosine of an image's features, int8 file vs original: %.7f", worst)
			if worst < c.minCos {
				t.Errorf("fp32 features of the int8 file: cosine %.7f to the original's, want ≥ %g", worst, c.minCos)
			}

			sizeF32, sizeI8 := fileSize(t, f32Path), fileSize(t, i8Path)
			t.Logf("%s: %d bytes in F32, %d bytes with int8 weights (%.1f%%)", c.name, sizeF32, sizeI8, 100*float64(sizeI8)/float64(sizeF32))
			if sizeI8 >= sizeF32 {
				t.Errorf("int8 file of %d bytes, no smaller than the F32 one of %d", sizeI8, sizeF32)
			}

			if err := kernel.CheckPrecision(kernel.Int8); err != nil {
				t.Skipf("int8 features not compared: %v", err)
			}
			same := sameQuantization(t, src, i8Path, archConfig(t, flags), int8Names)
			for _, m := range []*clip.Model{orig, stored} {
				if err := m.SetPrecision(kernel.Int8); err != nil {
					t.Fatal(err)
				}
			}
			i8Orig, i8Stored := features(orig), features(stored)
			if same {
				// Same int8 values and scales, same F32 tensors: the same
				// arithmetic.
				for i := range i8Orig {
					if math.Float32bits(i8Orig[i]) != math.Float32bits(i8Stored[i]) {
						t.Fatalf("int8 features differ at %d: %g from the original, %g from the int8 file", i, i8Orig[i], i8Stored[i])
					}
				}
				t.Logf("int8: features bit for bit equal")
			} else {
				// A scale one ulp apart changes its channel's outputs by
				// a relative 2⁻²³, which can move an activation across a
				// rounding edge of its 8-bit quantisation in the next
				// layer: a step of the row's range/255. Every scale of
				// the built-in model one ulp up gives a lowest cosine of
				// 0.99998 over these images; the bound is ten times that
				// 1 − cos.
				cos := minCosine(i8Orig, i8Stored, len(jpegs))
				t.Logf("int8: some scales re-quantise one ulp apart; lowest cosine %.9f", cos)
				if cos < 0.9998 {
					t.Errorf("int8 features of the int8 file: cosine %.9f to the original's under int8, want ≥ 0.9998", cos)
				}
			}
		})
	}
}

// archConfig reads the --model-config of flags, or nil.
func archConfig(t *testing.T, flags []string) *weights.CLIPConfig {
	t.Helper()
	if len(flags) < 2 {
		return nil
	}
	c, err := weights.ReadConfig(flags[1])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sameQuantization reports whether every int8 weight of the model at src,
// quantised as --precision int8 does, has the values and scales that
// the same weight loaded from the int8 file at i8 quantises to again; the
// values must be equal (the scales may be one ulp apart).
func sameQuantization(t *testing.T, src, i8 string, cfg *weights.CLIPConfig, names []string) bool {
	t.Helper()
	a, _, err := weights.LoadCLIPWith(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := weights.LoadCLIP(i8)
	if err != nil {
		t.Fatal(err)
	}
	same := true
	for _, name := range names {
		pa, _ := a.Param(name)
		pb, _ := b.Param(name)
		rows := pa.Shape[0]
		qa, err := kernel.QuantizeInt8(name, pa.Data, rows, len(pa.Data)/rows)
		if err != nil {
			t.Fatal(err)
		}
		qb, err := kernel.QuantizeInt8(name, pb.Data, rows, len(pb.Data)/rows)
		if err != nil {
			t.Fatal(err)
		}
		va, sa := qa.Unpack()
		vb, sb := qb.Unpack()
		if !slices.Equal(va, vb) {
			t.Fatalf("%s: the int8 file's weight quantises to other int8 values than the original's", name)
		}
		same = same && slices.Equal(sa, sb)
	}
	return same
}

// preprocessed decodes and preprocesses jpegs for m.
func preprocessed(t *testing.T, m *clip.Model, jpegs [][]byte) []float32 {
	t.Helper()
	pre, err := m.Preprocessor()
	if err != nil {
		t.Fatal(err)
	}
	var pixels []float32
	for i, b := range jpegs {
		img, err := data.Decode(fmt.Sprint(i), b)
		if err != nil {
			t.Fatal(err)
		}
		x, err := pre.TransformImage(nil, img)
		if err != nil {
			t.Fatal(err)
		}
		pixels = append(pixels, x...)
	}
	return pixels
}

// minCosine is the lowest cosine between rows of a and b ([n, d] each).
func minCosine(a, b []float32, n int) float64 {
	d := len(a) / n
	worst := 1.0
	for i := 0; i < n; i++ {
		var ab, aa, bb float64
		for j := i * d; j < (i+1)*d; j++ {
			ab += float64(a[j]) * float64(b[j])
			aa += float64(a[j]) * float64(a[j])
			bb += float64(b[j]) * float64(b[j])
		}
		worst = min(worst, ab/math.Sqrt(aa*bb))
	}
	return worst
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestConvertInt8Errors: --dtype int8 is listed in the help and in the
// error for an unknown dtype, and a NaN in a weight to quantise is an
// error naming the tensor.
func TestConvertInt8Errors(t *testing.T) {
	var out, errb bytes.Buffer
	if st := run([]string{"help", "convert"}, &out, &errb); st != 0 || !strings.Contains(out.String()+errb.String(), "bf16, or int8") {
		t.Errorf("help convert: status %d, no int8 in %q", st, out.String()+errb.String())
	}
	out.Reset()
	errb.Reset()
	if st := run([]string{"convert", "--dtype", "i4", "a", "b"}, &out, &errb); st != 2 || !strings.Contains(errb.String(), "want f32, f16, bf16 or int8") {
		t.Errorf("--dtype i4: status %d, %q", st, errb.String())
	}

	cfg := pretrain.SmallCIFAR()
	cfg.Vision.Layers, cfg.Text.Layers = 1, 1
	s, err := pretrain.RandomState(&cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	bad := cfg.TensorNames().Text.Blocks[0].Out.Weight
	w, err := s.Get(bad)
	if err != nil {
		t.Fatal(err)
	}
	w[5] = float32(math.NaN())
	dir := t.TempDir()
	model := filepath.Join(dir, "nan.safetensors")
	if err := weights.WriteFile(model, s.Tensors(weights.F32), nil); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if st := run([]string{"convert", "--dtype", "int8", model, filepath.Join(dir, "out.safetensors")}, &out, &errb); st != 1 || !strings.Contains(errb.String(), bad+"[0, 5] = NaN") {
		t.Errorf("NaN weight: status %d, stderr %q; want 1 and the tensor %s named", st, errb.String(), bad)
	}
}

// TestConvertRefusesSource: a DST that is SRC, under another spelling,
// through a link either way or as a file of a SRC folder, is refused and
// SRC is left as it was; --seed without --random is a usage error.
func TestConvertRefusesSource(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.safetensors.zst")
	if err := os.WriteFile(model, builtin.ModelBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.safetensors.zst")
	if err := os.Symlink("model.safetensors.zst", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ src, dst, stderr string }{
		{model, model, "is SRC"},
		{model, dir + "/./sub/../model.safetensors.zst", "is SRC"},
		{model, link, "is SRC"},
		{link, model, "is SRC"},
		{dir, model, "a file of SRC " + dir},
	} {
		var out, errb bytes.Buffer
		if st := run([]string{"convert", "--dtype", "int8", c.src, c.dst}, &out, &errb); st != 2 || !strings.Contains(errb.String(), c.stderr) ||
			!strings.Contains(errb.String(), "write the conversion to another file") {
			t.Errorf("convert %s %s: status %d, stderr %q; want 2 and %q", c.src, c.dst, st, errb.String(), c.stderr)
		}
		if b, err := os.ReadFile(model); err != nil || !bytes.Equal(b, builtin.ModelBytes()) {
			t.Fatalf("convert %s %s changed the source (%v)", c.src, c.dst, err)
		}
	}
	var out, errb bytes.Buffer
	if st := run([]string{"convert", "--seed", "5", model, filepath.Join(dir, "other.safetensors")}, &out, &errb); st != 2 || !strings.Contains(errb.String(), "--seed 5 needs --random") {
		t.Errorf("--seed without --random: status %d, stderr %q", st, errb.String())
	}
}

// TestConvertFolder: a DST that cannot be written (in a folder that does
// not exist, under a file, a folder itself, in a folder that cannot be
// written) is refused before SRC is read or random weights are made, with
// an error naming DST and its folder, in train --export's words, not the
// temporary file beside DST.
func TestConvertFolder(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "model.safetensors.zst")
	if err := os.WriteFile(src, builtin.ModelBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	arch := filepath.Join(dir, "tiny.json")
	if err := os.WriteFile(arch, []byte(tinyKwargs), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nodir")
	cases := []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{src, filepath.Join(missing, "x.safetensors")}, 1, "DST " + filepath.Join(missing, "x.safetensors") + ": folder " + missing + " does not exist"},
		{[]string{"--random", "--model-config", arch, filepath.Join(missing, "x.safetensors")}, 1, "DST " + filepath.Join(missing, "x.safetensors") + ": folder " + missing + " does not exist"},
		// The folder is checked before SRC is read.
		{[]string{filepath.Join(dir, "none.safetensors"), filepath.Join(missing, "x.safetensors")}, 1, "folder " + missing + " does not exist"},
		{[]string{src, filepath.Join(file, "x.safetensors")}, 1, "DST " + filepath.Join(file, "x.safetensors") + ": " + file + " is not a folder"},
		{[]string{src, dir}, 2, "DST " + dir + " is a folder: give a file name"},
		{[]string{"--random", "--model-config", arch, dir}, 2, "DST " + dir + " is a folder: give a file name"},
	}
	if os.Geteuid() == 0 {
		t.Log("the folder that cannot be written is not tried: root writes into any folder")
	} else {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			args   []string
			status int
			want   string
		}{[]string{src, filepath.Join(ro, "x.safetensors")}, 1, "DST " + filepath.Join(ro, "x.safetensors") + ": folder " + ro + " cannot be written: permission denied"})
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		args := append([]string{"convert"}, c.args...)
		if st := run(args, &out, &errb); st != c.status || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), ".tmp") {
			t.Errorf("%q: status %d, stderr %q; want %d and %q (no temporary file named)", args, st, errb.String(), c.status, c.want)
		}
	}
}

// tinyKwargs is a small architecture in OpenAI's CLIP keyword arguments:
// a model of it is written and read in moments.
const tinyKwargs = `{"embed_dim": 32, "image_resolution": 64, "vision_layers": 2, "vision_width": 64,
	"vision_patch_size": 16, "context_length": 77, "vocab_size": 49408, "transformer_width": 64,
	"transformer_heads": 2, "transformer_layers": 1}`

// TestConvertArchDiffers: --arch or --model-config for a SRC that stores
// another architecture is refused with the error classify gives for the
// same model and flag (both towers described, not the first tensor of
// another shape), also where every tensor has the shape the other
// architecture wants (only its heads differ), and DST is not written.
func TestConvertArchDiffers(t *testing.T) {
	dir := t.TempDir()
	arch := filepath.Join(dir, "tiny.json")
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(arch, []byte(tinyKwargs), 0o644); err != nil {
		t.Fatal(err)
	}
	// other differs from what the model stores (the byte-level
	// vocabulary of convert --random) only in the text heads: every
	// tensor has its shape.
	otherKwargs := strings.NewReplacer(`"transformer_heads": 2`, `"transformer_heads": 4`, `"vocab_size": 49408`, `"vocab_size": 259`).Replace(tinyKwargs)
	if err := os.WriteFile(other, []byte(otherKwargs), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "tiny.safetensors")
	var out, errb bytes.Buffer
	if st := run([]string{"convert", "--random", "--model-config", arch, model}, &out, &errb); st != 0 {
		t.Fatalf("convert --random: status %d: %s", st, errb.String())
	}
	img := filepath.Join(dir, "img.jpg")
	jpegs, err := builtin.JPEGs(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, jpegs[0], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, flags := range [][]string{{"--arch", "ViT-B-32"}, {"--model-config", other}} {
		dst := filepath.Join(dir, "out.safetensors")
		out.Reset()
		errb.Reset()
		st := run(append([]string{"convert", model, dst}, flags...), &out, &errb)
		convertErr := strings.TrimPrefix(errb.String(), "subtta convert: ")
		out.Reset()
		errb.Reset()
		run(append([]string{"classify", "--model", model, "--labels", "a,b", img}, flags...), &out, &errb)
		classifyErr := strings.TrimPrefix(errb.String(), "subtta classify: ")
		if want := flags[0] + ": the checkpoint stores another architecture: " + model + " stores vision 2×64"; st != 2 || !strings.HasPrefix(convertErr, want) || convertErr != classifyErr {
			t.Errorf("convert %q: status %d, error %q; want 2, %q..., classify's %q", flags, st, convertErr, want, classifyErr)
		}
		if _, err := os.Stat(dst); err == nil {
			t.Errorf("convert %q wrote DST", flags)
		}
	}
}
