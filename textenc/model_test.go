package textenc

import (
	"math/rand/v2"
	"strings"
	"testing"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/weights"
)

// Forward tolerance: 1e-5 relative to each tensor's max (the fixtures'
// suggested bound for fp32 against PyTorch's fp32).
const forwardTol = 1e-5

// loadTiny builds the text tower from one of the fixture checkpoints, with
// its configuration file.
func loadTiny(t *testing.T, file string) *Model {
	t.Helper()
	s, cfg := fixturefile.CLIP(t, "fixtures/"+file)
	m, err := New(s, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fixtureTokens reads forward.safetensors:text_tokens as sequences.
func fixtureTokens(t *testing.T, ref *weights.File) [][]int {
	t.Helper()
	ids, shape, err := ref.Int64("text_tokens")
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([][]int, shape[0])
	for i := range seqs {
		for _, v := range ids[i*shape[1] : (i+1)*shape[1]] {
			seqs[i] = append(seqs[i], int(v))
		}
	}
	return seqs
}

func TestTextFeaturesMatchPyTorch(t *testing.T) {
	ref, err := weights.Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	tokens := fixtureTokens(t, ref)
	for _, tc := range []struct{ file, want string }{
		{"clip-tiny.openai.safetensors", "text_features"},
		{"clip-tiny.hf.safetensors", "text_features"},
		{"clip-tiny.openai-fp16.pt", "text_features_fp16w"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			m := loadTiny(t, tc.file)
			want, _, err := ref.Float32(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Forward(tokens, nil)
			if err != nil {
				t.Fatal(err)
			}
			fixture.CheckRelErr(t, tc.want, got.Value().Data().F32(), want, forwardTol)
		})
	}
}

// TestTextIntermediatesMatchPyTorch compares every stage of text 0 with
// text.text0.*; the fixture stores all context positions, of which Forward
// computes the first L (the rest cannot affect the pooled token).
func TestTextIntermediatesMatchPyTorch(t *testing.T) {
	ref, err := weights.Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	m := loadTiny(t, "clip-tiny.openai.safetensors")
	tokens := fixtureTokens(t, ref)[:1]
	got := map[string]smat.Tensor{}
	if _, err := m.Forward(tokens, func(name string, x smat.Tensor) { got[name] = x }); err != nil {
		t.Fatal(err)
	}
	const prefix = "text.text0."
	checked := 0
	for _, name := range ref.Names() {
		if !strings.HasPrefix(name, prefix) || strings.HasSuffix(name, "attn_probs") {
			continue
		}
		stage := strings.TrimPrefix(name, prefix)
		want, shape, err := ref.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		g, ok := got[stage]
		if !ok {
			t.Errorf("%s: the forward pass does not emit stage %q", name, stage)
			continue
		}
		gv := g.Value().Data().F32()
		if len(shape) == 2 && len(gv) < len(want) { // [context, width]: compare the computed rows
			want = want[:len(gv)]
		}
		fixture.CheckRelErr(t, stage, gv, want, forwardTol)
		checked++
	}
	if checked == 0 {
		t.Fatal("no text.text0.* tensors in the fixture")
	}
}

func TestForwardRejectsBadTokens(t *testing.T) {
	m := loadTiny(t, "clip-tiny.openai.safetensors")
	for _, bad := range [][][]int{nil, {{}}, {{49406, 1 << 30}}, {make([]int, m.Config.ContextLength+1)}} {
		if _, err := m.Forward(bad, nil); err == nil {
			t.Errorf("Forward(%v…) gave no error", bad)
		}
	}
}

// TestForwardContextGradcheck checks the gradient of the text features
// w.r.t. learnable context vectors (ForwardContext, TPT's prompt learner)
// against float64 central differences, on the fixture's text tower built
// in float64, with the context replacing the first token of two prompts. Tolerance 1e-6, relative to max(1, |numeric|) as
// autograd.Gradcheck measures it.
func TestForwardContextGradcheck(t *testing.T) {
	s, cfg := fixturefile.CLIP(t, "fixtures/clip-tiny.openai.safetensors")
	m, err := New(s, cfg, Options{Float64: true})
	if err != nil {
		t.Fatal(err)
	}
	tokens := [][]int{{49406, 320, 1125, 539, 320, 2368, 269, 49407}, {49406, 320, 1125, 269, 49407}}
	for _, seq := range tokens {
		for _, id := range seq {
			if id >= m.Config.VocabSize {
				t.Skipf("the fixture's vocabulary has %d tokens, the test's prompts use id %d", m.Config.VocabSize, id)
			}
		}
	}
	const n = 1
	rng := rand.New(rand.NewPCG(7, 8))
	vals := make([]float64, n*m.Config.Width)
	for i := range vals {
		vals[i] = 0.02 * rng.NormFloat64()
	}
	ctx := smat.NewDense[float64](smat.WithShape(n, m.Config.Width), smat.WithBacking(vals), smat.WithGrad(true))
	build := func() smat.Tensor {
		f, err := m.ForwardContext(tokens, ctx)
		if err != nil {
			t.Fatal(err)
		}
		return autograd.L2Normalize(f)
	}
	res, err := autograd.Gradcheck(build, []*smat.Dense[float64]{ctx}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worst gradient error %.3g (element %d)", res[0].Err, res[0].Index)
	if res[0].Err > 1e-6 || res[0].Index < 0 {
		t.Errorf("context gradient: analytic %.10g, numeric %.10g (err %.3g)", res[0].Analytic, res[0].Numeric, res[0].Err)
	}
	// A context longer than a prompt's words before its end token is refused.
	long := smat.NewDense[float64](smat.WithShape(3, m.Config.Width))
	if _, err := m.ForwardContext(tokens, long); err == nil {
		t.Error("a context of 3 vectors accepted for a prompt of 3 tokens")
	}
}
