package vit

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/weights"
)

// Forward tolerance: 1e-5 relative to each tensor's max, the fixtures'
// suggested bound (fp32 vs fp64 differ by ≤7e-7; our summation order differs
// from PyTorch's, which costs a few ulps per dot product).
const forwardTol = 1e-5

// loadTiny builds the vision tower from one of the fixture checkpoints,
// with its configuration file.
func loadTiny(t *testing.T, file string, opt Options) *Model {
	t.Helper()
	s, cfg := fixturefile.CLIP(t, "fixtures/"+file)
	m, err := New(s, cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pixels reads preprocess.safetensors:pixel_values as [N, C·H·W].
func pixels(t *testing.T) (*smat.Dense[float32], []int) {
	t.Helper()
	f, err := weights.Open(fixture.Path(t, "fixtures/preprocess.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	px, shape, err := f.Float32("pixel_values")
	if err != nil {
		t.Fatal(err)
	}
	return smat.NewDense[float32](smat.WithShape(shape[0], len(px)/shape[0]), smat.WithBacking(px)), shape
}

func TestImageFeaturesMatchPyTorch(t *testing.T) {
	ref, err := weights.Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	px, _ := pixels(t)
	for _, tc := range []struct{ file, want string }{
		{"clip-tiny.openai.safetensors", "image_features"},
		{"clip-tiny.hf.safetensors", "image_features"},
		{"clip-tiny.openai-fp16.pt", "image_features_fp16w"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			m := loadTiny(t, tc.file, Options{})
			want, shape, err := ref.Float32(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			got := m.Forward(px, nil).Value()
			if s := got.Shape(); s[0] != shape[0] || s[1] != shape[1] {
				t.Fatalf("features shape %v, want %v", s, shape)
			}
			fixture.CheckRelErr(t, tc.want, got.Data().F32(), want, forwardTol)
		})
	}
}

// TestIntermediatesMatchPyTorch compares every stored stage of image 0
// (run as a batch of one) with visual.image0.* of forward.safetensors.
func TestIntermediatesMatchPyTorch(t *testing.T) {
	ref, err := weights.Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	px, _ := pixels(t)
	row := px.Data().F32()[:px.Shape()[1]]
	img := smat.NewDense[float32](smat.WithShape(1, len(row)), smat.WithBacking(row))
	m := loadTiny(t, "clip-tiny.openai.safetensors", Options{})
	got := map[string][]float32{}
	m.Forward(img, func(name string, x smat.Tensor) { got[name] = x.Value().Data().F32() })
	const prefix = "visual.image0."
	checked := 0
	for _, name := range ref.Names() {
		if !strings.HasPrefix(name, prefix) || strings.HasSuffix(name, "attn_probs") {
			continue // attention probabilities stay inside the fused attention op
		}
		stage := strings.TrimPrefix(name, prefix)
		want, _, err := ref.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		g, ok := got[stage]
		if !ok {
			t.Errorf("%s: the forward pass does not emit stage %q", name, stage)
			continue
		}
		fixture.CheckRelErr(t, stage, g, want, forwardTol)
		checked++
	}
	if checked == 0 {
		t.Fatal("no visual.image0.* tensors in the fixture")
	}
	want, _, err := ref.Float32("image0_features_batch1")
	if err == nil {
		fixture.CheckRelErr(t, "image0_features_batch1", got["final"], want, forwardTol)
	}
}

func ExampleModel_LayerNormNames() {
	cfg := &weights.CLIPConfig{EmbedDim: 4, LayerNormEps: weights.DefaultLayerNormEps,
		Vision: weights.VisionConfig{Width: 8, Layers: 1, Heads: 2, MLPWidth: 16, PatchSize: 4, ImageSize: 8}}
	m, err := Random(cfg, 1, Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.Join(m.LayerNormNames(), "\n"))
	// Output:
	// visual.ln_pre.weight
	// visual.ln_pre.bias
	// visual.transformer.resblocks.0.ln_1.weight
	// visual.transformer.resblocks.0.ln_1.bias
	// visual.transformer.resblocks.0.ln_2.weight
	// visual.transformer.resblocks.0.ln_2.bias
	// visual.ln_post.weight
	// visual.ln_post.bias
}

// TestTraceDoesNotChangeFeatures checks the features computed with the last
// block for the class tokens only (no trace) against those of the full
// computation (with a trace).
func TestTraceDoesNotChangeFeatures(t *testing.T) {
	px, _ := pixels(t)
	m := loadTiny(t, "clip-tiny.openai.safetensors", Options{})
	full := m.Forward(px, func(string, smat.Tensor) {}).Value().Data().F32()
	pooled := m.Forward(px, nil).Value().Data().F32()
	// The class-token rows go through the same operations in the same
	// order either way (measured: identical); 1e-6 is a few float32 ulps.
	fixture.CheckRelErr(t, "features, class tokens only against full", pooled, full, 1e-6)
}

// TestNamedParams: the tower's named parameters are its "visual." tensors,
// each once, in OpenAI's order, each holding the checkpoint's values under
// its name, and the LayerNorm names pair with LayerNorms() γ then β.
func TestNamedParams(t *testing.T) {
	s, cfg := fixturefile.CLIP(t, "fixtures/clip-tiny.openai.safetensors")
	m, err := New(s, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range cfg.Names() {
		if strings.HasPrefix(n, "visual.") {
			want = append(want, n)
		}
	}
	byName := map[string]smat.Matrix{}
	var got []string
	for _, p := range m.Params {
		got = append(got, p.Name)
		byName[p.Name] = p.Value
		data, err := s.Get(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Value.Data().F32(), data) {
			t.Errorf("%s: the values differ from the checkpoint's", p.Name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("named parameters %v, want %v", got, want)
	}
	names := m.LayerNormNames()
	for i, ln := range m.LayerNorms() {
		if byName[names[2*i]] != ln.Gamma || byName[names[2*i+1]] != ln.Beta {
			t.Errorf("LayerNorm %d: names %s, %s do not name its γ and β", i, names[2*i], names[2*i+1])
		}
	}
}
