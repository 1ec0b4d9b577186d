package tta

import (
	"strings"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/textenc"
	"github.com/subtta/subtta/tta/feature"
	"github.com/subtta/subtta/tta/internal/fxt"
	"github.com/subtta/subtta/tta/internal/fxtmodel"
)

// TestTPTFixture replays tta2's TPT run on the fixture model over the
// stored views: per image from the initial context, the prompts' tokens,
// the marginal entropy of the selected views, the context's gradient
// through the text tower, the context after one AdamW step, the new text
// features and the base view's logits. Tolerances, relative to each
// tensor's max: 1e-5 for what a forward pass gives (fp32 torch against
// this port's float32 tower), 1e-4 for the context's gradient, which
// adds the text tower's backward in float32, and 1e-5 for the context
// after the step (AdamW's first step is nearly lr·sign(g), insensitive to
// the gradient's rounding).
//
// It runs on the CPU and again with a device set (autograd.SetDevice:
// kernel.Host as the seam, devicetest.Float64Host), where the text tower
// runs as one op (autograd.TextTowerOnDevice) recording TPT's pass and its
// backward to the context, within the same tolerances.
func TestTPTFixture(t *testing.T) {
	t.Run("cpu", tptFixture)
	t.Run("device seam", func(t *testing.T) {
		d := &devicetest.Float64Host{Device: kernel.Host}
		autograd.SetDevice(d)
		defer autograd.SetDevice(nil)
		tptFixture(t)
		if d.Down == 0 {
			t.Error("nothing came back from the device: the seam was not taken")
		}
	})
}

func tptFixture(t *testing.T) {
	var js struct {
		TPT struct {
			Config struct {
				viewConfig
				Lr          float64 `json:"lr"`
				WeightDecay float64 `json:"weight_decay"`
				Steps       int     `json:"steps"`
				CtxInit     string  `json:"ctx_init"`
			} `json:"config"`
			Prompts []string `json:"prompts"`
		} `json:"tpt"`
		Classnames []string `json:"classnames"`
		Template   string   `json:"prompt_template"`
	}
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	c := js.TPT.Config
	tok, err := textenc.LoadBPETokenizer(fixture.Path(t, "assets/clip/bpe_simple_vocab_16e6.txt.gz"))
	if err != nil {
		t.Fatal(err)
	}
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	m := fxtmodel.TinyModel(t, false)
	if !strings.HasPrefix(js.Template, strings.ReplaceAll(js.TPT.Config.CtxInit, "_", " ")+" {}") {
		t.Skipf("tta2.json: TPT's context %q does not start the template %q", js.TPT.Config.CtxInit, js.Template)
	}
	cfg := TPTConfig{Rho: c.Rho, Template: js.Template, Optimizer: optim.AdamW(c.Lr, c.WeightDecay), Steps: c.Steps}
	tpt, err := NewTPT(m, Heads{Head: x.Dense("tpt.text_features_init"), Classes: js.Classnames, Tokenizer: tok}, c.V, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := x.Ints("tpt.prompt_tokens")
	var got []int
	for _, p := range tpt.prompts {
		got = append(got, p...)
	}
	fxt.CompareInts(t, "tpt.prompt_tokens", got, want)
	fxt.Compare(t, "tpt.ctx_init", fxt.ToF64(tpt.init.Data().F32()), x.Vec("tpt.ctx_init"), 0, fxt.Abs)
	_, text, err := tpt.textNode()
	if err != nil {
		t.Fatal(err)
	}
	fxt.CompareDense(t, "tpt.text_features_init", text, x.Dense("tpt.text_features_init"), 1e-5, fxt.Rel)

	px := viewStream(t, c.viewConfig)
	n := len(c.Images)
	res, err := tpt.StepViews(px, n, c.V)
	if err != nil {
		t.Fatal(err)
	}
	fxt.CompareDense(t, "tpt.output", res.Logits, x.Dense("tpt.output"), 1e-5, fxt.Rel)
	fxt.CompareInts(t, "tpt.pred", res.Preds, x.Ints("tpt.pred"))

	// Image by image: the loss, the gradient and the context after the step.
	losses, grads, after := x.Vec("tpt.loss"), x.Vec("tpt.grad_ctx"), x.Vec("tpt.ctx_after")
	per := len(px) / n
	size := len(grads) / n
	for i := range n {
		_, f, err := tpt.forward(px[i*per:(i+1)*per], c.V, false)
		if err != nil {
			t.Fatal(err)
		}
		fv, _ := feature.NormalizeRows(f)
		r, err := tpt.tune(fv)
		if err != nil {
			t.Fatal(err)
		}
		fxt.Compare(t, "tpt.loss", []float64{r.loss}, losses[i:i+1], 1e-5, fxt.Rel)
		fxt.Compare(t, "tpt.grad_ctx", fxt.ToF64(tpt.ctx.Grad().Value().Data().F32()), grads[i*size:(i+1)*size], 1e-4, fxt.Rel)
		fxt.Compare(t, "tpt.ctx_after", fxt.ToF64(tpt.ctx.Data().F32()), after[i*size:(i+1)*size], 1e-5, fxt.Rel)
	}
}
